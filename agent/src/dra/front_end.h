// DRA's front end of one resource (api = "dra"). It owns, or shares with a
// reload's successor, the resource's dra::Driver; hands the module instance
// its ListSink (the slices, active only while the resource serves) and its
// pod lookup (the claims say who holds a device); serves the DRAPlugin
// services on the resource's socket and says what the plugin watcher's
// Registration announces; and stops the driver when no resource serves it
// any more.
//
// Thread safety: as front_end::FrontEnd. The driver and the services it
// makes are thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "config/config.h"
#include "dra/dra_service.h"
#include "dra/driver.h"
#include "dra/health_hub.h"
#include "front_end/front_end.h"
#include "model/rpc.h"
#include "modules/device_source.h"
#include "modules/hooks.h"
#include "pluginregistration/v1/api.pb.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug::dra {

class FrontEnd final : public front_end::FrontEnd {
 public:
  explicit FrontEnd(front_end::Context context);
  ~FrontEnd() override;

  // Its driver, made with its API server client, or `predecessor`'s when a
  // reload re-creates a resource of the same driver (one driver owns its
  // checkpoint: a second one would read it, and write specs again, while
  // the first still prepares and unprepares).
  Status ModuleLoaded(const config::AgentConfig& cfg, const modules::LoadedModule& module,
                      const front_end::FrontEnd* predecessor) override;
  // The instance's ListSink: its lists reach the driver once the resource
  // serves. Who holds a device: the claim that has it prepared.
  front_end::InstanceHooks Launch(const config::AgentConfig& cfg,
                                  const modules::LoadedModule& module,
                                  const front_end::FrontEnd* predecessor) override;
  // The driver's calls go to `instance`; with `commit`, its current list
  // becomes the slices at once.
  void Serve(modules::DeviceSource* instance, bool commit) override;
  void Clear(const modules::DeviceSource* instance) override;

  // The DRAPlugin services, v1 and v1beta1.
  void Register(grpc::ServerBuilder& builder, modules::DeviceSource* instance,
                const config::AgentConfig& cfg) override;
  v1beta1::DevicePluginOptions RegisterOptions(const modules::DeviceSource&) const override {
    return {};
  }
  // The kubelet dials the DRAPlugin service at this same socket.
  pluginregistration::PluginInfo Info(const std::string& socket_path) const override;
  // The kubelet opens no stream: it calls the driver when a pod needs it.
  void ExpectStream(uint64_t) override {}
  bool Connected(uint64_t n) const override { return n != 0; }
  void EndCalls() override;
  void DropServices(bool exiting) override;
  // Stops the driver unless a reload's successor shares it (its last task
  // deletes this node's slices); `instance` is cleared once the driver's
  // threads have stopped (a call still queued releases through it).
  void Withdraw(const modules::DeviceSource* instance, bool exiting) override;
  bool WaitStopped(Clock::time_point deadline) override;
  // The first slices wait for it, and the kubelet wipes its node's slices
  // at its start: they are written again.
  void RegistrationConfirmed() override {
    if (driver_) driver_->KubeletRegistered();
  }
  // A newer devplugd serving this driver beside this one owns its slices:
  // this one writes none, and leaves them at its exit.
  bool Streamless() const override { return true; }
  void SetSuperseded(bool superseded) override;

  void HandOver(const front_end::FrontEnd&) override {}
  bool ApplyAgentKeys(const config::AgentConfig&, lifecycle::ReleaseCoordinator&,
                      modules::DeviceSource*) override {
    return false;
  }
  // The prepared claims.
  std::vector<std::string> Holders() const override;
  // The claims' specs, kept with the claims.
  std::vector<std::pair<std::string, cdi::Kind>> Specs() const override;
  // Pods that hold devices through the device plugin API since before the
  // move: those devices stay out of the slices until their pods are gone.
  void Withhold(const std::map<std::string, std::string>& held) override;
  bool Withholding() const override {
    return !withhold_->held.empty() || !withhold_->failed.empty();
  }
  bool AwaitsHolders() const override { return awaiting_holders_; }
  void Drain(bool open) override;
  void CloseDrain(std::function<void()> done) override;
  std::function<std::set<std::string>()> PreparedNames() const override;
  bool draining() const override { return draining_; }
  std::map<std::string, std::string> Claimed() const override;

  // Its devices are released by NodeUnprepareResources, not by what
  // PodResources lists.
  bool tracking() const override { return false; }
  lifecycle::ReleaseTracker* TrackerForList(bool, bool) const override { return nullptr; }
  // An on_release() of a device withheld until its pod went has ended.
  void TrackerChanged(lifecycle::ReleaseCoordinator&, Clock::time_point,
                      modules::DeviceSource*) override;
  void Release(const std::vector<std::string>&, const PodSnapshot&,
               modules::DeviceSource*) override {}

  void View(ops::ResourceView& rv) const override;

  // Where the driver of `r` keeps its prepared claims.
  static std::string CheckpointPath(const config::AgentConfig& cfg,
                                    const config::ResourceConfig& r) {
    return StrCat(cfg.dra_state_dir, "/", r.driver, ".json");
  }

  // Null before the module is loaded, and once stopped.
  const Driver* driver() const { return driver_.get(); }

 private:
  class GatedSink;
  // No other front end shares the driver.
  bool Alone() const { return driver_ && driver_.use_count() == 1; }

  const front_end::Context context_;
  bool staged_;  // a reload's, not serving yet: its lists make no slice
  std::shared_ptr<Driver> driver_;
  bool superseded_ = false;  // a newer devplugd serves the driver beside this one
  std::shared_ptr<GatedSink> sink_;
  std::unique_ptr<DraServiceV1> v1_;
  std::unique_ptr<DraServiceV1beta1> v1beta1_;
  // The devices' health, to the kubelet's DRAResourceHealth streams (made
  // at the first Launch, fed by the instance's lists).
  std::shared_ptr<HealthHub> health_;
  // What Withhold keeps out of the slices; shared with a reload's
  // successor of the same driver (the slices it shapes are the driver's).
  struct Withheld {
    std::map<std::string, std::string> held;  // module ID -> "ns/pod" holding it
    // Their pods gone: on_release() runs before they are offered (module
    // ID -> "ns/pod" that held it); `failed`: it failed, and is tried again
    // at the next List.
    std::map<std::string, std::string> releasing;
    std::set<std::string> failed;
    // on_release() results, from the module's threads: IDs, rc, why.
    struct Result {
      std::vector<std::string> ids;
      int rc;
      std::string why;
    };
    Mutex mu;
    std::vector<Result> results DEVPLUG_GUARDED_BY(mu);
  };
  // Runs on_release() for `ids` (their pods are gone).
  void ReleaseWithheld(std::vector<std::string> ids);
  // The driver's slices leave out what is held or releasing (told even
  // when that is unchanged, with `always`).
  void ApplyWithheld(bool always);
  std::shared_ptr<Withheld> withhold_ = std::make_shared<Withheld>();
  bool module_releases_ = false;              // the module has on_release()
  modules::DeviceSource* serving_ = nullptr;  // the instance Serve gave
  bool awaiting_holders_ = false;             // AwaitsHolders
  bool draining_ = false;                     // Drain
  std::unique_ptr<HealthServiceV1> health_v1_;
  std::unique_ptr<HealthServiceV1alpha1> health_v1alpha1_;
};

}  // namespace devplug::dra
