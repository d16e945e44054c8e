#include "modules/publisher.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace devplug::modules {
namespace {

// One line per device whose health or reason changed (new devices count as
// changed when Unhealthy), at most kMaxLines, then a summary line. Returns
// how many known devices turned Healthy and Unhealthy.
std::pair<uint64_t, uint64_t> LogHealthChanges(const std::string& resource,
                                               const DeviceList& before, const DeviceList& after) {
  constexpr size_t kMaxLines = 10;
  size_t changed = 0;
  uint64_t to_healthy = 0, to_unhealthy = 0;
  for (const Device& d : after) {
    auto it = std::lower_bound(before.begin(), before.end(), d.id,
                               [](const Device& x, const std::string& id) { return x.id < id; });
    const Device* old = it != before.end() && it->id == d.id ? &*it : nullptr;
    if (old ? (old->healthy == d.healthy && old->health_reason == d.health_reason) : d.healthy)
      continue;
    if (old && old->healthy != d.healthy) ++(d.healthy ? to_healthy : to_unhealthy);
    if (++changed > kMaxLines) continue;
    const std::string reason = d.health_reason.empty() ? "" : " (" + d.health_reason + ")";
    if (d.healthy)
      spdlog::info("{}: device {} is Healthy{}", resource, d.id, reason);
    else
      spdlog::warn("{}: device {} is Unhealthy{}", resource, d.id, reason);
  }
  const size_t healthy =
      std::count_if(after.begin(), after.end(), [](const Device& d) { return d.healthy; });
  spdlog::info("{}: {} devices, {} healthy{}", resource, after.size(), healthy,
               changed > kMaxLines ? StrCat(" (", changed - kMaxLines, " more changes not shown)")
                                   : std::string());
  return {to_healthy, to_unhealthy};
}

}  // namespace

Publisher::Publisher(std::string resource, std::shared_ptr<ListSink> lists,
                     std::shared_ptr<ReleaseHooks> releases, std::shared_ptr<Withholds> withholds,
                     std::shared_ptr<InstanceObserver> observer)
    : resource_(std::move(resource)),
      lists_(std::move(lists)),
      releases_(std::move(releases)),
      withholds_(std::move(withholds)),
      observer_(std::move(observer)),
      devices_(std::make_shared<const DeviceList>()) {}

DeviceListPtr Publisher::devices() const {
  MutexLock lock(devices_mu_);
  return devices_;
}

Status Publisher::Scanned(DeviceList list, bool tracking) {
  MutexLock lock(publish_mu_);
  // Kept for Republish() when the agent's release state can change it.
  if (tracking || withholds_) scanned_ = list;
  return PublishLocked(std::move(list), tracking);
}

void Publisher::Republish(bool tracking) {
  MutexLock lock(publish_mu_);
  if (published_) (void)PublishLocked(scanned_, tracking);
}

Status Publisher::PublishLocked(DeviceList list, bool tracking) {
  if (tracking && releases_) releases_->Apply(list);
  if (withholds_) withholds_->Apply(list);
  DeviceListPtr next = std::make_shared<const DeviceList>(std::move(list));
  const DeviceListPtr previous = devices();
  if (published_ && *previous == *next) return OkStatus();
  // A list the kubelet cannot take is not sent, and so never becomes the
  // list Allocate checks against.
  if (lists_) {
    if (std::string why = lists_->Accept(*next); !why.empty()) {
      if (!published_) return FailedPreconditionError(why);  // nothing to keep
      spdlog::error("{}: {}; keeping the previous device list", resource_, why);
      return OkStatus();
    }
  }
  {
    MutexLock lock(devices_mu_);
    devices_ = next;
  }
  const bool first = !published_;
  published_ = true;
  const auto [to_healthy, to_unhealthy] =
      LogHealthChanges(resource_, first ? DeviceList{} : *previous, *next);
  if (observer_) {
    const uint64_t healthy =
        std::count_if(next->begin(), next->end(), [](const Device& d) { return d.healthy; });
    observer_->Health(healthy, next->size() - healthy, to_healthy, to_unhealthy);
  }
  if (lists_ && !silenced_) lists_->Publish(next);
  return OkStatus();
}

}  // namespace devplug::modules
