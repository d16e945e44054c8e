// A front end's call into the module runtime, with a deadline: one rule for
// both APIs (the device plugin's Allocate and PreStartContainer, DRA's
// NodePrepareResources and NodeUnprepareResources).
//
// - Decided once. The module's answer, the deadline or an abort: whichever
//   comes first decides the call; everyone later finds it decided.
// - Never runs late. `wanted()` is what a DeviceSource asks before module
//   code runs: once the call is decided, module code that has not started
//   never starts (the caller already answered its client).
// - Time queued behind other devices' work does not count (NotCounting):
//   the deadline moves on by that much, but never past `cap` after the
//   call came (the client's own wait).
// - What a late call did is reported. A module call that had started
//   before its deadline still ends; ModuleCall hands its answer to `late`,
//   and tells `late` too (with no value) when the module code never ran,
//   so that whoever must release what the call set up learns either way.
//
// CallDeadline is the decision and the clock; the device plugin's gRPC
// reactor uses it with timers, ModuleCall<T> with a blocking wait.
//
// Thread safety: thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "modules/device_lanes.h"
#include "util/mutex.h"

namespace devplug::modules {

class CallDeadline {
 public:
  using Clock = std::chrono::steady_clock;
  // Due `timeout` after `start`, and never past `cap` after it.
  CallDeadline(std::chrono::milliseconds timeout, std::chrono::milliseconds cap,
               Clock::time_point start = Clock::now());

  // Module code may still start: the call is not decided.
  bool wanted() const;
  bool decided() const;
  // Decides the call; true for the first caller only.
  bool Decide();

  // Time `wait` reports queued behind other devices does not count; `cap`,
  // when given, replaces the one the call was made with.
  void NotCounting(std::shared_ptr<const LaneWait> wait,
                   std::optional<std::chrono::milliseconds> cap = std::nullopt);
  // When the call is due, seen at `now`: later than start + timeout by the
  // time not counted, capped. `*waited` (when given) gets that time.
  Clock::time_point Due(Clock::time_point now, std::chrono::milliseconds* waited = nullptr) const;
  // "<what>: the module did not answer within N ms (not counting ...)".
  std::string TimeoutMessage(std::string_view what, std::chrono::milliseconds waited) const;

  Clock::time_point start() const { return start_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  const Clock::time_point start_;
  const std::chrono::milliseconds timeout_;
  mutable Mutex mu_;
  std::chrono::milliseconds cap_ DEVPLUG_GUARDED_BY(mu_);
  bool decided_ DEVPLUG_GUARDED_BY(mu_) = false;
  std::shared_ptr<const LaneWait> lane_wait_ DEVPLUG_GUARDED_BY(mu_);
};

// A module call waited for on the caller's thread (DRA's calls run one at
// a time on their own thread, which may wait).
template <typename T>
class ModuleCall {
 public:
  using Clock = CallDeadline::Clock;
  // `late` gets the answer of a call that ended after its deadline, or
  // nullopt when the call was decided before module code ran (it never
  // will); it runs on the module's thread and must not block.
  ModuleCall(std::chrono::milliseconds timeout, std::chrono::milliseconds cap,
             std::function<void(std::optional<T>)> late = {})
      : state_(std::make_shared<State>(timeout, cap, std::move(late))) {}

  // The module's answer.
  std::function<void(T)> Callback() const {
    return [s = state_](T value) {
      if (s->deadline.Decide()) {
        MutexLock lock(s->mu);
        s->value.emplace(std::move(value));
        s->cv.notify_all();
        return;
      }
      s->Late(std::optional<T>(std::move(value)));
    };
  }
  // Asked before module code runs (DeviceSource's `wanted`).
  std::function<bool()> Wanted() const {
    return [s = state_] {
      if (s->deadline.wanted()) return true;
      s->Late(std::nullopt);  // when the deadline decided it
      return false;
    };
  }
  void NotCounting(std::shared_ptr<const LaneWait> wait,
                   std::optional<std::chrono::milliseconds> cap = std::nullopt) {
    state_->deadline.NotCounting(std::move(wait), cap);
  }

  // The answer, waited for until the call's deadline but never past
  // `limit`; nullopt when the deadline (or limit) came first: the call is
  // then decided, and what the module still does goes to `late`.
  std::optional<T> Wait(Clock::time_point limit = Clock::time_point::max()) {
    State& s = *state_;
    MutexLock lock(s.mu);
    for (;;) {
      if (s.value) return std::move(s.value);
      const Clock::time_point now = Clock::now();
      const Clock::time_point due = std::min(s.deadline.Due(now), limit);
      if (now >= due) break;
      s.cv.wait_until(s.mu, due);
    }
    if (s.value) return std::move(s.value);  // answered as the deadline came
    if (!s.deadline.Decide()) {
      // The answer won the race a moment ago: take it.
      while (!s.value) s.cv.wait(s.mu);
      return std::move(s.value);
    }
    s.timed_out = true;
    return std::nullopt;
  }

  // The time not counted so far, for messages.
  std::chrono::milliseconds waited() const {
    std::chrono::milliseconds w{0};
    (void)state_->deadline.Due(Clock::now(), &w);
    return w;
  }
  const CallDeadline& deadline() const { return state_->deadline; }

 private:
  struct State {
    State(std::chrono::milliseconds timeout, std::chrono::milliseconds cap,
          std::function<void(std::optional<T>)> l)
        : deadline(timeout, cap), late(std::move(l)) {}
    // Only once: a skipped call is never answered, an answered one never
    // asks again whether it is wanted (a retried release may ask more than
    // once; the first "no" counts).
    void Late(std::optional<T> v) {
      {
        MutexLock lock(mu);
        if (!timed_out || late_told) return;
        late_told = true;
      }
      if (late) late(std::move(v));
    }
    CallDeadline deadline;
    const std::function<void(std::optional<T>)> late;
    Mutex mu;
    std::condition_variable_any cv;
    std::optional<T> value DEVPLUG_GUARDED_BY(mu);
    bool timed_out DEVPLUG_GUARDED_BY(mu) = false;  // the deadline decided the call
    bool late_told DEVPLUG_GUARDED_BY(mu) = false;
  };
  const std::shared_ptr<State> state_;
};

}  // namespace devplug::modules
