// The device plugin API's front end of one resource (api =
// "device-plugin"): the DevicePlugin service and its ListAndWatch streams,
// the instance's ListSink (its list reaches the streams and the resource's
// CDI spec), the spec itself, and release tracking: what was handed out,
// and what PodResources says is held no more.
//
// Thread safety: as front_end::FrontEnd.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cdi/resource_cdi.h"
#include "device_plugin/device_plugin_service.h"
#include "device_plugin/stream_hub.h"
#include "front_end/front_end.h"
#include "lifecycle/handed_out.h"
#include "lifecycle/release_tracker.h"
#include "lifecycle/resource_releases.h"

namespace devplug::device_plugin {

class FrontEnd final : public front_end::FrontEnd {
 public:
  // `running`: the running configuration (host_root, for the CDI spec).
  FrontEnd(const config::AgentConfig& running, front_end::Context context);
  ~FrontEnd() override;

  Status ModuleLoaded(const config::AgentConfig&, const modules::LoadedModule&,
                      const front_end::FrontEnd*) override {
    return OkStatus();
  }
  front_end::InstanceHooks Launch(const config::AgentConfig& cfg,
                                  const modules::LoadedModule& module,
                                  const front_end::FrontEnd* predecessor) override;
  void Serve(modules::DeviceSource* instance, bool commit) override;
  void Clear(const modules::DeviceSource*) override {}

  void Register(grpc::ServerBuilder& builder, modules::DeviceSource* instance,
                const config::AgentConfig& cfg) override;
  v1beta1::DevicePluginOptions RegisterOptions(
      const modules::DeviceSource& instance) const override {
    return OptionsFor(instance);
  }
  pluginregistration::PluginInfo Info(const std::string& socket_path) const override;
  void ExpectStream(uint64_t n) override { hub_->ExpectKubeletStream(n); }
  bool Connected(uint64_t n) const override { return n != 0 && hub_->kubelet_stream() == n; }
  void EndCalls() override;
  void DropServices(bool exiting) override;
  void Withdraw(const modules::DeviceSource*, bool) override {}
  bool WaitStopped(Clock::time_point) override { return true; }
  void RegistrationConfirmed() override {}

  void HandOver(const front_end::FrontEnd& successor) override;
  bool ApplyAgentKeys(const config::AgentConfig& cfg, lifecycle::ReleaseCoordinator& releases,
                      modules::DeviceSource* serving) override;
  std::vector<std::string> Holders() const override { return {}; }
  std::vector<std::pair<std::string, cdi::Kind>> Specs() const override;

  // What a draining DRA predecessor's claims hold: Unhealthy to the kubelet.
  bool SetClaimed(const std::map<std::string, std::string>& claimed) override;

  bool tracking() const override { return tracker_ && tracker_->enabled(); }
  lifecycle::ReleaseTracker* TrackerForList(bool list_ok, bool running) const override;
  void TrackerChanged(lifecycle::ReleaseCoordinator& releases, Clock::time_point now,
                      modules::DeviceSource* instance) override;
  void Release(const std::vector<std::string>& ids, const PodSnapshot& pods,
               modules::DeviceSource* instance) override;

  void View(ops::ResourceView& rv) const override;

 private:
  class Claimed;
  const front_end::Context context_;
  // The hub outlives every instance that publishes into it.
  std::unique_ptr<StreamHub> hub_;
  // Devices by CDI name (null while cdi is "off"): its spec file.
  std::shared_ptr<cdi::ResourceCdi> cdi_;
  std::unique_ptr<DevicePluginService> service_;

  // Release tracking (a module with on_release; off while
  // pod_resources_poll is "0s").
  std::shared_ptr<lifecycle::ReleaseTracker> tracker_;
  uint64_t tracker_generation_ = 0;  // of the last published list
  // When each device was last handed out (pod_of); a reload's new
  // instance takes over its predecessor's.
  std::shared_ptr<lifecycle::HandedOut> handed_out_ = std::make_shared<lifecycle::HandedOut>();
  // Both, as the instance (ReleaseHooks) and the service (each Allocate)
  // see them; made at each launch.
  std::shared_ptr<lifecycle::ResourceReleases> releases_;
  // SetClaimed's; every instance applies it to its lists.
  const std::shared_ptr<Claimed> claimed_;
};

}  // namespace devplug::device_plugin
