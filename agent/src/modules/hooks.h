// What a module instance calls outside itself: interfaces it declares here
// and the layers above implement (the front end that serves its lists,
// release tracking, the pod lookup, metrics, path watches). The instance
// holds them by pointer; none is a closure written where the instance is
// launched, so the order a list goes through them is the instance's own
// (modules/publisher.cc) and each has one implementation to read:
//
//   ListSink          device_plugin::ListPublisher   (the device plugin stream, the CDI spec)
//   ReleaseHooks      lifecycle::ResourceReleases
//   PodLookup         kubelet::PodLookup       (host->pod_of())
//   InstanceObserver  ops::ResourceMetrics
//   PathWatches       udev::PathWatchSet       (host->watch_path())
//
// Every method is called on the instance's worker (Release results also on
// its lanes, Republish's list on the caller's thread, under the instance's
// publication lock) and must not call back into the instance.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/device.h"
#include "model/scan_cause.h"

namespace devplug::modules {

// The pod and container holding a device (host->pod_of()).
struct PodHolder {
  std::string pod_namespace, pod_name, pod_uid, container;
};

// Where an instance's new device lists go: the front end that serves them.
// For one list, Accept first; if it accepts, the instance makes the list
// current (devices() returns it, so an Allocate that names a new device
// finds it) and then calls Publish with the same list. Two calls, not one,
// for that order: the kubelet must never hold a device the instance does
// not know yet.
class ListSink {
 public:
  virtual ~ListSink() = default;
  // "" when `list` can be served; otherwise why not, and the list is
  // dropped: the previous one stays current.
  virtual std::string Accept(const DeviceList& list) = 0;
  virtual void Publish(const DeviceListPtr& list) = 0;
};

// Release tracking (ABI 1.2), for a module with on_release() whose
// instance did not opt out (tracks_releases()).
class ReleaseHooks {
 public:
  virtual ~ReleaseHooks() = default;
  // Marks the devices the agent holds back (a release runs) in a list about
  // to be published; true if it changed anything.
  virtual bool Apply(DeviceList& list) = 0;
  // Which of a starting container's devices must be released first; sets
  // *wait (and returns none) while a release of one of them runs elsewhere
  // (an instance a reload replaced).
  virtual std::vector<std::string> DueBeforeStart(const std::vector<std::string>& ids,
                                                  bool* wait) = 0;
  // Every on_release() result (0, -EAGAIN, -errno with the module's reason);
  // `before_start` for those PreStartContainer ran.
  virtual void Released(const std::vector<std::string>& ids, int rc, const std::string& why,
                        bool before_start) = 0;
};

// Devices the agent keeps from the kubelet whatever the module says (a
// DRA driver of the resource, draining after a move to the device plugin
// API, still has them prepared for claims): marked Unhealthy, with why, in
// every list about to be published.
class Withholds {
 public:
  virtual ~Withholds() = default;
  virtual void Apply(DeviceList& list) const = 0;
};

// host->pod_of() (ABI 1.2): the holder of one of the resource's devices.
class PodLookup {
 public:
  virtual ~PodLookup() = default;
  // 0, -ENOENT (nobody), -ENOTUNIQ (listed under two pods) or -EAGAIN
  // (cannot say now). `not_before`, inside pre_start(): when that
  // PreStartContainer began; the answer comes from a List sent after it.
  // May wait for PodResources Lists.
  virtual int PodOf(const std::string& id,
                    std::optional<std::chrono::steady_clock::time_point> not_before,
                    PodHolder* holder) = 0;
};

// What an instance reports for metrics.
class InstanceObserver {
 public:
  virtual ~InstanceObserver() = default;
  // Every list_devices() call, with what caused it.
  virtual void Scanned(ScanCause cause) = 0;
  // Every published list: healthy and unhealthy counts, and how many
  // devices turned Healthy or Unhealthy with it.
  virtual void Health(uint64_t healthy, uint64_t unhealthy, uint64_t to_healthy,
                      uint64_t to_unhealthy) = 0;
  // Every on_release() result, for `n` devices.
  virtual void Released(int rc, size_t n) = 0;
};

// host->watch_path() (ABI 1.3): one instance's path watches.
class PathWatches {
 public:
  virtual ~PathWatches() = default;
  // Watches `path` (host_root applied): 0 or -errno.
  virtual int Add(const std::string& path) = 0;
  // Ends every watch: after each destroy() of the module instance.
  virtual void EndAll() = 0;
};

}  // namespace devplug::modules
