// One named thread and its queue: where a module instance's calls run in
// order, one at a time (the instance's worker, "dp:<module>").
//
// Tasks run in the order they were posted. While the queue is empty the
// lane may be asked, from its own thread, to wake at a time and run its
// wake task then (an event scan the rate limit deferred). Stopping queues
// a last task and ends the thread once the queue is empty (a task posted
// after it still runs, after it: its caller waits for an answer); a thread still
// inside a task at the caller's deadline is abandoned (detached), since
// a module call cannot be interrupted, and the lane's owner must then
// outlive it: it leaks itself on purpose (see ModuleInstance).
//
// Thread safety: Post, RequestStop and WaitStopped from any thread; WakeAt
// only from a task on the lane.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "util/mutex.h"

namespace devplug::modules {

class Lane {
 public:
  using Clock = std::chrono::steady_clock;
  using Task = std::function<void()>;

  // `name`: the thread's name (cut to 15 characters); `on_start` runs
  // first on the thread; `on_wake` when a WakeAt time passes with nothing
  // queued.
  Lane(std::string name, Task on_start, Task on_wake);
  // Stops without a deadline, unless WaitStopped already ended the thread.
  ~Lane();
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  void Start();
  void Post(Task task);
  // From the lane's own thread: run on_wake at `at` if the queue is empty
  // then (nullopt: never). A task posted meanwhile runs first; the wake
  // stays due.
  void WakeAt(std::optional<Clock::time_point> at);
  std::optional<Clock::time_point> wake_at() const;
  // Queues `last` and ends the thread once the queue is empty. Only the
  // first call counts.
  void RequestStop(Task last);
  // Waits for the thread to end. False at the deadline: the thread is
  // abandoned, still running a task.
  [[nodiscard]] bool WaitStopped(Clock::time_point deadline);
  bool running() const { return thread_.joinable(); }

 private:
  void Loop();

  const std::string name_;
  const Task on_start_;
  const Task on_wake_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::condition_variable_any exited_cv_;
  std::deque<Task> queue_ DEVPLUG_GUARDED_BY(mu_);
  std::optional<Clock::time_point> wake_at_ DEVPLUG_GUARDED_BY(mu_);
  bool stopping_ DEVPLUG_GUARDED_BY(mu_) = false;
  bool exited_ DEVPLUG_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace devplug::modules
