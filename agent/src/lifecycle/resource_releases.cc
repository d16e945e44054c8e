#include "lifecycle/resource_releases.h"

#include <cerrno>

namespace devplug::lifecycle {

void ResourceReleases::Allocated(const std::vector<std::string>& ids) {
  const auto now = std::chrono::steady_clock::now();
  handed_out_->Record(ids, now);
  if (!tracker_) return;
  tracker_->OnAllocated(ids, now);
  if (changed_) changed_();
}

std::vector<std::string> ResourceReleases::DueBeforeStart(const std::vector<std::string>& ids,
                                                          bool* wait) {
  if (!tracker_) return {};
  return tracker_->ReleasesBeforeStart(ids, wait);
}

void ResourceReleases::Released(const std::vector<std::string>& ids, int rc, const std::string& why,
                                bool before_start) {
  if (!tracker_) return;
  if (before_start)
    tracker_->OnReleasedBeforeStart(ids, rc == 0, std::chrono::steady_clock::now());
  else
    tracker_->OnReleased(ids, rc, why, std::chrono::steady_clock::now());
  if (changed_) changed_();
}

}  // namespace devplug::lifecycle
