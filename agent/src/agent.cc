#include "agent.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include <prometheus/exposer.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "front_end/make.h"
#include "model/kubelet_names.h"
#include "modules/conflicts.h"
#include "modules/loaded_module.h"
#include "ops/log.h"
#include "util/exit_priority.h"
#include "util/sanitizers.h"
#include "util/systemd.h"

namespace devplug {

// ---- Agent --------------------------------------------------------------------------------

namespace {

using std::chrono::milliseconds;

kubelet::PodResourcesClient::Options PodOptions(const config::AgentConfig& c) {
  kubelet::PodResourcesClient::Options o;
  o.socket = c.pod_resources_socket;
  return o;
}
}  // namespace

Agent::Agent(config::AgentConfig config) : Agent(std::move(config), Options()) {}

Agent::Agent(config::AgentConfig config, Options options)
    : config_(std::move(config)),
      options_(std::move(options)),
      mailbox_(std::make_shared<Mailbox>()),
      metrics_(std::make_shared<ops::Metrics>(
          options_.version, StrCat(DEVPLUG_MODULE_ABI_MAJOR, ".", DEVPLUG_MODULE_ABI_MINOR))),
      pods_(std::make_shared<kubelet::PodResourcesClient>(PodOptions(config_))),
      releases_(config_.pod_resources_poll),
      predecessor_fd_(options_.predecessor_fd) {}

Agent::~Agent() { Shutdown(); }

Status Agent::Start() {
  const auto t0 = Clock::now();
  Resource::PinProcessStamp();
  if (mailbox_->fd() < 0) return InternalError(StrCat("eventfd: ", std::strerror(errno)));
  // One devplugd per node, before anything is bound or swept.
  if (Status st = TakeInstanceLock(); !st.ok()) return st;
  // Watch before the first registration so a kubelet that starts meanwhile
  // is not missed.
  if (Status st = kubelet_.Start(config_.plugin_dir, config_.plugins_registry_dir); !st.ok())
    return st;
  // A change during our own start is a change too.
  UpdateConfigWatch();
  UpdateNodeLabelWatch();
  hotplug_.OpenPathWatch();
  // Status and metrics: useful from the first moment, and never a reason
  // not to serve the hardware.
  StartControl();
  if (!config_.metrics_address.empty()) {
    try {
      exposer_ = std::make_shared<prometheus::Exposer>(config_.metrics_address, 1);
      exposer_->RegisterCollectable(metrics_);
      spdlog::info("metrics on http://{}/metrics", config_.metrics_address);
    } catch (const std::exception& e) {
      spdlog::error("no metrics on {}: {}", config_.metrics_address, e.what());
    }
  }

  for (size_t i = 0; i < config_.resources.size(); ++i)
    resources_.Add(NewResource(config_.resources[i], i));
  RemoveStaleSockets();
  RemoveStaleSpecs();
  // Load every module first: their subsystems make up the udev filter, and
  // the monitor must listen before the first scans so no event is lost.
  // A mistake in a module's keys is fatal at start, like a TOML error: the
  // operator sees it at once instead of a silently missing resource. Every
  // resource's mistakes are reported in one go, as --check-config does.
  // Resources whose keys are wrong are not created; the others are, so that
  // their create-time mistakes are found too.
  std::vector<std::pair<size_t, std::string>> config_errors;
  for (auto& r : resources_) {
    if (Status st = r->LoadModule(); !st.ok()) {
      if (st.code() == StatusCode::kInvalidArgument)
        config_errors.emplace_back(r->index(), st.message());
      else
        r->LeaveOut(st, true);
    }
  }
  UpdateHotplug();
  const auto t_loaded = Clock::now();
  // Every create() and first scan run at once, each on its own worker.
  for (auto& r : resources_)
    if (r->module()) r->Launch(config_);
  AwaitCreated(resources_.begin(), resources_.end());
  for (auto& r : resources_) r->GiveUp();
  // A DRA resource writes its first slices once a List says which of its
  // devices pods hold through the device plugin API (a devplugd before
  // this one may have served the name that way).
  if (std::any_of(resources_.begin(), resources_.end(),
                  [](const auto& r) { return r->front_end().AwaitsHolders(); }))
    SchedulePodList(true);
  for (const auto& r : resources_)
    if (r->failure().code() == StatusCode::kInvalidArgument)
      config_errors.emplace_back(r->index(), r->failure().message());
  if (!config_errors.empty()) {
    std::stable_sort(config_errors.begin(), config_errors.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::string> lines;
    for (auto& [index, message] : config_errors) lines.push_back(std::move(message));
    return InvalidArgumentError(StrJoin(lines, "\n"));
  }
  for (const auto& r : resources_) {
    if (!r->failure().ok() && r->cfg().required)
      return FailedPreconditionError(
          StrCat("required resource \"", r->cfg().name, "\" failed: ", r->failure().message()));
  }
  std::vector<std::pair<std::string, DeviceListPtr>> lists;
  for (const auto& r : resources_)
    if (r->instance()) lists.emplace_back(r->cfg().name, r->instance()->devices());
  for (const std::string& w : FindRecipeConflicts(lists)) spdlog::warn("{}", w);
  StartDrains();
  const auto t_created = Clock::now();
  for (auto& r : resources_)
    if (r->instance()) r->registrar().Start();
  for (auto& d : draining_) d->registrar().Start();
  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  spdlog::debug(
      "started in {:.1f} ms (modules loaded {:.1f} ms, created {:.1f} ms, serving and "
      "registering {:.1f} ms)",
      ms(Clock::now() - t0), ms(t_loaded - t0), ms(t_created - t_loaded),
      ms(Clock::now() - t_created));
  if (config_.resync_interval.count() > 0) next_resync_ = Clock::now() + config_.resync_interval;
  started_ = true;
  UpdateStatus();
  if (NotifiesManager()) sd::Notify("READY=1");
  if (const auto watchdog = sd::WatchdogInterval()) {
    watchdog_interval_ = *watchdog / 2;
    next_watchdog_ = Clock::now() + watchdog_interval_;
    spdlog::debug("systemd watchdog: pinging every {} ms", watchdog->count() / 2000);
  }
  return OkStatus();
}

template <typename It>
void Agent::AwaitCreated(It begin, It end) {
  const auto deadline = Clock::now() + config_.start_timeout;
  auto starting = [&] {
    return std::any_of(begin, end, [](const auto& r) { return r->starting(); });
  };
  while (starting() && Clock::now() < deadline) {
    pollfd p{mailbox_->fd(), POLLIN, 0};
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) > 0)
      for (Event& ev : mailbox_->Drain()) HandleEvent(ev);
  }
}

