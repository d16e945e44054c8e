// When each device of one resource was last handed out (its last
// successful Allocate): host->pod_of() must not answer from a PodResources
// List sent before that moment, which may still name the previous holder.
//
// Thread safety: thread-safe (gRPC threads record, module workers ask).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "util/mutex.h"

namespace devplug::lifecycle {

class HandedOut {
 public:
  using Clock = std::chrono::steady_clock;

  void Record(const std::vector<std::string>& ids, Clock::time_point now) {
    MutexLock lock(mu_);
    for (const std::string& id : ids) at_[id] = now;
    // IDs come and go with hotplug (MIG devices, VFs): forget old ones.
    if (at_.size() > kMaxIds)
      std::erase_if(at_, [&](const auto& e) { return now - e.second > kForget; });
  }

  std::optional<Clock::time_point> Last(const std::string& id) const {
    MutexLock lock(mu_);
    auto it = at_.find(id);
    if (it == at_.end()) return std::nullopt;
    return it->second;
  }

 private:
  static constexpr size_t kMaxIds = 4096;
  // Longer than any List may take to see an Allocate.
  static constexpr std::chrono::minutes kForget{10};

  mutable Mutex mu_;
  std::map<std::string, Clock::time_point, std::less<>> at_ DEVPLUG_GUARDED_BY(mu_);
};

}  // namespace devplug::lifecycle
