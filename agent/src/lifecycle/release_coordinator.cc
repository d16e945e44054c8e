#include "lifecycle/release_coordinator.h"

#include <spdlog/spdlog.h>

namespace devplug::lifecycle {

void ReleaseCoordinator::Schedule(Clock::time_point now, bool at_once) {
  if (poll_.count() == 0) return;
  const auto when = at_once ? now : now + poll_;
  if (!next_ || when < *next_) next_ = when;
}

bool ReleaseCoordinator::TakeDue(Clock::time_point now) {
  if (!next_ || *next_ > now || in_flight_) return false;
  next_.reset();
  in_flight_ = true;
  return true;
}

std::vector<std::vector<std::string>> ReleaseCoordinator::OnList(
    const Status& status, const PodSnapshotPtr& pods, const std::vector<Tracked>& tracked,
    Clock::time_point now) {
  in_flight_ = false;
  std::vector<std::vector<std::string>> due(tracked.size());
  if (!status.ok() || !pods) {
    const std::string why = status.ok() ? std::string("no answer") : status.message();
    if (why != problem_) {
      if (status.code() == StatusCode::kNotFound)
        spdlog::info("release tracking waits: {}", why);
      else
        spdlog::warn("release tracking: {}", why);
    }
    problem_ = why;
    for (const Tracked& t : tracked)
      if (t.tracker->NeedsList()) {
        Schedule(now, false);
        break;
      }
    return due;
  }
  if (!problem_.empty()) spdlog::info("release tracking: PodResources List works again");
  problem_.clear();
  static const Holders kNone;
  for (size_t i = 0; i < tracked.size(); ++i) {
    auto it = pods->holders.find(tracked[i].name);
    due[i] = tracked[i].tracker->OnList(it == pods->holders.end() ? kNone : it->second, now,
                                        kubelet_restart_);
  }
  return due;
}

bool ReleaseCoordinator::OnTrackerChanged(const ReleaseTracker& tracker, uint64_t& published,
                                          Clock::time_point now) {
  if (tracker.NeedsList()) Schedule(now, false);
  const uint64_t g = tracker.generation();
  if (g == published) return false;
  published = g;
  return true;
}

}  // namespace devplug::lifecycle
