// The API a resource serves its devices through: the device plugin API
// (device_plugin::FrontEnd) or DRA (dra::FrontEnd), one per Resource, made
// by front_end::Make (front_end/make.h) from the resource's `api`.
//
// A Resource keeps what both share: the module, its instance's lifecycle,
// the socket and its gRPC server, and the registrar. The front end does the
// rest: the hooks a new instance is given (where its lists go, who holds a
// device, what a release reports to), the services on the server and what
// the plugin watcher's Registration announces, the release state a reload
// carries over, and its part of the status view. A Resource calls the same
// methods whatever the API; a front end that has nothing to do for one does
// nothing.
//
// Thread safety: not thread-safe; the agent's main thread owns it, as it
// owns its Resource, except ExpectStream (any thread). The services and
// hooks it makes are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "cdi/resource_cdi.h"
#include "config/config.h"
#include "deviceplugin/v1beta1/api.pb.h"
#include "kubelet/pod_resources.h"
#include "lifecycle/release_coordinator.h"
#include "lifecycle/release_tracker.h"
#include "model/pod_snapshot.h"
#include "model/rpc.h"
#include "modules/device_source.h"
#include "modules/hooks.h"
#include "modules/loaded_module.h"
#include "ops/status_report.h"
#include "pluginregistration/v1/api.pb.h"
#include "util/status.h"
#include "util/timers.h"

namespace devplug::front_end {

// What a front end needs of the agent and its resource; each outlives it.
struct Context {
  // The resource's configuration, and whether a reload stages it (not
  // serving until committed).
  config::ResourceConfig cfg;
  bool staged = false;
  // The one PodResources client (who holds a device).
  std::shared_ptr<kubelet::PodResourcesClient> pods;
  // Call deadlines, for the device plugin's calls.
  Timers* timers = nullptr;
  // Counts the kubelet's calls.
  std::shared_ptr<RpcObserver> observer;
  // Called from any thread: a ListAndWatch stream of registration `reg`
  // ended; what the kubelet is told about releases may have changed.
  std::function<void(uint64_t reg)> stream_ended;
  std::function<void()> tracker_changed;
  // A kubelet ran (kubelet.sock was there) when the resource was made.
  bool kubelet_runs = false;
};

// What a new module instance is given (made at each launch); null: none.
struct InstanceHooks {
  std::shared_ptr<modules::ListSink> lists;
  std::shared_ptr<modules::PodLookup> pods;
  std::shared_ptr<modules::ReleaseHooks> releases;
  std::shared_ptr<modules::Withholds> withholds;
};

class FrontEnd {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~FrontEnd() = default;

  // ---- starting ----
  // The module is loaded; `cfg` is the running configuration. A reload's
  // resource of the same name gets its `predecessor` (whatever its API;
  // null for a new one): a front end may share what must stay one (DRA's
  // driver owns its checkpoint).
  virtual Status ModuleLoaded(const config::AgentConfig& cfg, const modules::LoadedModule& module,
                              const FrontEnd* predecessor) = 0;
  // The hooks of an instance launched now under `cfg`. `predecessor` as
  // above: release state it kept is taken over, none is lost.
  virtual InstanceHooks Launch(const config::AgentConfig& cfg, const modules::LoadedModule& module,
                               const FrontEnd* predecessor) = 0;
  // `instance` runs and the resource serves: the kubelet's calls reach it.
  // `commit`: a reload's staged resource replaces the running one now.
  virtual void Serve(modules::DeviceSource* instance, bool commit) = 0;
  // `instance` stops: no call reaches it once this returns.
  virtual void Clear(const modules::DeviceSource* instance) = 0;

  // ---- serving ----
  // Its services, on the resource's server, calling `instance`.
  virtual void Register(grpc::ServerBuilder& builder, modules::DeviceSource* instance,
                        const config::AgentConfig& cfg) = 0;
  // What a Register on kubelet.sock carries (registration = "kubelet", the
  // device plugin API's own way; DRA registers through the plugin watcher
  // only, which the configuration enforces).
  virtual v1beta1::DevicePluginOptions RegisterOptions(
      const modules::DeviceSource& instance) const = 0;
  // What the plugin watcher's Registration announces for `socket_path`.
  virtual pluginregistration::PluginInfo Info(const std::string& socket_path) const = 0;
  // Any thread: the kubelet probed registration `n`; its stream follows.
  // 0: none is expected.
  virtual void ExpectStream(uint64_t n) = 0;
  // Whether the kubelet holds a stream of registration `n`.
  virtual bool Connected(uint64_t n) const = 0;
  // The server stops: streams end, calls waiting for the module are
  // answered UNAVAILABLE. Then the services go (`exiting`: they are kept
  // until the process ends, as the server is).
  virtual void EndCalls() = 0;
  virtual void DropServices(bool exiting) = 0;
  // The resource no longer serves (a reload removed or replaced it, or the
  // agent exits): what the front end runs beside the server stops.
  // `instance`: the running one, or null. Exiting, every resource's front
  // end is asked at once and waited for under one deadline (WaitStopped:
  // false when something still ran then; it is left to the process's end).
  virtual void Withdraw(const modules::DeviceSource* instance, bool exiting) = 0;
  virtual bool WaitStopped(Clock::time_point deadline) = 0;
  // The kubelet confirmed a registration.
  virtual void RegistrationConfirmed() = 0;
  // The kubelet opens no stream to this API (DRA): a newer devplugd
  // serving the resource beside this one is watched for by its socket
  // (kubelet::Registrar), and SetSuperseded says while it serves.
  virtual bool Streamless() const { return false; }
  virtual void SetSuperseded(bool) {}

