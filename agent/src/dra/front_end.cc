#include "dra/front_end.h"

#include <algorithm>
#include <atomic>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "dra/resource_slice.h"
#include "kube/kubeconfig.h"
#include "kubelet/pod_lookup.h"
#include "util/leak.h"
#include "util/sanitizers.h"

namespace devplug::dra {

// The instance's ListSink: its lists go to the driver once the resource
// serves (a reload's staged resource publishes no slice). Weak: only front
// ends own the driver (a driver with none left is stopped), and a list
// published after that goes nowhere.
class FrontEnd::GatedSink final : public modules::ListSink {
 public:
  GatedSink(const std::shared_ptr<Driver>& driver, std::shared_ptr<HealthHub> health, bool active)
      : driver_(driver), health_(std::move(health)), active_(active) {}
  std::string Accept(const DeviceList&) override { return ""; }
  void Publish(const DeviceListPtr& list) override {
    if (!active_.load()) return;
    health_->Publish(*list);
    if (std::shared_ptr<Driver> d = driver_.lock()) d->Publish(list);
  }
  void set_active(bool active) { active_ = active; }

 private:
  const std::weak_ptr<Driver> driver_;
  const std::shared_ptr<HealthHub> health_;
  std::atomic<bool> active_;
};

FrontEnd::FrontEnd(front_end::Context context)
    : context_(std::move(context)), staged_(context_.staged) {}

FrontEnd::~FrontEnd() = default;

Status FrontEnd::ModuleLoaded(const config::AgentConfig& cfg, const modules::LoadedModule& module,
                              const front_end::FrontEnd* predecessor) {
  if (driver_) return OkStatus();  // a retry loads the module again
  const config::ResourceConfig& r = context_.cfg;
  const auto* before = dynamic_cast<const FrontEnd*>(predecessor);
  module_releases_ = module.has_on_release();
  if (before && before->driver_ && before->driver_->options().driver == r.driver) {
    driver_ = before->driver_;
    // What is withheld from the driver's slices stays so, and is offered
    // by whichever of the two serves when its pod goes.
    withhold_ = before->withhold_;
    return OkStatus();
  }
  auto creds = kube::ChooseCredentials(cfg);
  if (!creds.ok())
    return Status(
        creds.status().code(),
        StrCat("resource \"", r.name, "\": DRA needs the API server: ", creds.status().message(),
               cfg.api_kubeconfig.empty() && cfg.api_server.empty()
                   ? " (outside a pod, set agent.api_kubeconfig, or agent.api_server "
                     "and its credentials)"
                   : ""));
  std::error_code ec;
  std::filesystem::create_directories(cfg.dra_state_dir, ec);
  if (ec)
    return UnavailableError(
        StrCat("resource \"", r.name, "\": DRA: ", cfg.dra_state_dir, ": ", ec.message()));
  kube::Client::Options client;
  client.credentials = std::move(*creds);
  client.timeout = cfg.call_timeout;
  const bool awaits = !predecessor && !staged_ && cfg.pod_resources_poll.count() > 0;
  auto driver = Driver::Make({.resource = r.name,
                              .driver = r.driver,
                              .node = cfg.node_name,
                              .cdi_dir = r.cdi_dir,
                              .host_root = cfg.host_root,
                              .checkpoint = CheckpointPath(cfg, r),
                              .call_timeout = cfg.call_timeout,
                              .prestart_timeout = cfg.prestart_timeout,
                              .client = std::make_shared<kube::Client>(std::move(client)),
                              .taint_effect = r.taint_effect,
                              // A reload moves it from the device plugin
                              // API: no slice while the Node still offers
                              // the name that way.
                              .hold_for = predecessor && !before ? r.name : std::string(),
                              // At the agent's start: who holds devices
                              // through the device plugin API first.
                              .await_withheld = awaits,
                              // Where a kubelet runs, it must know the
                              // driver before a claim can be allocated
                              // from its slices. (Where none runs yet, its
                              // start deletes them, and its registration
                              // writes them again.)
                              .await_registration = context_.kubelet_runs,
                              .module_releases = module.has_on_release(),
                              .observer = context_.observer,
                              // A drain ends when its claims are gone.
                              .claims_changed = context_.tracker_changed});
  if (!driver.ok())
    return Status(driver.status().code(),
                  StrCat("resource \"", r.name, "\": DRA: ", driver.status().message()));
  spdlog::info("resource \"{}\": DRA driver {} on node {}", r.name, r.driver, cfg.node_name);
  driver_ = std::shared_ptr<Driver>(std::move(*driver));
  awaiting_holders_ = awaits;
  return OkStatus();
}

front_end::InstanceHooks FrontEnd::Launch(const config::AgentConfig& cfg,
                                          const modules::LoadedModule&,
                                          const front_end::FrontEnd*) {
  front_end::InstanceHooks hooks;
  if (!health_) health_ = std::make_shared<HealthHub>(cfg.node_name);
  sink_ = std::make_shared<GatedSink>(driver_, health_, !staged_);
  hooks.lists = sink_;
  // The claims say who holds a device (review D6: PodResources' `devices`
  // never lists a claim's, so cex's sweep destroyed the nodes of prepared
  // claims and `namespaces` refused every prepare).
  hooks.pods = std::make_shared<kubelet::DraPodLookup>(
      context_.pods, context_.cfg.driver, cfg.node_name,
      [holders = driver_->holders()](
          const std::string& id) -> std::optional<kubelet::DraPodLookup::Claim> {
        std::optional<ClaimPreparer::Holder> h = holders->Of(id);
        if (!h) return std::nullopt;
        return kubelet::DraPodLookup::Claim{h->claim.ns, h->claim.name, h->device};
      });
  return hooks;
}

void FrontEnd::Serve(modules::DeviceSource* instance, bool commit) {
  driver_->SetInstance(instance);
  serving_ = instance;
  if (!commit) return;
  staged_ = false;
  if (draining_) return;  // drained before it served (a devplugd's start): no slice
  if (sink_) sink_->set_active(true);
  // A reload's successor that took the driver over may taint otherwise.
  driver_->SetTaintEffect(context_.cfg.taint_effect);
  if (health_) health_->Publish(*instance->devices());
  driver_->Publish(instance->devices());
}

void FrontEnd::Clear(const modules::DeviceSource* source) {
  if (serving_ == source) serving_ = nullptr;
  if (driver_) driver_->ClearInstance(source);
}

void FrontEnd::Register(grpc::ServerBuilder& builder, modules::DeviceSource*,
                        const config::AgentConfig&) {
  v1_ = std::make_unique<DraServiceV1>(driver_.get());
  v1beta1_ = std::make_unique<DraServiceV1beta1>(driver_.get());
  builder.RegisterService(v1_.get());
  builder.RegisterService(v1beta1_.get());
  if (health_) {
    health_v1_ = std::make_unique<HealthServiceV1>(health_.get());
    health_v1alpha1_ = std::make_unique<HealthServiceV1alpha1>(health_.get());
    builder.RegisterService(health_v1_.get());
    builder.RegisterService(health_v1alpha1_.get());
  }
}

pluginregistration::PluginInfo FrontEnd::Info(const std::string& socket_path) const {
  pluginregistration::PluginInfo info;
  info.set_type(kDraPluginType);
  info.set_name(driver_->options().driver);
  info.set_endpoint(socket_path);
  for (const char* v : kDraVersions) info.add_supported_versions(v);
  // The kubelet picks the newest health service it knows, and opens one
  // stream to it.
  if (health_)
    for (const char* v : kHealthVersions) info.add_supported_versions(v);
  return info;
}

void FrontEnd::EndCalls() {
  // Calls still queued behind a slow module go on in the driver; the
  // kubelet gets UNAVAILABLE now and asks again (review D9: a reload
  // waited for them).
  if (v1_) v1_->AbortPending();
  if (v1beta1_) v1beta1_->AbortPending();
  // The health streams end, or the server's shutdown would wait for them.
  if (health_) health_->CloseAll();
}

void FrontEnd::DropServices([[maybe_unused]] bool exiting) {
#if !defined(DEVPLUG_ASAN) && !defined(DEVPLUG_TSAN)
  if (exiting) {
    // The server is kept until the process ends (Resource::StopServing),
    // and so are its services.
    (void)v1_.release();
    (void)v1beta1_.release();
    (void)health_v1_.release();
    (void)health_v1alpha1_.release();
    if (health_) LeakOnPurpose(health_);  // a stream's end may still come
    return;
  }
#endif
  v1_.reset();
  v1beta1_.reset();
  health_v1_.reset();
  health_v1alpha1_.reset();
}

void FrontEnd::Withdraw(const modules::DeviceSource* instance, bool exiting) {
  if (sink_) sink_->set_active(false);
  if (!Alone()) return;  // none, or a reload's successor took it over
  // The slices go with the last devplugd that serves them: a newer one
  // beside this one (a rolling update) keeps them.
  if (superseded_)
    spdlog::info("resource \"{}\": DRA: a newer devplugd serves driver {}; its slices stay",
                 context_.cfg.name, driver_->options().driver);
  if (exiting) {
    // Every resource's driver stops at once; WaitStopped waits for them
    // all under one deadline.
    driver_->RequestStop(/*delete_slices=*/!superseded_);
    return;
  }
  // The instance stays the driver's until its threads have stopped: a call
  // still queued there releases through it (review D2).
  const bool stopped = driver_->Stop(/*delete_slices=*/!superseded_);
  if (instance) driver_->ClearInstance(instance);
  if (serving_ == instance) serving_ = nullptr;
  if (!stopped) LeakOnPurpose(driver_);  // a thread still runs in it
  driver_.reset();
}

void FrontEnd::SetSuperseded(bool superseded) {
  superseded_ = superseded;
  if (driver_) driver_->SetSuperseded(superseded);
}

bool FrontEnd::WaitStopped(Clock::time_point deadline) {
  if (!Alone()) return true;  // none, or a successor's too
  const bool stopped = driver_->WaitStopped(deadline);
#if !defined(DEVPLUG_ASAN) && !defined(DEVPLUG_TSAN)
  // The DRA services outlive the exit (the server was released, not shut
  // down): a call still arriving finds a stopped driver, never a freed one.
  LeakOnPurpose(driver_);
#else
  if (!stopped) LeakOnPurpose(driver_);  // a thread still runs in it
#endif
  driver_.reset();
  return stopped;
}

std::vector<std::string> FrontEnd::Holders() const {
  std::vector<std::string> out;
  if (!driver_) return out;
  for (const PreparedClaim& c : driver_->prepared())
    out.push_back(StrCat(c.ns, "/", c.name, " (", c.uid, ")"));
  return out;
}

std::vector<std::pair<std::string, cdi::Kind>> FrontEnd::Specs() const {
  auto kind = cdi::KindOf(context_.cfg.name);
  if (!kind.ok()) return {};
  return {{context_.cfg.cdi_dir, *kind}};
}

void FrontEnd::Withhold(const std::map<std::string, std::string>& held) {
  Withheld& w = *withhold_;
  if (!driver_ || (held == w.held && !awaiting_holders_ && w.failed.empty())) return;
  awaiting_holders_ = false;
  const std::string& name = context_.cfg.name;
  for (const auto& [id, pod] : held)
    if (w.held.count(id) == 0)
      spdlog::info(
          "resource \"{}\": DRA: {} is held by pod {} through the device plugin API: "
          "left out of the slices until the pod is gone",
          name, id, pod);
  // The device plugin's release tracking would have run on_release() once
  // the pod was gone: it runs here, before the device is offered, so that
  // a claim never gets a device the pod before it left unscrubbed.
  std::vector<std::string> release(w.failed.begin(), w.failed.end());
  w.failed.clear();
  for (const auto& [id, pod] : w.held) {
    if (held.count(id) != 0) continue;
    if (module_releases_ && serving_) {
      spdlog::info(
          "resource \"{}\": DRA: {} is no longer held by pod {}: on_release() runs before it is "
          "offered in the slices",
          name, id, pod);
      w.releasing[id] = pod;
      release.push_back(id);
    } else {
      spdlog::info("resource \"{}\": DRA: {} is no longer held by pod {}: offered in the slices",
                   name, id, pod);
    }
  }
  w.held = held;
  if (!release.empty()) ReleaseWithheld(std::move(release));
  ApplyWithheld(/*always=*/true);  // the first one lets an awaiting publisher write
}

void FrontEnd::ReleaseWithheld(std::vector<std::string> ids) {
  std::sort(ids.begin(), ids.end());
  serving_->Release(
      ids, [w = withhold_, told = context_.tracker_changed, ids](int rc, const std::string& why) {
        {
          MutexLock lock(w->mu);
          w->results.push_back({ids, rc, why});
        }
        if (told) told();
      });
}

void FrontEnd::ApplyWithheld(bool always) {
  std::set<std::string> ids;
  for (const auto& [id, pod] : withhold_->held) ids.insert(id);
  for (const auto& [id, pod] : withhold_->releasing) ids.insert(id);
  if (driver_ && (always || ids != driver_->withheld())) driver_->SetWithheld(std::move(ids));
}

void FrontEnd::TrackerChanged(lifecycle::ReleaseCoordinator&, Clock::time_point,
                              modules::DeviceSource*) {
  Withheld& w = *withhold_;
  std::vector<Withheld::Result> results;
  {
    MutexLock lock(w.mu);
    results.swap(w.results);
  }
  if (results.empty()) return;
  const std::string& name = context_.cfg.name;
  for (const Withheld::Result& r : results) {
    if (r.rc == 0) {
      for (const std::string& id : r.ids) {
        spdlog::info("resource \"{}\": DRA: {} released after pod {}: offered in the slices", name,
                     id, w.releasing[id]);
        w.releasing.erase(id);
      }
      continue;
    }
    // Left out, and tried again at the next PodResources List.
    spdlog::warn(
        "resource \"{}\": DRA: on_release({}) after the device plugin's pod: {}; left out of "
        "the slices and tried again at the next PodResources List",
        name, StrJoin(r.ids, ","), r.why);
    w.failed.insert(r.ids.begin(), r.ids.end());
  }
  ApplyWithheld(/*always=*/false);
}

void FrontEnd::CloseDrain(std::function<void()> done) {
  if (!driver_) {
    done();
    return;
  }
  driver_->CloseDrain(std::move(done));
}

std::function<std::set<std::string>()> FrontEnd::PreparedNames() const {
  const Driver* driver = driver_.get();
  return [driver] {
    std::set<std::string> out;
    if (driver)
      for (const PreparedClaim& c : driver->prepared()) out.insert(StrCat(c.ns, "/", c.name));
    return out;
  };
}

void FrontEnd::Drain(bool open) {
  if (!driver_ || draining_) return;
  draining_ = true;
  if (sink_) sink_->set_active(false);
  spdlog::info(
      "resource \"{}\": DRA: moved to the device plugin API; this node's slices of driver {} "
      "are deleted, and the driver stays for the unprepare of {} claim(s) prepared before",
      context_.cfg.name, driver_->options().driver, driver_->prepared().size());
  if (!driver_->Drain(open))
    spdlog::warn("resource \"{}\": DRA: deleting this node's slices did not end in time",
                 context_.cfg.name);
}

std::map<std::string, std::string> FrontEnd::Claimed() const {
  std::map<std::string, std::string> out;
  if (!driver_) return out;
  // The checkpoint's: a claim whose release still runs holds its devices.
  for (const PreparedClaim& c : driver_->prepared())
    for (const PreparedDevice& d : c.devices) out[d.id] = StrCat(c.ns, "/", c.name);
  return out;
}

void FrontEnd::View(ops::ResourceView& rv) const {
  if (!driver_) return;
  ops::DraView v;
  v.driver = driver_->options().driver;
  v.pool = driver_->options().node;
  v.generation = driver_->generation();
  v.slice_syncs = driver_->syncs();
  v.slice_error = driver_->sync_error();
  v.cdi_dir = driver_->options().cdi_dir;
  v.cdi_written_to = driver_->Dir();
  for (const PreparedClaim& c : driver_->prepared()) {
    ops::DraView::Claim claim{c.uid, c.ns, c.name, {}};
    for (const PreparedDevice& d : c.devices)
      claim.devices.push_back({d.request, d.device, d.id, d.cdi_ids});
    v.prepared.push_back(std::move(claim));
  }
  v.releasing = driver_->releasing();
  for (const auto& [id, pod] : withhold_->held) v.withheld.push_back(StrCat(id, " (", pod, ")"));
  for (const auto& [id, pod] : withhold_->releasing)
    v.withheld.push_back(StrCat(id, " (", pod, " gone; releasing)"));
  v.draining = draining_;
  rv.dra = std::move(v);
}

}  // namespace devplug::dra
