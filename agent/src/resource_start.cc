// Starting resources: loading a module, creating its instance (under
// start_timeout, on the instance's worker), retrying with backoff one that
// could not start, and giving up on a module stuck in create().
#include <algorithm>

#include <spdlog/spdlog.h>

#include "agent.h"
#include "kubelet/list_publisher.h"
#include "kubelet/pod_lookup.h"
#include "modules/loaded_module.h"

namespace devplug {
namespace {

using std::chrono::milliseconds;

// Retries of a resource that could not start.
constexpr milliseconds kMinStartBackoff{1000};
constexpr milliseconds kMaxStartBackoff{60'000};

}  // namespace

std::unique_ptr<Agent::Resource> Agent::NewResource(const config::ResourceConfig& cfg, size_t index,
                                                    bool staged) {
  auto r = std::make_unique<Resource>(this, cfg, next_id_++, index);
  r->staged = staged;
  r->handed_out = std::make_shared<lifecycle::HandedOut>();
  r->hub = std::make_unique<kubelet::StreamHub>([mailbox = mailbox_, id = r->id](uint64_t reg) {
    mailbox->Post({Event::kStreamEnded, id, reg, OkStatus(), nullptr});
  });
  // A reload's resource is counted from its create() on, but exported only
  // once the reload commits (one series per resource name).
  r->metrics = staged ? std::make_shared<ops::ResourceMetrics>(cfg.name) : metrics_->Add(cfg.name);
  if (cfg.cdi != CdiMode::kOff) {
    // The configuration refused names without a CDI kind.
    auto c = cdi::ResourceCdi::Make({.resource = cfg.name,
                                     .mode = cfg.cdi,
                                     .dir = cfg.cdi_dir,
                                     .host_root = config_.host_root,
                                     .only = cfg.cdi_only,
                                     .active = !staged});
    if (c.ok()) r->cdi = *c;
  }
  return r;
}

Agent::Resource* Agent::ById(uint64_t id) {
  for (auto& r : resources_)
    if (r->id == id) return r.get();
  if (reload_)
    for (auto& r : reload_->staged)
      if (r->id == id) return r.get();
  return nullptr;
}

Status Agent::LoadModule(Resource& r) {
  const std::string path = modules::ResolveModulePath(r.cfg.module, config_.module_dir);
  auto module = modules::LoadedModule::Load(path);
  if (!module.ok()) return module.status();
  if (Status st = (*module)->CheckKeys(r.cfg, r.index); !st.ok()) return st;
  r.module = *module;
  return OkStatus();
}

lifecycle::ReleaseTiming Agent::Timing(const config::AgentConfig& c) {
  lifecycle::ReleaseTiming timing;
  timing.grace = c.release_grace;
  timing.settle = c.kubelet_settle;
  timing.unseen = c.unseen_timeout;
  return timing;
}

void Agent::Launch(Resource& r, const config::AgentConfig& cfg,
                   std::shared_ptr<lifecycle::ReleaseTracker> carried) {
  modules::ModuleInstance::Options opts;
  opts.host_root = cfg.host_root;
  opts.index = r.index;
  opts.start_timeout = cfg.start_timeout;
  opts.prestart_timeout = cfg.prestart_timeout;
  opts.lists = std::make_shared<kubelet::ListPublisher>(r.hub.get(), r.cdi);
  opts.observer = r.metrics;
  opts.pods = std::make_shared<kubelet::PodLookup>(pods_, r.handed_out, r.cfg.name);
  r.tracker.reset();
  if (r.module->has_on_release()) {
    // Every module with on_release has a tracker, switched off while
    // pod_resources_poll is "0s", so a reload can switch tracking on and
    // off for instances that keep running. A resource a reload re-creates
    // takes over its predecessor's: no release state is lost, and releases
    // still running in the old instance report to it.
    //
    // A carried tracker belongs to the running resource until the reload
    // commits: staging only reads it (the first scan's held-back devices).
    // Its timing and on/off change in ApplyTracking, which runs on serving
    // resources only, so a refused reload leaves it exactly as it was.
    if (carried)
      r.tracker = std::move(carried);
    else
      r.tracker = std::make_shared<lifecycle::ReleaseTracker>(Timing(cfg),
                                                              cfg.pod_resources_poll.count() > 0);
  }
  r.releases = std::make_shared<lifecycle::ResourceReleases>(
      r.handed_out, r.tracker, [mailbox = mailbox_, i = r.id] {
        mailbox->Post({Event::kTrackerChanged, i, 0, OkStatus(), nullptr});
      });
  if (r.tracker) opts.releases = r.releases;
  if (hotplug_.path_watch())
    opts.watches = std::make_shared<udev::PathWatchSet>(hotplug_.path_watch(), r.id);
  const uint64_t launch = ++r.launch;
  ++r.attempts;
  r.start_deadline = Clock::now() + cfg.start_timeout;
  r.starting = modules::ModuleInstance::Launch(
      r.module, r.cfg, std::move(opts), [mailbox = mailbox_, i = r.id, launch](Status st) {
        mailbox->Post({Event::kCreated, i, launch, std::move(st), nullptr});
      });
}

void Agent::OnCreated(Resource& r, uint64_t launch, Status st) {
  if (launch != r.launch || !r.starting) return;  // given up meanwhile
  std::unique_ptr<modules::ModuleInstance> inst = std::move(r.starting);
  r.start_deadline.reset();
  if (r.staged) {
    // A reload's resource: the reload decides, once all of them are known.
    if (st.ok())
      r.instance = std::move(inst);
    else
      r.failure = std::move(st);
    inst.reset();
    FinishReload();
    return;
  }
  if (!st.ok()) {
    inst.reset();  // stops its (idle) worker
    // A configuration problem found by the module needs the operator.
    LeaveOut(r, st, st.code() != StatusCode::kInvalidArgument);
    return;
  }
  r.instance = std::move(inst);
  if (r.tracker && !r.instance->tracks_releases()) r.tracker.reset();  // opted out
  if (Tracking(r)) {
    spdlog::info("resource \"{}\": tracking device releases through {}", r.cfg.name,
                 pods_->socket());
    SchedulePodList(true);  // the first List is the truth about what is held
  }
  const bool retried = !r.failure.ok();
  r.failure = OkStatus();
  r.start_backoff = milliseconds(0);
  if (retried) spdlog::info("resource \"{}\": started (attempt {})", r.cfg.name, r.attempts);
  spdlog::info("resource \"{}\": module \"{}\" {} from {}", r.cfg.name, r.module->name(),
               r.module->version(), r.module->path());
  // At start every resource is served together, once all are created.
  if (started_ && !shut_down_) r.registrar->Start();
}

void Agent::LeaveOut(Resource& r, Status why, bool retry) {
  const bool same = !r.failure.ok() && r.failure.message() == why.message();
  r.start_backoff = std::clamp(r.start_backoff * 2, kMinStartBackoff, kMaxStartBackoff);
  if (retry) r.start_at = Clock::now() + r.start_backoff;
  const std::string next = retry ? StrCat("; retrying in ", r.start_backoff.count() / 1000, " s")
                                 : std::string("; not retried (fix it, then restart devplugd)");
  // The first failure, and a changed reason, are worth the operator's eye;
  // the same reason again is not.
  if (r.failure.ok())
    spdlog::error("resource \"{}\" left out: {}{}", r.cfg.name, why.message(), next);
  else if (!same)
    spdlog::warn("resource \"{}\" still left out: {}{}", r.cfg.name, why.message(), next);
  else
    spdlog::debug("resource \"{}\" still left out: {}{}", r.cfg.name, why.message(), next);
  r.failure = std::move(why);
}

void Agent::GiveUp(Resource& r) {
  if (!r.starting) return;
  const std::string why = r.starting->GiveUpMessage();
  r.starting->RequestStop();
  // Stuck inside the module: its worker may come back at any time, so the
  // instance outlives us on purpose. Another attempt would only strand
  // another thread in the same call.
  (void)modules::StopOrAbandon(r.starting, Clock::now());
  r.starting.reset();
  r.start_deadline.reset();
  ++r.launch;
  LeaveOut(r, UnavailableError(why), false);
}

void Agent::TryStart(Resource& r) {
  r.start_at.reset();
  if (!r.module) {
    if (Status st = LoadModule(r); !st.ok()) {
      LeaveOut(r, st, st.code() != StatusCode::kInvalidArgument);
      return;
    }
    UpdateHotplug();  // before its first scan, so no event is missed
  }
  Launch(r, config_);
}

}  // namespace devplug
