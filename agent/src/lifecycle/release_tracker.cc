#include "lifecycle/release_tracker.h"

#include <algorithm>
#include <cerrno>

namespace devplug::lifecycle {
namespace {

bool Shown(ReleaseTracker::State s) {
  return s == ReleaseTracker::State::kReleasing || s == ReleaseTracker::State::kFailed;
}

}  // namespace

std::string_view ReleaseTracker::StateName(State s) {
  switch (s) {
    case State::kFree:
      return "free";
    case State::kAssigned:
      return "assigned";
    case State::kHeld:
      return "held";
    case State::kReleasing:
      return "releasing";
    case State::kFailed:
      return "release failed";
  }
  return "free";
}

void ReleaseTracker::Enter(Entry& e, State s, Clock::time_point now) {
  // What Apply shows changes with any move into, out of or between
  // RELEASING and FAILED (their reasons differ).
  if (e.state != s && (Shown(e.state) || Shown(s))) ++generation_;
  e.state = s;
  e.since = now;
  e.absent_since.reset();
  e.absent_lists = 0;
}

bool ReleaseTracker::Settled(Clock::time_point now,
                             std::optional<Clock::time_point> restart) const {
  return !restart || now - *restart >= timing_.settle;
}

void ReleaseTracker::set_timing(const ReleaseTiming& timing) {
  MutexLock lock(mu_);
  timing_ = timing;
}

std::vector<std::string> ReleaseTracker::SetEnabled(bool on) {
  MutexLock lock(mu_);
  std::vector<std::string> dropped;
  if (on == enabled_) return dropped;
  enabled_ = on;
  for (const auto& [id, e] : devices_) dropped.push_back(id);
  // What Apply shows changes with any device that was held back.
  if (std::any_of(devices_.begin(), devices_.end(),
                  [](const auto& d) { return Shown(d.second.state); }))
    ++generation_;
  devices_.clear();
  synced_ = false;
  return dropped;
}

bool ReleaseTracker::enabled() const {
  MutexLock lock(mu_);
  return enabled_;
}

void ReleaseTracker::OnAllocated(const std::vector<std::string>& ids, Clock::time_point now) {
  MutexLock lock(mu_);
  if (!enabled_) return;
  for (const std::string& id : ids) {
    auto [it, fresh] = devices_.try_emplace(id);
    Entry& e = it->second;
    if (fresh) {
      Enter(e, State::kAssigned, now);
    } else {
      // Still someone's as far as we know (the kubelet frees devices lazily
      // and may offer one whose holder is still stopping): it is released
      // before the new container starts.
      e.release_at_start = true;
    }
  }
}

std::vector<std::string> ReleaseTracker::ReleasesBeforeStart(const std::vector<std::string>& ids,
                                                             bool* wait) {
  MutexLock lock(mu_);
  std::vector<std::string> due;
  if (wait) *wait = false;
  for (const std::string& id : ids) {
    auto it = devices_.find(id);
    if (it == devices_.end() || !it->second.release_at_start) continue;
    if (it->second.in_flight) {
      // Its release runs elsewhere; when it reports, the device is the new
      // pod's (see OnReleased), or it fails and is released here.
      if (wait) *wait = true;
      return {};
    }
    due.push_back(id);
  }
  return due;
}

void ReleaseTracker::OnReleasedBeforeStart(const std::vector<std::string>& ids, bool released,
                                           Clock::time_point now) {
  if (!released) return;  // the start fails; the kubelet tries it again
  MutexLock lock(mu_);
  for (const std::string& id : ids) {
    auto it = devices_.find(id);
    if (it == devices_.end()) continue;
    Entry& e = it->second;
    e.release_at_start = false;
    e.in_flight = false;
    e.holder.reset();
    e.error.clear();
    e.backoff = {};
    Enter(e, State::kAssigned, now);  // the new pod's now
  }
}

std::vector<std::string> ReleaseTracker::OnList(
    const std::map<std::string, Holder, std::less<>>& listed, Clock::time_point now,
    std::optional<Clock::time_point> kubelet_restart) {
  MutexLock lock(mu_);
  std::vector<std::string> due;
  if (!enabled_) return due;
  // Devices in use that we have no record of: allocated while we were not
  // looking (before our start). The first List is the truth.
  for (const auto& [id, holder] : listed) {
    auto [it, fresh] = devices_.try_emplace(id);
    if (fresh) {
      Enter(it->second, State::kHeld, now);
      it->second.holder = holder;
    }
  }
  if (!synced_) {
    synced_ = true;
    for (auto& [id, e] : devices_) {
      if (auto l = listed.find(id); l != listed.end() && e.state == State::kAssigned) {
        Enter(e, State::kHeld, now);
        e.holder = l->second;
      }
    }
    return due;
  }
  const bool settled = Settled(now, kubelet_restart);
  for (auto& [id, e] : devices_) {
    if (auto l = listed.find(id); l != listed.end()) {
      e.holder = l->second;
      e.absent_since.reset();
      e.absent_lists = 0;
      if (e.state == State::kAssigned) Enter(e, State::kHeld, now);
      continue;
    }
    if (e.release_at_start || e.in_flight) continue;  // PreStart will do it, or it runs
    switch (e.state) {
      case State::kHeld:
        if (!e.absent_since) e.absent_since = now;
        ++e.absent_lists;
        if (e.absent_lists >= 2 && now - *e.absent_since >= timing_.grace && settled) {
          Enter(e, State::kReleasing, now);
          due.push_back(id);
        }
        break;
      case State::kAssigned:
        // Allocated, yet its container never showed (admission failed
        // after Allocate, or a plain init container that ended).
        if (now - e.since >= timing_.unseen && settled) {
          Enter(e, State::kReleasing, now);
          due.push_back(id);
        }
        break;
      case State::kReleasing:  // the module said -EAGAIN: ask again
        due.push_back(id);
        break;
      case State::kFailed:
        if (now >= e.retry_at) {
          Enter(e, State::kReleasing, now);
          due.push_back(id);
        }
        break;
      case State::kFree:
        break;
    }
  }
  for (const std::string& id : due) devices_.at(id).in_flight = true;
  return due;
}

void ReleaseTracker::OnReleased(const std::vector<std::string>& ids, int result,
                                const std::string& why, Clock::time_point now) {
  MutexLock lock(mu_);
  for (const std::string& id : ids) {
    auto it = devices_.find(id);
    if (it == devices_.end()) continue;
    Entry& e = it->second;
    e.in_flight = false;
    if (result == 0 && e.release_at_start) {
      // Handed to a new pod while this release ran: released once, and it
      // is the new pod's now.
      e.release_at_start = false;
      e.holder.reset();
      Enter(e, State::kAssigned, now);
    } else if (result == 0) {
      if (Shown(e.state)) ++generation_;
      devices_.erase(it);  // FREE
    } else if (result == -EAGAIN) {
      // Still busy: RELEASING stays, asked again at the next List.
    } else {
      e.backoff = std::clamp(e.backoff * 2, timing_.min_backoff, timing_.max_backoff);
      e.retry_at = now + e.backoff;
      if (e.state == State::kFailed && e.error != why) ++generation_;  // a new reason
      e.error = why;
      if (e.state != State::kFailed) Enter(e, State::kFailed, now);
    }
  }
}

bool ReleaseTracker::NeedsList() const {
  MutexLock lock(mu_);
  return enabled_ && (!synced_ || !devices_.empty());
}

bool ReleaseTracker::synced() const {
  MutexLock lock(mu_);
  return synced_;
}

bool ReleaseTracker::Apply(DeviceList& list) const {
  MutexLock lock(mu_);
  bool changed = false;
  for (Device& d : list) {
    auto it = devices_.find(d.id);
    if (it == devices_.end() || !Shown(it->second.state) || !d.healthy) continue;
    d.healthy = false;
    d.held_back = true;
    d.health_reason = it->second.state == State::kReleasing ? std::string("releasing")
                                                            : "release failed: " + it->second.error;
    changed = true;
  }
  return changed;
}

std::optional<ReleaseTracker::DeviceView> ReleaseTracker::View(std::string_view id) const {
  MutexLock lock(mu_);
  if (!enabled_) return std::nullopt;
  auto it = devices_.find(id);
  if (it == devices_.end()) return synced_ ? std::optional<DeviceView>(DeviceView{}) : std::nullopt;
  return DeviceView{it->second.state, it->second.holder, it->second.error};
}

uint64_t ReleaseTracker::generation() const {
  MutexLock lock(mu_);
  return generation_;
}

}  // namespace devplug::lifecycle
