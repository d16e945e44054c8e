// Hotplug dispatch: the udev filter is the union of every module's
// subsystems, and each event reaches the resources that asked for its
// subsystem.
#include <spdlog/spdlog.h>

#include "agent.h"

namespace devplug {

void Agent::RebuildUdevMonitor() {
  std::map<std::string, std::vector<uint64_t>, std::less<>> subscribers;
  for (const auto& r : resources_) {
    if (!r->module || r->module->descriptor().udev_subsystems == nullptr) continue;
    for (const char* const* s = r->module->descriptor().udev_subsystems; *s; ++s)
      if (**s) subscribers[*s].push_back(r->id);
  }
  std::vector<std::string> subsystems;
  for (const auto& [s, _] : subscribers) subsystems.push_back(s);
  udev_subscribers_ = std::move(subscribers);
  if (subsystems == udev_subsystems_ && (udev_ || subsystems.empty())) return;
  udev_subsystems_ = subsystems;
  if (subsystems.empty()) return;
  const config::UdevSource source = udev::ResolveSource(config_.udev_source);
  auto monitor = udev::Monitor::Create(source, subsystems);
  if (!monitor.ok()) {
    spdlog::warn("no hotplug events ({}); devices are rescanned every {} ms only",
                 monitor.status().message(), config_.resync_interval.count());
    return;
  }
  // The new monitor listens before the old one goes: nothing falls between.
  if (udev_) DispatchUdevEvents(*udev_);
  udev_ = std::move(*monitor);
  spdlog::info("listening for {} events on subsystems {}{}", config::UdevSourceName(source),
               StrJoin(subsystems, ","),
               config_.udev_source == config::UdevSource::kAuto ? " (udev_source auto)" : "");
}

void Agent::DispatchUdevEvents(udev::Monitor& monitor) {
  bool overflowed = false;
  std::vector<udev::Event> events = monitor.Drain(&overflowed);
  std::map<uint64_t, std::vector<udev::Event>> batches;
  for (udev::Event& e : events) {
    spdlog::trace("uevent {} {} {}", e.action, e.subsystem, e.syspath);
    auto it = udev_subscribers_.find(e.subsystem);
    if (it == udev_subscribers_.end()) continue;
    metrics_->Uevent(e.subsystem);
    for (uint64_t id : it->second) batches[id].push_back(e);
  }
  for (auto& [id, batch] : batches) {
    Resource* r = ById(id);
    if (r && r->instance) r->instance->OnUdevEvents(std::move(batch));
  }
  if (overflowed) {
    spdlog::warn("uevent queue overflowed; rescanning every resource");
    for (auto& r : resources_)
      if (r->instance) r->instance->RequestRescan();
  }
}

void Agent::DrainPathWatch() {
  for (uint64_t id : path_watch_->Drain()) {
    Resource* r = ById(id);
    if (r && r->instance) r->instance->OnPathChanged();
  }
}

}  // namespace devplug
