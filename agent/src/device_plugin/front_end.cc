#include "device_plugin/front_end.h"

#include <spdlog/spdlog.h>

#include "device_plugin/list_publisher.h"
#include "kubelet/pod_lookup.h"
#include "kubelet/registration_service.h"
#include "util/mutex.h"
#include "util/sanitizers.h"

namespace devplug::device_plugin {
namespace {

lifecycle::ReleaseTiming Timing(const config::AgentConfig& c) {
  lifecycle::ReleaseTiming timing;
  timing.grace = c.release_grace;
  timing.settle = c.kubelet_settle;
  timing.unseen = c.unseen_timeout;
  return timing;
}

}  // namespace

// The devices a draining DRA predecessor's claims hold.
class FrontEnd::Claimed final : public modules::Withholds {
 public:
  void Apply(DeviceList& list) const override {
    MutexLock lock(mu_);
    if (by_id_.empty()) return;
    for (Device& d : list) {
      auto it = by_id_.find(d.id);
      if (it == by_id_.end()) continue;
      d.healthy = false;
      d.held_back = false;  // not for a release: Allocate refuses it
      d.health_reason = StrCat("prepared for DRA claim ", it->second,
                               " from before the move to the device plugin API");
    }
  }
  // True when it changed.
  bool Set(const std::map<std::string, std::string>& by_id) {
    MutexLock lock(mu_);
    if (by_id == by_id_) return false;
    by_id_ = by_id;
    return true;
  }

