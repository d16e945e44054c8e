// Publication: a scan's list, sorted, with the agent's release state applied,
// compared with the last one, checked against the kubelet's limit, logged
// and handed on. Part of ModuleInstance; runs under publish_mu_ on the
// worker (a scan) or on the caller's thread (Republish), never waiting on
// the module.
#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "modules/abi_sinks.h"
#include "modules/module_instance.h"

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

DeviceListPtr ModuleInstance::devices() const {
  std::lock_guard lock(devices_mu_);
  return devices_;
}

Status ModuleInstance::ScanOnWorker(ScanCause cause) {
  if (inst_ == nullptr) return OkStatus();
  if (options_.observer) options_.observer->Scanned(cause);
  DeviceSink sink;
  sink.list.reserve(devices()->size());  // usually the same size again
  Call().error.clear();
  const int rc = module_->descriptor().list_devices(inst_, &sink.c);
  scans_.fetch_add(1);
  if (rc < 0) {
    const std::string why = Call().error.empty() ? std::strerror(-rc) : Call().error;
    if (published_)
      spdlog::warn("{}: list_devices failed: {}; keeping the previous device list", resource_.name,
                   why);
    return UnavailableError(why);
  }
  for (const std::string& p : sink.problems)
    spdlog::warn("{}: module {} reported {}, ignoring that device", resource_.name, module_->path(),
                 p);
  std::sort(sink.list.begin(), sink.list.end(),
            [](const Device& a, const Device& b) { return a.id < b.id; });
  std::lock_guard lock(publish_mu_);
  // Kept for Republish() when the agent's release state can change it.
  if (tracks_releases()) scanned_ = sink.list;
  return PublishLocked(std::move(sink.list));
}

Status ModuleInstance::PublishLocked(DeviceList list) {
  if (tracks_releases() && options_.releases) options_.releases->Apply(list);
  DeviceListPtr next = std::make_shared<const DeviceList>(std::move(list));
  const DeviceListPtr previous = devices();
  if (published_ && *previous == *next) return OkStatus();
  // A list the kubelet cannot take is not sent, and so never becomes the
  // list Allocate checks against.
  if (options_.lists) {
    if (std::string why = options_.lists->Accept(*next); !why.empty()) {
      if (!published_) return FailedPreconditionError(why);  // nothing to keep
      spdlog::error("{}: {}; keeping the previous device list", resource_.name, why);
      return OkStatus();
    }
  }
  {
    std::lock_guard lock(devices_mu_);
    devices_ = next;
  }
  const bool first = !published_;
  published_ = true;
  const auto [to_healthy, to_unhealthy] =
      LogHealthChanges(resource_.name, first ? DeviceList{} : *previous, *next);
  if (options_.observer) {
    const uint64_t healthy =
        std::count_if(next->begin(), next->end(), [](const Device& d) { return d.healthy; });
    options_.observer->Health(healthy, next->size() - healthy, to_healthy, to_unhealthy);
  }
  if (options_.lists && !abandoned_) options_.lists->Publish(next);
  return OkStatus();
}

void ModuleInstance::Republish() {
  std::lock_guard lock(publish_mu_);
  if (published_) (void)PublishLocked(scanned_);
}

}  // namespace devplug::modules
