// The front end's seam: everything an API that serves a resource's devices
// to the kubelet asks of that resource's module runtime. The device plugin
// service (device_plugin/device_plugin_service.h) holds one, and so does DRA's
// claim preparer (dra/claim_preparer.h); the runtime does not know which
// front end asks. Both wrap each call in a deadline the same way
// (modules/module_call.h).
//
// Lists flow the other way, through the ListSink a front end implements
// (modules/hooks.h): the runtime pushes each new list there.
//
// Thread safety: every method may be called from any thread; completion
// callbacks run on the thread that made the module call (a worker or a lane)
// or, when no module code runs, on the caller's, and must not block.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/device.h"
#include "modules/device_lanes.h"
#include "util/status.h"

namespace devplug::modules {

class DeviceSource {
 public:
  virtual ~DeviceSource() = default;

  // The resource's name ("devplug.io/tun"), for messages.
  virtual const std::string& resource_name() const = 0;
  // The current list; never null. A device is known to the calls below once
  // it is here, before any front end has published it.
  virtual DeviceListPtr devices() const = 0;

  // Whether a call below runs module code: the front end advertises what
  // the module does (PreStartContainer, GetPreferredAllocation) and skips
  // what it does not.
  virtual bool module_allocates() const = 0;
  virtual bool has_preferred_allocation() const = 0;
  // PreStart does something: the module's pre_start(), or a release that may
  // have to run before a container starts.
  virtual bool needs_pre_start() const = 0;
  // The module's own pre_start() runs (the module has one, and the
  // instance did not opt out).
  virtual bool runs_pre_start() const = 0;
  // The module has on_release() and the instance tracks releases: what a
  // front end handed out must be given back through Release().
  virtual bool tracks_releases() const = 0;

  // What a container gets for `ids` (unknown or unhealthy IDs fail with
  // INVALID_ARGUMENT). `wanted`, when given, is asked before module code
  // runs: false (the caller gave up) skips the module and `done`.
  virtual void Allocate(std::vector<std::string> ids, std::function<void(StatusOr<Recipe>)> done,
                        std::function<bool()> wanted = {}) = 0;
  virtual void PreferredAllocation(std::vector<std::string> available,
                                   std::vector<std::string> must_include, int32_t size,
                                   std::function<void(StatusOr<std::vector<std::string>>)> done,
                                   std::function<bool()> wanted = {}) = 0;
  // Readies the devices for a container that is about to use them. Returns
  // how long the call has waited behind other devices' work so far (a
  // deadline should leave that out), or null.
  virtual std::shared_ptr<const LaneWait> PreStart(std::vector<std::string> ids,
                                                   std::function<void(Status)> done,
                                                   std::function<bool()> wanted = {}) = 0;
  // on_release(ids), on the devices' lane after what is queued there (a
  // pre_start() of the same devices first); `done` gets its result (0, or
  // -errno with a reason). A release is never skipped: it has no `wanted`.
  virtual void Release(std::vector<std::string> ids,
                       std::function<void(int rc, const std::string& why)> done = {}) = 0;
  // What the front end holds back changed (ReleaseHooks): the last list is
  // published again, on the calling thread, without calling the module.
  virtual void Republish() = 0;
};

}  // namespace devplug::modules