void Agent::StartDrains() {
  for (const auto& r : resources_) {
    const std::shared_ptr<const config::ResourceConfig>& dra = r->cfg().dra_form;
    if (!dra || !r->instance()) continue;
    StatusOr<std::vector<std::string>> claims = front_end::LeftClaims(config_, *dra);
    if (!claims.ok()) {
      spdlog::error(
          "resource \"{}\": DRA driver {}'s checkpoint cannot be read ({}): the claims an "
          "earlier devplugd prepared through DRA are not known, and their unprepares fail",
          r->cfg().name, dra->driver, claims.status().message());
      continue;
    }
    if (claims->empty()) continue;
    spdlog::info(
        "resource \"{}\": served through the device plugin API, while DRA driver {} has {} "
        "claim(s) prepared by an earlier devplugd: {}; the driver serves their unprepares "
        "until they are gone",
        r->cfg().name, dra->driver, claims->size(), StrJoin(*claims, ", "));
    // Staged: its lists make no slice; it serves once drained.
    auto d = NewResource(*dra, r->index(), /*staged=*/true);
    if (Status st = d->LoadModule(); !st.ok()) {
      spdlog::error("resource \"{}\": DRA driver {} cannot drain its claims: {}", r->cfg().name,
                    dra->driver, st.message());
      continue;
    }
    d->Launch(config_);
    draining_.push_back(std::move(d));
  }
  if (draining_.empty()) return;
  AwaitCreated(draining_.begin(), draining_.end());
  for (auto it = draining_.begin(); it != draining_.end();) {
    Resource& d = **it;
    d.GiveUp();
    if (!d.instance()) {
      spdlog::error("resource \"{}\": DRA driver {} cannot drain its claims: {}", d.cfg().name,
                    d.cfg().driver, d.failure().message());
      resources_.Retire(std::move(*it), Clock::now() + config_.start_timeout);
      it = draining_.erase(it);
      continue;
    }
    // Its slices go (an earlier devplugd's), before the device plugin
    // registers; it then serves, for the unprepares only.
    d.Drain(/*open=*/false);
    d.Commit();
    ++it;
  }
  UpdateDrains();
}

