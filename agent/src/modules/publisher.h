// A module instance's current device list, and how a scan's list becomes
// it: the agent's release state applied, compared with the current one,
// checked by the front end (ListSink::Accept), made current, its health
// changes logged and counted, and handed on (ListSink::Publish).
//
// Thread safety: thread-safe. One publication at a time (publish_mu_),
// from the worker's scans or from Republish on the caller's thread, never
// waiting on the module; devices() takes only devices_mu_, so an Allocate
// never waits for a publication.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "model/device.h"
#include "modules/hooks.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug::modules {

class Publisher {
 public:
  // Each hook may be null (not there).
  Publisher(std::string resource, std::shared_ptr<ListSink> lists,
            std::shared_ptr<ReleaseHooks> releases, std::shared_ptr<Withholds> withholds,
            std::shared_ptr<InstanceObserver> observer);

  // The current list; never null (empty before the first publication).
  DeviceListPtr devices() const;
  // A list went out.
  bool published() const { return published_.load(); }

  // A scan's list, sorted by ID. `tracking`: release tracking is on, so the
  // agent's state applies and the list is kept for Republish (kept too
  // when the instance has Withholds). Fails only
  // for a first list the front end refused (nothing to keep); a later one
  // is logged and the current list stays.
  Status Scanned(DeviceList list, bool tracking);
  // The last scan's list again (the agent's release state, or what it
  // withholds, changed).
  void Republish(bool tracking);
  // The instance was given up: lists still become current, but no longer
  // go to the front end.
  void Silence() { silenced_ = true; }

 private:
  Status PublishLocked(DeviceList list, bool tracking) DEVPLUG_REQUIRES(publish_mu_);

  const std::string resource_;
  const std::shared_ptr<ListSink> lists_;
  const std::shared_ptr<ReleaseHooks> releases_;
  const std::shared_ptr<Withholds> withholds_;
  const std::shared_ptr<InstanceObserver> observer_;

  Mutex publish_mu_;                                    // one publication at a time
  DeviceList scanned_ DEVPLUG_GUARDED_BY(publish_mu_);  // the module's last list
  std::atomic<bool> published_{false};
  std::atomic<bool> silenced_{false};

  mutable Mutex devices_mu_;
  DeviceListPtr devices_ DEVPLUG_GUARDED_BY(devices_mu_);
};

}  // namespace devplug::modules
