// One thread that runs callbacks at deadlines (call timeouts). It sleeps
// until the earliest deadline and not at all while nothing is scheduled.
//
// Thread safety: thread-safe. Callbacks run on the timer thread, without the
// lock held, and must not block.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <unordered_map>

#include "util/mutex.h"

namespace devplug {

class Timers {
 public:
  using Clock = std::chrono::steady_clock;
  Timers();
  ~Timers();  // drops what has not fired
  Timers(const Timers&) = delete;
  Timers& operator=(const Timers&) = delete;

  uint64_t Schedule(Clock::time_point when, std::function<void()> fn);
  // Removes a pending timer; no effect once it fired.
  void Cancel(uint64_t id);
  size_t pending() const;

 private:
  void Loop();
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  using Queue = std::multimap<Clock::time_point, std::pair<uint64_t, std::function<void()>>>;
  Queue queue_ DEVPLUG_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Queue::iterator> by_id_ DEVPLUG_GUARDED_BY(mu_);
  uint64_t next_id_ DEVPLUG_GUARDED_BY(mu_) = 1;
  bool stopping_ DEVPLUG_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace devplug
