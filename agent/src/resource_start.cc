// Starting resources: loading a module, creating its instance (under
// start_timeout, on the instance's worker), retrying with backoff one that
// could not start, and giving up on a module stuck in create().
#include <algorithm>

#include <spdlog/spdlog.h>

#include "agent.h"
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
  // The kubelet drops a stream whose message exceeds its 4 MiB receive limit
  // and never reconnects: such a list is held back (the previous one stays).
  // Both run on the module's worker, on_change right after a check_list that
  // passed for the same list: the message built for the check is the one sent.
  auto checked = std::make_shared<kubelet::SnapshotPtr>();
  opts.check_list = [checked](const modules::DeviceList& list) -> std::string {
    *checked = kubelet::MakeSnapshot(list);
    const size_t bytes = (*checked)->ByteSizeLong();
    if (bytes <= kubelet::kKubeletMaxMessageBytes) return "";
    checked->reset();
    return StrCat(list.size(), " devices make a ", bytes,
                  " byte device list, over the kubelet's 4 MiB message limit; not sending it");
  };
  // The CDI spec names a list's devices before the kubelet sees the list.
  opts.on_change = [hub = r.hub.get(), checked, cdi = r.cdi](modules::DeviceListPtr list) {
    if (cdi) cdi->Publish(*list);
    hub->Publish(*checked ? std::move(*checked) : kubelet::MakeSnapshot(*list));
  };
  opts.start_timeout = cfg.start_timeout;
  opts.prestart_timeout = cfg.prestart_timeout;
  opts.on_scan = [m = r.metrics](ops::ScanCause cause) { m->Rescan(cause); };
  opts.on_health = [m = r.metrics](uint64_t healthy, uint64_t unhealthy, uint64_t up,
                                   uint64_t down) {
    m->Devices(healthy, unhealthy);
    m->Transitions(up, down);
  };
  // host->pod_of(): the answer comes from a List sent after the device was
  // last handed out (its last Allocate, and the PreStartContainer being run,
  // if any): an older one may still name the previous holder. The shared
  // List serves when it is at most 1 s old and new enough; otherwise one of
  // our own. A device listed under two pods is no answer (-ENOTUNIQ).
  opts.pod_of = [pods = pods_, handed = r.handed_out, name = r.cfg.name](
                    const std::string& id, std::optional<Clock::time_point> not_before,
                    modules::PodHolder* holder) {
    std::optional<Clock::time_point> after = handed->Last(id);
    if (not_before && (!after || *not_before > *after)) after = not_before;
    const auto asked_at = Clock::now();
    // Three tries: a List already in flight may have been sent too early.
    for (int round = 0; round < 3; ++round) {
      auto snapshot = pods->Get(round == 0 ? milliseconds(1000) : milliseconds(0));
      if (!snapshot.ok()) return -EAGAIN;
      const kubelet::PodSnapshot& s = **snapshot;
      if (after && s.asked <= *after) continue;  // may predate the kubelet's record
      if (s.Ambiguous(name, id)) return -ENOTUNIQ;
      if (const Holder* h = s.Find(name, id)) {
        holder->pod_namespace = h->pod_namespace;
        holder->pod_name = h->pod_name;
        holder->container = h->container;
        return 0;
      }
      if (s.asked >= asked_at) return -ENOENT;  // a List of our own says nobody
    }
    return -EAGAIN;
  };
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
    opts.release.apply = [tracker = r.tracker](modules::DeviceList& list) {
      return tracker->Apply(list);
    };
    opts.release.due_before_start = [tracker = r.tracker](const std::vector<std::string>& ids,
                                                          bool* wait) {
      return tracker->ReleasesBeforeStart(ids, wait);
    };
    opts.release.released = [tracker = r.tracker, mailbox = mailbox_, i = r.id, m = r.metrics](
                                const std::vector<std::string>& ids, int rc, const std::string& why,
                                bool before_start) {
      m->Release(rc == 0         ? ops::ReleaseResult::kReleased
                 : rc == -EAGAIN ? ops::ReleaseResult::kBusy
                                 : ops::ReleaseResult::kFailed,
                 ids.size());
      if (before_start)
        tracker->OnReleasedBeforeStart(ids, rc == 0, Clock::now());
      else
        tracker->OnReleased(ids, rc, why, Clock::now());
      mailbox->Post({Event::kTrackerChanged, i, 0, OkStatus(), nullptr});
    };
  }
  if (path_watch_) {
    const uint64_t owner = path_watch_->NewOwner(r.id);
    opts.watch_path = [pw = path_watch_, owner](const std::string& path) {
      return pw->Add(owner, path);
    };
    opts.on_destroyed = [pw = path_watch_, owner] { pw->Remove(owner); };
  }
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
  if (!r.starting->WaitStopped(Clock::now())) (void)r.starting.release();
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
    RebuildUdevMonitor();  // before its first scan, so no event is missed
  }
  Launch(r, config_);
}

}  // namespace devplug