  // ---- a reload ----
  // `successor` replaces this one's resource: release state it cannot
  // carry on is given up, and said so.
  virtual void HandOver(const FrontEnd& successor) = 0;
  // The running configuration changed. `serving`: its resource runs and is
  // not staged. True when a first PodResources List is wanted.
  virtual bool ApplyAgentKeys(const config::AgentConfig& cfg,
                              lifecycle::ReleaseCoordinator& releases,
                              modules::DeviceSource* serving) = 0;
  // Who holds devices that only this front end remembers (DRA's prepared
  // claims, "ns/name (uid)"): a reload that would drop them is refused.
  virtual std::vector<std::string> Holders() const = 0;
  // The CDI folders and kinds whose spec files are this front end's: the
  // start-up sweep keeps them.
  virtual std::vector<std::pair<std::string, cdi::Kind>> Specs() const = 0;

  // ---- a move from the device plugin API (DRA) ----
  // `held`: the devices pods hold through the device plugin API (module ID
  // -> "ns/pod"), as a PodResources List says. At a move to DRA, and at
  // each List while it withholds any: those are not offered until no List
  // lists them. The others leave it alone.
  virtual void Withhold(const std::map<std::string, std::string>& held) { (void)held; }
  virtual bool Withholding() const { return false; }
  // Started with the agent (no predecessor), it writes no slice until the
  // first List's Withhold: a devplugd before it may have served the name
  // through the device plugin API.
  virtual bool AwaitsHolders() const { return false; }

  // ---- a move to the device plugin API while claims are prepared ----
  // (DRA) A reload moves the resource to the device plugin API while
  // claims hold its devices: this node's slices are deleted now (before
  // the device plugin registers) and no claim is prepared any more, but
  // the driver stays registered for the prepared claims' unprepares. The
  // resource then drains beside its successor until Claimed() is empty.
  // `open`: a claim not prepared yet is still prepared until CloseDrain
  // (one allocated from the last slice may reach the kubelet after the
  // move: api_handoff.h, DraHandoff).
  virtual void Drain(bool open) { (void)open; }
  virtual bool draining() const { return false; }
  // (DRA, open drain) Refuses new claims after every prepare asked for
  // before, then runs `done` on another thread.
  virtual void CloseDrain(std::function<void()> done) { done(); }
  // (DRA) "ns/name" of each claim prepared: callable from any thread while
  // this front end lives.
  virtual std::function<std::set<std::string>()> PreparedNames() const {
    return [] { return std::set<std::string>(); };
  }
  // (DRA) The devices its prepared claims hold: module ID -> "ns/claim".
  virtual std::map<std::string, std::string> Claimed() const { return {}; }
  // (device plugin API) Devices a draining predecessor's claims hold
  // (module ID -> "ns/claim"): reported Unhealthy, so the kubelet hands
  // none of them out, until they are claimed no more. True when that
  // changed what is reported.
  virtual bool SetClaimed(const std::map<std::string, std::string>& claimed) {
    (void)claimed;
    return false;
  }

  // ---- releases (the device plugin's tracking of PodResources) ----
  virtual bool tracking() const = 0;
  // The tracker a PodResources List reaches (null: none, or not now).
  virtual lifecycle::ReleaseTracker* TrackerForList(bool list_ok, bool running) const = 0;
  // What the kubelet is told about releases may have changed: `instance`
  // publishes again when it did.
  virtual void TrackerChanged(lifecycle::ReleaseCoordinator& releases, Clock::time_point now,
                              modules::DeviceSource* instance) = 0;
  // `ids` are held by no pod any more.
  virtual void Release(const std::vector<std::string>& ids, const PodSnapshot& pods,
                       modules::DeviceSource* instance) = 0;

  // ---- status ----
  virtual void View(ops::ResourceView& rv) const = 0;
};

}  // namespace devplug::front_end
