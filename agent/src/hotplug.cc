#include "hotplug.h"

#include <spdlog/spdlog.h>

#include "config/config.h"
#include "util/status.h"

namespace devplug {

Hotplug::Hotplug(Targets* targets, std::shared_ptr<ops::Metrics> metrics)
    : targets_(targets), metrics_(std::move(metrics)) {}

void Hotplug::OpenPathWatch() {
  if (path_watch_) return;
  if (auto pw = udev::PathWatch::Create(); pw.ok())
    path_watch_ = std::move(*pw);
  else
    spdlog::warn(
        "no path watches ({}); nodes made or removed without a uevent are seen at "
        "the next resync only",
        pw.status().message());
}

void Hotplug::Update(UdevSource source, std::chrono::milliseconds resync) {
  std::map<std::string, std::vector<uint64_t>, std::less<>> subscribers;
  for (const auto& [id, subsystems] : targets_->Subscriptions())
    for (const std::string& s : subsystems)
      if (!s.empty()) subscribers[s].push_back(id);
  std::vector<std::string> subsystems;
  for (const auto& [s, _] : subscribers) subsystems.push_back(s);
  subscribers_ = std::move(subscribers);
  if (subsystems == subsystems_ && (udev_ || subsystems.empty())) return;
  subsystems_ = subsystems;
  if (subsystems.empty()) return;
  const UdevSource resolved = udev::ResolveSource(source);
  auto monitor = udev::Monitor::Create(resolved, subsystems);
  if (!monitor.ok()) {
    spdlog::warn("no hotplug events ({}); devices are rescanned every {} ms only",
                 monitor.status().message(), resync.count());
    return;
  }
  // The new monitor listens before the old one goes: nothing falls between.
  if (udev_) Dispatch(*udev_);
  udev_ = std::move(*monitor);
  spdlog::info("listening for {} events on subsystems {}{}", config::UdevSourceName(resolved),
               StrJoin(subsystems, ","), source == UdevSource::kAuto ? " (udev_source auto)" : "");
}

void Hotplug::DrainUdev() {
  if (udev_) Dispatch(*udev_);
}

void Hotplug::Dispatch(udev::Monitor& monitor) {
  bool overflowed = false;
  std::vector<udev::Event> events = monitor.Drain(&overflowed);
  std::map<uint64_t, std::vector<udev::Event>> batches;
  for (udev::Event& e : events) {
    spdlog::trace("uevent {} {} {}", e.action, e.subsystem, e.syspath);
    auto it = subscribers_.find(e.subsystem);
    if (it == subscribers_.end()) continue;
    if (metrics_) metrics_->Uevent(e.subsystem);
    for (uint64_t id : it->second) batches[id].push_back(e);
  }
  for (auto& [id, batch] : batches) targets_->Deliver(id, std::move(batch));
  if (overflowed) {
    spdlog::warn("uevent queue overflowed; rescanning every resource");
    targets_->RescanAll();
  }
}

void Hotplug::DrainPaths() {
  if (!path_watch_) return;
  for (uint64_t id : path_watch_->Drain()) targets_->PathChanged(id);
}

}  // namespace devplug