// ---- the main loop ------------------------------------------------------------------------

void Agent::HandleEvent(const Event& ev) {
  if (ev.kind == Event::kPodList) {
    OnPodList(ev.status, ev.pods);
    return;
  }
  if (ev.kind == Event::kControl) {
    OnControl(ev.control);
    return;
  }
  if (ev.kind == Event::kNodeLabel) {
    OnNodeLabel(ev.label);
    return;
  }
  if (ev.kind == Event::kReloadHandoff) {
    OnHandoff(ev);
    return;
  }
  if (ev.kind == Event::kDrainHandoff) {
    OnDrainHandoff(ev);
    return;
  }
  if (ev.kind == Event::kReloadHolders) {
    if (!reload_waits_) return;
    config::AgentConfig next = std::move(*reload_waits_);
    reload_waits_.reset();
    const HoldersAnswer answer{ev.status, ev.pods};
    StageReload(std::move(next), &answer);
    return;
  }
  Resource* found = ById(ev.resource);
  if (found == nullptr) {
    // Retired meanwhile. A release that ran in an instance a reload
    // replaced reports to the tracker its successor took over.
    if (ev.kind == Event::kTrackerChanged)
      for (auto& r : resources_) r->TrackerChanged(releases_, Clock::now());
    return;
  }
  Resource& r = *found;
  switch (ev.kind) {
    case Event::kCreated:
      OnCreated(r, ev.number, ev.status);
      break;
    case Event::kRegisterDone:
      if (r.registrar().OnRegisterDone(ev.number, ev.status)) r.metrics()->Registration();
      break;
    case Event::kTrackerChanged:
      // A DRA side's claims changed (and what a device plugin tells the
      // kubelet of releases may have).
      if (r.draining()) {
        UpdateDrains();
        break;
      }
      r.TrackerChanged(releases_, Clock::now());
      // A DRA side's on_release() of a withheld device failed: it is tried
      // again at the next List.
      if (r.front_end().Withholding()) releases_.Schedule(Clock::now(), false);
      break;
    case Event::kPodList:
    case Event::kControl:
    case Event::kReloadHolders:
    case Event::kReloadHandoff:
    case Event::kDrainHandoff:
    case Event::kNodeLabel:
      break;  // handled above
    case Event::kStreamEnded:
      r.registrar().OnStreamEnded(ev.number);
      break;
    case Event::kProbed:
      r.registrar().OnProbed(ev.number);
      break;
    case Event::kKubeletStatus: {
      const bool was = r.registrar().registered();
      r.registrar().OnKubeletStatus(ev.status);
      if (ev.status.ok()) r.RegistrationConfirmed();
      if (!ev.status.ok()) r.metrics()->RegistrationRefused();
      if (!was && r.registrar().registered()) r.metrics()->Registration();
      break;
    }
  }
  UpdateStatus();
}

int Agent::NextTimeoutMs() const {
  std::optional<Clock::time_point> next = next_resync_;
  auto consider = [&](const std::optional<Clock::time_point>& t) {
    if (t && (!next || *t < *next)) next = t;
  };
  consider(next_watchdog_);
  consider(lock_retry_at_);
  consider(config_watch_.deadline());
  if (handover_) consider(handover_->deadline);
  consider(releases_.NextDeadline());
  if (reload_) consider(reload_->deadline());
  for (const auto& r : resources_) consider(r->NextDeadline());
  for (const auto& r : draining_) consider(r->NextDeadline());
  if (!next) return -1;
  const auto left = std::chrono::ceil<milliseconds>(*next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 3'600'000));
}