 private:
  mutable Mutex mu_;
  std::map<std::string, std::string> by_id_ DEVPLUG_GUARDED_BY(mu_);
};

FrontEnd::FrontEnd(const config::AgentConfig& running, front_end::Context context)
    : context_(std::move(context)),
      hub_(std::make_unique<StreamHub>(context_.stream_ended)),
      claimed_(std::make_shared<Claimed>()) {
  const config::ResourceConfig& cfg = context_.cfg;
  if (cfg.cdi != CdiMode::kOff) {
    // The configuration refused names without a CDI kind.
    auto c = cdi::ResourceCdi::Make({.resource = cfg.name,
                                     .mode = cfg.cdi,
                                     .dir = cfg.cdi_dir,
                                     .host_root = running.host_root,
                                     .only = cfg.cdi_only,
                                     .active = !context_.staged});
    if (c.ok()) cdi_ = *c;
  }
}

FrontEnd::~FrontEnd() = default;

front_end::InstanceHooks FrontEnd::Launch(const config::AgentConfig& cfg,
                                          const modules::LoadedModule& module,
                                          const front_end::FrontEnd* predecessor) {
  // A resource a reload re-creates takes over its predecessor's release
  // state: no release state is lost, and releases still running in the old
  // instance report to it.
  const auto* before = dynamic_cast<const FrontEnd*>(predecessor);
  if (before) handed_out_ = before->handed_out_;
  front_end::InstanceHooks hooks;
  hooks.lists = std::make_shared<ListPublisher>(hub_.get(), cdi_);
  hooks.pods = std::make_shared<kubelet::PodLookup>(context_.pods, handed_out_, context_.cfg.name);
  tracker_.reset();
  if (module.has_on_release()) {
    // Every module with on_release has a tracker, switched off while
    // pod_resources_poll is "0s", so a reload can switch tracking on and
    // off for instances that keep running.
    //
    // A carried tracker belongs to the running resource until the reload
    // commits: staging only reads it (the first scan's held-back devices).
    // Its timing and on/off change in ApplyAgentKeys, which runs on serving
    // resources only, so a refused reload leaves it exactly as it was.
    if (before && before->tracker_)
      tracker_ = before->tracker_;
    else
      tracker_ = std::make_shared<lifecycle::ReleaseTracker>(Timing(cfg),
                                                             cfg.pod_resources_poll.count() > 0);
  }
  releases_ = std::make_shared<lifecycle::ResourceReleases>(handed_out_, tracker_,
                                                            context_.tracker_changed);
  if (tracker_) hooks.releases = releases_;
  hooks.withholds = claimed_;
  return hooks;
}

bool FrontEnd::SetClaimed(const std::map<std::string, std::string>& claimed) {
  return claimed_->Set(claimed);
}

void FrontEnd::Serve(modules::DeviceSource* instance, bool commit) {
  // Its spec replaces the old resource's before the kubelet hears of it.
  if (commit && cdi_) cdi_->Activate();
  if (tracker_ && !instance->tracks_releases()) tracker_.reset();  // opted out
}

void FrontEnd::Register(grpc::ServerBuilder& builder, modules::DeviceSource* instance,
                        const config::AgentConfig& cfg) {
  service_ = std::make_unique<DevicePluginService>(instance, hub_.get(), context_.timers,
                                                   cfg.call_timeout, cfg.prestart_timeout,
                                                   releases_, context_.observer, cdi_);
  builder.RegisterService(service_.get());
}

pluginregistration::PluginInfo FrontEnd::Info(const std::string&) const {
  return kubelet::RegistrationService::DevicePluginInfo(context_.cfg.name);
}

void FrontEnd::EndCalls() {
  // Our streams end first, so the kubelet sees a clean end.
  hub_->CloseAll();
  if (service_) service_->AbortPending();
}

void FrontEnd::DropServices([[maybe_unused]] bool exiting) {
#if !defined(DEVPLUG_ASAN) && !defined(DEVPLUG_TSAN)
  if (exiting) {
    // The server is kept until the process ends (Resource::StopServing),
    // and so is its service.
    (void)service_.release();
    return;
  }
#endif
  service_.reset();
}

void FrontEnd::HandOver(const front_end::FrontEnd& successor) {
  const auto* next = dynamic_cast<const FrontEnd*>(&successor);
  if (!tracker_ || (next && tracker_ == next->tracker_)) return;
  const std::vector<std::string> dropped = tracker_->SetEnabled(false);
  if (!dropped.empty())
    spdlog::warn(
        "resource \"{}\": the new module instance does not release devices; {} will not be "
        "released",
        context_.cfg.name, StrJoin(dropped, ","));
}

bool FrontEnd::ApplyAgentKeys(const config::AgentConfig& cfg,
                              lifecycle::ReleaseCoordinator& releases,
                              modules::DeviceSource* serving) {
  if (service_) {
    service_->set_call_timeout(cfg.call_timeout);
    service_->set_prestart_timeout(cfg.prestart_timeout);
  }
  // The one place a tracker's settings change, and only for a resource that
  // serves: a staged one may share its running predecessor's tracker.
  if (!tracker_ || !serving) return false;
  tracker_->set_timing(Timing(cfg));
  const bool on = cfg.pod_resources_poll.count() > 0;
  if (on == tracker_->enabled()) return false;
  const std::vector<std::string> dropped = tracker_->SetEnabled(on);
  if (on)
    spdlog::info("resource \"{}\": tracking device releases through {}", context_.cfg.name,
                 context_.pods->socket());
  else
    spdlog::warn(
        "resource \"{}\": release tracking is off (pod_resources_poll = \"0s\"){}",
        context_.cfg.name,
        dropped.empty() ? std::string() : StrCat("; not released: ", StrJoin(dropped, ",")));
  // Devices held back are offered again, or the reverse.
  TrackerChanged(releases, Clock::now(), serving);
  return on;  // the first List is the truth about what is held
}

std::vector<std::pair<std::string, cdi::Kind>> FrontEnd::Specs() const {
  if (!cdi_) return {};
  return {{cdi_->dir(), cdi_->kind()}};
}

lifecycle::ReleaseTracker* FrontEnd::TrackerForList(bool list_ok, bool running) const {
  if (!tracker_) return nullptr;
  // Every tracker hears of a failed List (it says whether it needs one);
  // only running, tracking resources take an answer.
  if (list_ok && (!tracking() || !running)) return nullptr;
  return tracker_.get();
}

void FrontEnd::TrackerChanged(lifecycle::ReleaseCoordinator& releases, Clock::time_point now,
                              modules::DeviceSource* instance) {
  if (!tracker_ || !instance) return;
  if (releases.OnTrackerChanged(*tracker_, tracker_generation_, now)) instance->Republish();
}

void FrontEnd::Release(const std::vector<std::string>& ids, const PodSnapshot& pods,
                       modules::DeviceSource* instance) {
  if (ids.empty() || !instance) return;
  spdlog::info("resource \"{}\": {} no longer held; releasing", context_.cfg.name,
               StrJoin(ids, ","));
  instance->Release(ids);
  if (cdi_) cdi_->Released(ids, pods.asked);
}

void FrontEnd::View(ops::ResourceView& rv) const {
  rv.release_tracking = tracking();
  rv.tracker = tracker_.get();
  if (cdi_)
    rv.cdi = ops::CdiView{.mode = std::string(config::CdiModeName(cdi_->mode())),
                          .spec = cdi_->dir() + "/" + cdi_->file_name(),
                          .written_to = cdi_->Dir() + "/" + cdi_->file_name(),
                          .kind = cdi_->kind().str(),
                          .named = cdi_->named(),
                          .allocations = cdi_->allocations(),
                          .problem = cdi_->problem()};
}

}  // namespace devplug::device_plugin
