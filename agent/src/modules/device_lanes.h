// Where a module instance's slow calls run (pre_start, on_release, the
// release that precedes a container start): per device, beside the worker.
//
// A task names the device IDs it works on. Tasks that share a device run one
// at a time, in the order they were posted (a release, then the PreStart of
// the next container of that device); tasks on disjoint devices run at the
// same time, on up to `lanes` threads, started when needed and kept until
// Stop(). With one lane this is the single slow lane of ABI 1.7: every task
// in order, one at a time.
//
// A task that could run but finds every lane busy with other devices waits
// for a lane. Post() hands back a LaneWait that says, at any moment, how
// long that has been so far, so that a caller's deadline can leave out time
// spent behind unrelated devices.
//
// Thread safety: thread-safe. Tasks run on the lanes' threads, never on the
// caller's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "util/mutex.h"

namespace devplug::modules {

// How long one task has waited for a free lane while none of its devices
// was busy (thread-safe; stops growing once the task runs).
class LaneWait {
 public:
  using Clock = std::chrono::steady_clock;
  Clock::duration Waited(Clock::time_point now) const;

 private:
  friend class DeviceLanes;
  void Update(bool waiting, Clock::time_point now);
  mutable Mutex mu_;
  Clock::duration total_ DEVPLUG_GUARDED_BY(mu_){};
  std::optional<Clock::time_point> since_ DEVPLUG_GUARDED_BY(mu_);  // waiting now
};

class DeviceLanes {
 public:
  using Clock = std::chrono::steady_clock;
  using Task = std::function<void()>;

  // `name`: the threads' name (15 characters at most); `on_thread_start`
  // runs first on every new lane thread (its per-thread state).
  DeviceLanes(std::string name, size_t lanes, std::function<void()> on_thread_start = {});
  ~DeviceLanes();  // Stop()
  DeviceLanes(const DeviceLanes&) = delete;
  DeviceLanes& operator=(const DeviceLanes&) = delete;

  // Queues `task` for `devices`; what it waits for a lane, as it goes.
  std::shared_ptr<const LaneWait> Post(std::vector<std::string> devices, Task task);
  // Runs every task posted so far, then ends and joins the threads. Tasks
  // posted afterwards are dropped.
  void Stop();

  size_t lanes() const { return lanes_; }
  // Threads started so far (for tests).
  size_t threads() const;

 private:
  struct Queued {
    std::vector<std::string> devices;
    Task task;
    std::shared_ptr<LaneWait> wait;
  };
  void Loop();
  // The first queued task whose devices no running or earlier queued task
  // holds; queue_.end() if none.
  std::deque<Queued>::iterator Runnable() DEVPLUG_REQUIRES(mu_);
  // Updates every queued task's lane wait after the state changed.
  void Account(Clock::time_point now) DEVPLUG_REQUIRES(mu_);
  bool Busy(const std::vector<std::string>& devices,
            const std::vector<const std::vector<std::string>*>& holders) const;

  const std::string name_;
  const size_t lanes_;
  const std::function<void()> on_thread_start_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Queued> queue_ DEVPLUG_GUARDED_BY(mu_);
  std::list<std::vector<std::string>> running_ DEVPLUG_GUARDED_BY(mu_);  // devices per task
  size_t idle_ DEVPLUG_GUARDED_BY(mu_) = 0;
  bool stopping_ DEVPLUG_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ DEVPLUG_GUARDED_BY(mu_);
};

}  // namespace devplug::modules