void Agent::FireTimers() {
  const auto now = Clock::now();
  if (next_watchdog_ && *next_watchdog_ <= now) {
    // Reaching this line proves the main loop runs; a loop stuck anywhere
    // stops the pings and systemd restarts the service.
    if (NotifiesManager()) sd::Notify("WATCHDOG=1");
    next_watchdog_ = now + watchdog_interval_;
  }
  if (handover_ && handover_->deadline <= now)
    FailHandover(StrCat(
        "the new devplugd (pid ", handover_->pid, ") did not serve within ",
        std::chrono::duration_cast<std::chrono::seconds>(handover_->deadline - handover_->started)
            .count(),
        " s; stopped it"));
  if (reload_ && reload_->deadline() <= now) FinishReload();
  RetryInstanceLock(now);
  SendPodListIfDue();
  if (next_resync_ && *next_resync_ <= now) {
    next_resync_ = now + config_.resync_interval;
    for (const auto& r : resources_)
      if (r->instance()) r->instance()->RequestRescan();
  }
  for (auto& r : resources_)
    if (r->OnTimer(now)) TryStart(*r);
  for (auto& r : draining_) (void)r->OnTimer(now);  // its registrar's; it is never retried
  UpdateStatus();
}

int Agent::Run(int signal_fd) {
  int exit_status = 0;
  for (;;) {
    const int timeout_ms = NextTimeoutMs();
    pollfd fds[9] = {{signal_fd, POLLIN, 0},          {kubelet_.plugin_dir_fd(), POLLIN, 0},
                     {mailbox_->fd(), POLLIN, 0},     {hotplug_.udev_fd(), POLLIN, 0},
                     {hotplug_.path_fd(), POLLIN, 0}, {kubelet_.registry_fd(), POLLIN, 0},
                     {config_watch_.fd(), POLLIN, 0}, {handover_ ? handover_->fd : -1, POLLIN, 0},
                     {predecessor_fd_, POLLIN, 0}};
    const int n = poll(fds, 9, timeout_ms);
    if (n < 0 && errno != EINTR) {
      spdlog::error("poll: {}", std::strerror(errno));
      break;
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo si;
      if (read(signal_fd, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
          spdlog::info("{}: stopping", strsignal(static_cast<int>(si.ssi_signo)));
          break;
        }
        if (si.ssi_signo == SIGHUP) BeginReload();
      }
    }
    if (fds[1].revents & POLLIN) kubelet_.DrainPluginDir();
    if (fds[5].revents & POLLIN) kubelet_.DrainRegistry();
    if (fds[6].revents & POLLIN) config_watch_.Drain(Clock::now());
    if (config_watch_.Changed(Clock::now())) BeginReload("configuration files changed");
    if (fds[3].revents & POLLIN) hotplug_.DrainUdev();
    if (fds[4].revents & POLLIN) hotplug_.DrainPaths();
    if (fds[2].revents & POLLIN)
      for (const Event& e : mailbox_->Drain()) HandleEvent(e);
    if (fds[7].revents != 0) OnSuccessorReadable();
    if (fds[8].revents != 0) OnPredecessorReadable();
    if (!kubelet_.lost()) FireTimers();
    if (!reload_ && !reload_waits_ && reload_again_)
      BeginReload(*std::exchange(reload_again_, std::nullopt));
    if (handed_over_) break;  // the new devplugd serves; exit 0
    if (kubelet_.lost()) {
      // A directory created anew (kubeadm reset, an operator) is a
      // different directory: under systemd's ProtectSystem= our view of it
      // is read-only, and a hostPath mount would still show the old one.
      // A fresh process sees the new one: exit and let the service manager
      // start us again.
      spdlog::error(
          "{} was removed; exiting (status {}) so that devplugd starts again with "
          "the new directory",
          config_.plugin_dir, kExitPluginDirLost);
      exit_status = kExitPluginDirLost;
      break;
    }
  }
  Shutdown();
  return exit_status;
}

void Agent::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  const auto t0 = Clock::now();
  // Ahead of any load on the node: each thread must run once more to end.
  RaiseExitPriority(kExitNice);
  if (NotifiesManager()) sd::Notify("STOPPING=1");
  if (handover_) FailHandover("devplugd stops");
  kubelet_.StopWatching();
  config_watch_.Stop();
  if (node_watch_) node_watch_->Cancel();
  // Nothing reaches the main loop any more: a status request still waiting
  // learns that devplugd stops. A handover's answer is sent.
  mailbox_->Close();
  // Its socket goes now; its thread and a client still talking to it end
  // with the process (sanitizer builds join them, so leaks still show).
