// Hotplug: the kernel's and modules' change notices, routed to the
// resources that asked for them. It owns the udev monitor (its filter the
// union of every module's subsystems, rebuilt when the set of modules
// changes) and the inotify watch behind host->watch_path(); the main loop
// polls its two descriptors and calls Drain* when they are readable.
//
// It sees the resources only through Targets: which module subscribed to
// what, and where an event for one resource goes. An event reaches the
// resource's module instance directly (OnUdevEvents), which rescans and
// publishes through its own hooks.
//
// Thread safety: the main thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/udev_source.h"
#include "model/uevent.h"
#include "ops/metrics.h"
#include "udev/path_watch.h"
#include "udev/udev_monitor.h"

namespace devplug {

class Hotplug {
 public:
  // What hotplug needs of the resource set.
  class Targets {
   public:
    virtual ~Targets() = default;
    // Each resource whose module is loaded, with the subsystems the module
    // declared (udev_subsystems).
    virtual std::map<uint64_t, std::vector<std::string>> Subscriptions() const = 0;
    // Events for one resource (dropped if it has no running instance).
    virtual void Deliver(uint64_t id, std::vector<udev::Event> events) = 0;
    // A path one resource's module watches changed.
    virtual void PathChanged(uint64_t id) = 0;
    // Events were lost: every running resource rescans.
    virtual void RescanAll() = 0;
  };

  // `metrics` may be null.
  Hotplug(Targets* targets, std::shared_ptr<ops::Metrics> metrics);

  // Opens the path watch; without one (inotify failed, logged) modules'
  // watch_path() says -ENOSYS.
  void OpenPathWatch();
  const std::shared_ptr<udev::PathWatch>& path_watch() const { return path_watch_; }

  // Asks Targets for the subscriptions again; a new monitor when the
  // union of subsystems changed (the new one listens before the old one
  // goes, and what the old one still held is delivered). `resync` is only
  // for the message when no monitor can be had.
  void Update(UdevSource source, std::chrono::milliseconds resync);

  int udev_fd() const { return udev_ ? udev_->fd() : -1; }
  int path_fd() const { return path_watch_ ? path_watch_->fd() : -1; }
  void DrainUdev();
  void DrainPaths();

  // The monitor's filter, sorted (empty: no monitor).
  const std::vector<std::string>& subsystems() const { return subsystems_; }

 private:
  void Dispatch(udev::Monitor& monitor);

  Targets* const targets_;
  const std::shared_ptr<ops::Metrics> metrics_;
  std::unique_ptr<udev::Monitor> udev_;
  std::shared_ptr<udev::PathWatch> path_watch_;
  std::vector<std::string> subsystems_;
  // Subsystem -> ids of the resources whose module declared it.
  std::map<std::string, std::vector<uint64_t>, std::less<>> subscribers_;
};

}  // namespace devplug
