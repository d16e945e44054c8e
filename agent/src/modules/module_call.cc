#include "modules/module_call.h"

#include <algorithm>

#include "util/status.h"

namespace devplug::modules {

CallDeadline::CallDeadline(std::chrono::milliseconds timeout, std::chrono::milliseconds cap,
                           Clock::time_point start)
    : start_(start), timeout_(timeout), cap_(cap) {}

bool CallDeadline::wanted() const {
  MutexLock lock(mu_);
  return !decided_;
}

bool CallDeadline::decided() const {
  MutexLock lock(mu_);
  return decided_;
}

bool CallDeadline::Decide() {
  MutexLock lock(mu_);
  return !std::exchange(decided_, true);
}

void CallDeadline::NotCounting(std::shared_ptr<const LaneWait> wait,
                               std::optional<std::chrono::milliseconds> cap) {
  MutexLock lock(mu_);
  lane_wait_ = std::move(wait);
  if (cap) cap_ = *cap;
}

CallDeadline::Clock::time_point CallDeadline::Due(Clock::time_point now,
                                                  std::chrono::milliseconds* waited) const {
  std::shared_ptr<const LaneWait> wait;
  std::chrono::milliseconds cap;
  {
    MutexLock lock(mu_);
    wait = lane_wait_;
    cap = cap_;
  }
  std::chrono::milliseconds w{0};
  if (wait) w = std::chrono::duration_cast<std::chrono::milliseconds>(wait->Waited(now));
  if (waited != nullptr) *waited = w;
  return std::min(start_ + timeout_ + w, start_ + cap);
}

std::string CallDeadline::TimeoutMessage(std::string_view what,
                                         std::chrono::milliseconds waited) const {
  std::string msg = StrCat(what, ": the module did not answer within ", timeout_.count(), " ms");
  if (waited.count() > 0)
    StrAppend(&msg, " (not counting ", waited.count(), " ms queued behind other devices' work)");
  return msg;
}

}  // namespace devplug::modules