#if !defined(DEVPLUG_ASAN) && !defined(DEVPLUG_TSAN)
  control_.Abandon();
#else
  control_.Stop();
#endif
  if (handed_over_) control_.WaitAnswered(milliseconds(1000));
  exposer_.reset();
  // A reload under way is dropped; its new resources stop with the rest.
  // A hand-off under way ends after the call it is in (call_timeout).
  handoff_.reset();
  drain_handoffs_.clear();
  if (reload_) {
    for (auto& r : reload_->staged()) resources_.Add(std::move(r));
    reload_.reset();
  }
  // A draining DRA side stops with the rest; its claims stay in the
  // checkpoint.
  for (auto& r : std::exchange(draining_, {})) resources_.Add(std::move(r));
  for (auto& r : resources_) r->Withdraw(/*exiting=*/true);
  const auto t_servers = Clock::now();
  // Destroy module instances after every server is down: no call can reach
  // them any more. All stop at once, under one deadline well inside a pod's
  // grace period (30 s by default); a module stuck in a call (a release,
  // a programming) costs its thread, not the shutdown.
  const auto stop_timeout = std::min<milliseconds>(config_.start_timeout, kStopTimeout);
  const auto deadline = Clock::now() + stop_timeout;
  for (auto& r : resources_) r->RequestStop();
  for (auto& r : resources_) {
    // Stopped, but kept until the process ends: the servers were not shut
    // down (Withdraw while exiting), and a call the kubelet sends on a
    // connection still open finds a stopped instance, never a freed one.
    if (!r->StopModule(deadline, /*keep=*/true))
      spdlog::error("resource \"{}\": module \"{}\" did not stop within {} ms; abandoning it",
                    r->cfg().name, r->module()->name(), stop_timeout.count());
  }
  // The DRA drivers began to stop in Withdraw, all at once; their exit's
  // delete of this node's slices is bounded (dra::Driver::Options::
  // stop_timeout), and an API server that does not answer costs at most
  // kDraStopTimeout in all, not a call timeout per resource.
  const auto dra_deadline = t_servers + kDraStopTimeout;
  for (auto& r : resources_)
    if (!r->WaitFrontEndStopped(dra_deadline))
      spdlog::warn("resource \"{}\": DRA: its driver did not stop within {} ms; left to the exit",
                   r->cfg().name, kDraStopTimeout.count());
  // Cancelled above; their answers still come.
  registers_.WaitNone();
  // Resources a reload retired: their threads end within their own
  // deadline, or are left to run out with the process at ours.
  resources_.WaitRetired(deadline);
  mailbox_->Close();
  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  spdlog::info("stopped in {:.1f} ms (servers {:.1f} ms, modules {:.1f} ms)", ms(Clock::now() - t0),
               ms(t_servers - t0), ms(Clock::now() - t_servers));
}

// ---- resources ----------------------------------------------------------------------------

std::unique_ptr<Resource> Agent::NewResource(const config::ResourceConfig& cfg, size_t index,
                                             bool staged) {
  // A reload's resource is counted from its create() on, but exported only
  // once the reload commits (one series per resource name).
  auto metrics =
      staged ? std::make_shared<ops::ResourceMetrics>(cfg.name) : metrics_->Add(cfg.name);
  Resource::Services& services = *this;
  return std::make_unique<Resource>(services, cfg, next_id_++, index, std::move(metrics), staged);
}

Resource* Agent::ById(uint64_t id) {
  if (Resource* r = resources_.ById(id)) return r;
  for (const auto& r : draining_)
    if (r->id() == id) return r.get();
  return reload_ ? reload_->Find(id) : nullptr;
}

void Agent::OnCreated(Resource& r, uint64_t launch, Status st) {
  if (!r.Created(launch, std::move(st))) return;  // given up meanwhile
  if (r.staged()) {
    FinishReload();  // the reload decides, once all of them are known
    return;
  }
  if (!r.instance()) return;  // left out
  if (r.tracking()) {
    spdlog::info("resource \"{}\": tracking device releases through {}", r.cfg().name,
                 pods_->socket());
    SchedulePodList(true);  // the first List is the truth about what is held
  }
  // At start every resource is served together, once all are created.
  if (started_ && !shut_down_) r.registrar().Start();
}

