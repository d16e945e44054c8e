// Module work for a claim that a call gave up waiting for (the kubelet's
// deadline came first): the release of what a failed prepare set up, or an
// unprepare's on_release(). The claim preparer remembers it per claim, so
// that the kubelet's retry waits for this one instead of starting another;
// it is finished from the module's thread.
//
// Thread safety: thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <string>
#include <utility>
#include <vector>

#include "util/mutex.h"

namespace devplug::dra {

class PendingRelease {
 public:
  using Clock = std::chrono::steady_clock;
  // `ids`: the module devices it releases; `what`: the work, for messages
  // ("on_release(a,b)").
  PendingRelease(std::vector<std::string> ids, std::string what)
      : ids_(std::move(ids)), what_(std::move(what)) {}
  const std::vector<std::string>& ids() const { return ids_; }
  const std::string& what() const { return what_; }
  Clock::time_point since() const { return since_; }

  // It ended: 0, or -errno and why.
  void Finish(int rc, std::string why) {
    MutexLock lock(mu_);
    done_ = true;
    rc_ = rc;
    why_ = std::move(why);
    cv_.notify_all();
  }
  bool done() const {
    MutexLock lock(mu_);
    return done_;
  }
  // Whether it ended by `until`; then *rc and *why say how.
  bool Wait(Clock::time_point until, int* rc, std::string* why) const {
    MutexLock lock(mu_);
    while (!done_ && Clock::now() < until) cv_.wait_until(mu_, until);
    if (!done_) return false;
    *rc = rc_;
    *why = why_;
    return true;
  }

 private:
  const std::vector<std::string> ids_;
  const std::string what_;
  const Clock::time_point since_ = Clock::now();
  mutable Mutex mu_;
  mutable std::condition_variable_any cv_;
  bool done_ DEVPLUG_GUARDED_BY(mu_) = false;
  int rc_ DEVPLUG_GUARDED_BY(mu_) = 0;
  std::string why_ DEVPLUG_GUARDED_BY(mu_);
};

}  // namespace devplug::dra