void Agent::TryStart(Resource& r) {
  if (!r.module()) {
    if (Status st = r.LoadModule(); !st.ok()) {
      r.LeaveOut(st, st.code() != StatusCode::kInvalidArgument);
      return;
    }
    UpdateHotplug();  // before its first scan, so no event is missed
  }
  r.Launch(config_);
}

// ---- the kubelet ----------------------------------------------------------------------------

std::vector<kubelet::KubeletWatch::Registration> Agent::Registrations() {
  std::vector<kubelet::KubeletWatch::Registration> out;
  auto add = [&](Resource& r) {
    out.push_back({r.cfg().registration, r.serving_name(), r.peer_name(), &r.registrar(),
                   r.instance() != nullptr});
  };
  for (const auto& r : resources_) add(*r);
  for (const auto& r : draining_) add(*r);
  return out;
}

void Agent::KubeletRestarted(const kubelet::KubeletWatch::Registration& first) {
  spdlog::info("kubelet.sock created: the kubelet (re)started{}",
               first.mode == RegistrationMode::kKubelet
                   ? "; serving and registering again"
                   : "; its plugin watcher finds our sockets by itself");
  // Its pod list may be incomplete for a while: no release meanwhile.
  releases_.OnKubeletRestart(Clock::now());
  metrics_->KubeletRestart();
}

// ---- PodResources Lists and the release trackers ----------------------------------------------

void Agent::SchedulePodList(bool now) { releases_.Schedule(Clock::now(), now); }

void Agent::SendPodListIfDue() {
  if (!releases_.TakeDue(Clock::now())) return;
  // Answers from the last List when it is younger than half a period: every
  // resource shares one List.
  pods_->Fetch(std::min<milliseconds>(milliseconds(1000), config_.pod_resources_poll / 2),
               [mailbox = mailbox_](StatusOr<kubelet::PodSnapshotPtr> s) {
                 mailbox->Post({Event::kPodList, 0, 0, s.ok() ? OkStatus() : s.status(),
                                s.ok() ? *s : nullptr});
               });
}

void Agent::OnPodList(const Status& status, const kubelet::PodSnapshotPtr& pods) {
  std::vector<lifecycle::ReleaseCoordinator::Tracked> tracked;
  std::vector<Resource*> of;
  for (auto& r : resources_) {
    if (lifecycle::ReleaseTracker* t = r->TrackerForList(status.ok())) {
      tracked.push_back({r->cfg().name, t});
      of.push_back(r.get());
    }
  }
  const auto due = releases_.OnList(status, pods, tracked, Clock::now());
  WithholdListed(status, pods);
  if (status.ok()) {
    for (size_t i = 0; i < of.size(); ++i) {
      // The kubelet hears "Unhealthy (releasing)" before the release runs.
      of[i]->TrackerChanged(releases_, Clock::now());
      of[i]->Release(due[i], *pods);
    }
  }
  UpdateStatus();
}

// ---- udev and path watches ------------------------------------------------------------------

void Agent::UpdateHotplug() { hotplug_.Update(config_.udev_source, config_.resync_interval); }

std::map<uint64_t, std::vector<std::string>> Agent::Subscriptions() const {
  std::map<uint64_t, std::vector<std::string>> out;
  for (const auto& r : resources_)
    if (std::vector<std::string> s = r->Subsystems(); !s.empty()) out[r->id()] = std::move(s);
  return out;
}

void Agent::Deliver(uint64_t id, std::vector<udev::Event> events) {
  Resource* r = ById(id);
  if (r && r->instance()) r->instance()->OnUdevEvents(std::move(events));
}

void Agent::PathChanged(uint64_t id) {
  Resource* r = ById(id);
  if (r && r->instance()) r->instance()->OnPathChanged();
}

void Agent::RescanAll() {
  for (auto& r : resources_)
    if (r->instance()) r->instance()->RequestRescan();
}

}  // namespace devplug
