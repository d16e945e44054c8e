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

#include <nlohmann/json.hpp>
#include <prometheus/exposer.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include "conflicts.h"
#include "log.h"
#include "modules/loaded_module.h"
#include "util/unix_socket.h"

namespace devplug {
namespace {

using std::chrono::milliseconds;

// After the kubelet ends our stream without restarting, or after we ended it
// ourselves to serve on a new socket, wait this long before registering
// again: a restart's kubelet.sock creation usually arrives first, and a
// kubelet that is still closing the old connection must not see the new
// registration before the old stream's end (it would drop the new one).
constexpr milliseconds kStreamLostDelay{1000};
// How long a removed socket may stay removed before we serve it again: a
// kubelet restart removes it first and creates kubelet.sock next.
constexpr milliseconds kSocketSettle{1000};
constexpr milliseconds kMinBackoff{500};
constexpr milliseconds kMaxBackoff{30'000};
// Retries of a resource that could not start.
constexpr milliseconds kMinStartBackoff{1000};
constexpr milliseconds kMaxStartBackoff{60'000};
// How long a server may take to end its calls when it is stopped.
constexpr milliseconds kServerStopGrace{2000};

std::string_view StateName(int s) {
  static constexpr std::string_view kNames[] = {"down", "waiting for kubelet", "registering",
                                                "registered", "retrying"};
  return kNames[s];
}

milliseconds Doubled(milliseconds current, milliseconds min, milliseconds max) {
  return std::clamp(current * 2, min, max);
}

}  // namespace

// ---- Mailbox ------------------------------------------------------------------------------

Agent::Mailbox::Mailbox() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

Agent::Mailbox::~Mailbox() {
  if (fd_ >= 0) close(fd_);
}

void Agent::Mailbox::Post(Event ev) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    events_.push_back(std::move(ev));
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof(one));
}

std::vector<Agent::Event> Agent::Mailbox::Drain() {
  uint64_t count;
  [[maybe_unused]] ssize_t rd = read(fd_, &count, sizeof(count));
  std::vector<Event> out;
  std::lock_guard lock(mu_);
  out.swap(events_);
  return out;
}

void Agent::Mailbox::Close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  events_.clear();
}

// ---- Agent --------------------------------------------------------------------------------

namespace {
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
      pods_(std::make_shared<kubelet::PodResourcesClient>(PodOptions(config_))) {}

Agent::~Agent() { Shutdown(); }

std::string Agent::KubeletSocketPath() const {
  return StrCat(config_.plugin_dir, "/", kubelet::kKubeletSocketName);
}

std::optional<Agent::KubeletId> Agent::KubeletSocketIdentity() const {
  struct stat st;
  if (stat(KubeletSocketPath().c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
  return std::make_pair(static_cast<uint64_t>(st.st_ino),
                        static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec);
}

Status Agent::Start() {
  const auto t0 = Clock::now();
  if (mailbox_->fd() < 0) return InternalError(StrCat("eventfd: ", std::strerror(errno)));
  // Watch before the first registration so a kubelet that starts meanwhile
  // is not missed.
  if (Status st = watch_.Start(config_.plugin_dir); !st.ok()) return st;
  if (auto pw = udev::PathWatch::Create(); pw.ok())
    path_watch_ = std::move(*pw);
  else
    spdlog::warn("no path watches ({}); nodes made or removed without a uevent are seen at "
                 "the next resync only",
                 pw.status().message());
  // Status and metrics: useful from the first moment, and never a reason
  // not to serve the hardware.
  if (!config_.control_socket.empty()) {
    Status st = control_.Start(config_.control_socket, [mailbox = mailbox_](auto call) {
      mailbox->Post({Event::kControl, 0, 0, OkStatus(), nullptr, std::move(call)});
    });
    if (!st.ok()) spdlog::warn("no control socket: {}", st.message());
  }
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
    resources_.push_back(NewResource(config_.resources[i], i));
  // Load every module first: their subsystems make up the udev filter, and
  // the monitor must listen before the first scans so no event is lost.
  // A mistake in a module's keys is fatal at start, like a TOML error: the
  // operator sees it at once instead of a silently missing resource. Every
  // resource's mistakes are reported in one go, as --check-config does.
  // Resources whose keys are wrong are not created; the others are, so that
  // their create-time mistakes are found too.
  std::vector<std::pair<size_t, std::string>> config_errors;
  for (auto& r : resources_) {
    if (Status st = LoadModule(*r); !st.ok()) {
      if (st.code() == StatusCode::kInvalidArgument)
        config_errors.emplace_back(r->index, st.message());
      else
        LeaveOut(*r, st, true);
    }
  }
  RebuildUdevMonitor();
  const auto t_loaded = Clock::now();
  // Every create() and first scan run at once, each on its own worker.
  for (auto& r : resources_)
    if (r->module) Launch(*r, config_);
  const auto deadline = Clock::now() + config_.start_timeout;
  auto starting = [&] {
    return std::any_of(resources_.begin(), resources_.end(),
                       [](const auto& r) { return r->starting != nullptr; });
  };
  while (starting() && Clock::now() < deadline) {
    pollfd p{mailbox_->fd(), POLLIN, 0};
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) > 0)
      for (Event& ev : mailbox_->Drain()) HandleEvent(ev);
  }
  for (auto& r : resources_)
    if (r->starting) GiveUp(*r);
  for (const auto& r : resources_)
    if (r->failure.code() == StatusCode::kInvalidArgument)
      config_errors.emplace_back(r->index, r->failure.message());
  if (!config_errors.empty()) {
    std::stable_sort(config_errors.begin(), config_errors.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::string> lines;
    for (auto& [index, message] : config_errors) lines.push_back(std::move(message));
    return InvalidArgumentError(StrJoin(lines, "\n"));
  }
  for (const auto& r : resources_) {
    if (!r->failure.ok() && r->cfg.required)
      return FailedPreconditionError(
          StrCat("required resource \"", r->cfg.name, "\" failed: ", r->failure.message()));
  }
  std::vector<std::pair<std::string, modules::DeviceListPtr>> lists;
  for (const auto& r : resources_)
    if (r->instance) lists.emplace_back(r->cfg.name, r->instance->devices());
  for (const std::string& w : FindRecipeConflicts(lists)) spdlog::warn("{}", w);
  const auto t_created = Clock::now();
  for (auto& r : resources_)
    if (r->instance) ServeAndRegister(*r);
  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  spdlog::debug("started in {:.1f} ms (modules loaded {:.1f} ms, created {:.1f} ms, serving and "
                "registering {:.1f} ms)",
                ms(Clock::now() - t0), ms(t_loaded - t0), ms(t_created - t_loaded),
                ms(Clock::now() - t_created));
  if (config_.resync_interval.count() > 0) next_resync_ = Clock::now() + config_.resync_interval;
  started_ = true;
  UpdateStatus();
  sd_notify(0, "READY=1");
  uint64_t watchdog_usec = 0;
  if (sd_watchdog_enabled(0, &watchdog_usec) > 0 && watchdog_usec > 0) {
    watchdog_interval_ = std::chrono::microseconds(watchdog_usec / 2);
    next_watchdog_ = Clock::now() + watchdog_interval_;
    spdlog::debug("systemd watchdog: pinging every {} ms", watchdog_usec / 2000);
  }
  return OkStatus();
}

// ---- starting resources -------------------------------------------------------------------

std::unique_ptr<Agent::Resource> Agent::NewResource(const config::ResourceConfig& cfg,
                                                   size_t index, bool staged) {
  auto r = std::make_unique<Resource>();
  r->id = next_id_++;
  r->index = index;
  r->cfg = cfg;
  r->staged = staged;
  r->socket_path = StrCat(config_.plugin_dir, "/", r->cfg.socket);
  r->handed_out = std::make_shared<lifecycle::HandedOut>();
  r->hub = std::make_unique<kubelet::StreamHub>([mailbox = mailbox_, id = r->id](uint64_t reg) {
    mailbox->Post({Event::kStreamEnded, id, reg, OkStatus(), nullptr});
  });
  // A reload's resource is counted from its create() on, but exported only
  // once the reload commits (one series per resource name).
  r->metrics = staged ? std::make_shared<ops::ResourceMetrics>(cfg.name) : metrics_->Add(cfg.name);
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

bool Agent::Tracking(const Resource& r) { return r.tracker && r.tracker->enabled(); }

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
  opts.on_change = [hub = r.hub.get(), checked](modules::DeviceListPtr list) {
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
      if (const lifecycle::Holder* h = s.Find(name, id)) {
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
    const bool on = cfg.pod_resources_poll.count() > 0;
    if (carried) {
      carried->set_timing(Timing(cfg));
      (void)carried->SetEnabled(on);
      r.tracker = std::move(carried);
    } else {
      r.tracker = std::make_shared<lifecycle::ReleaseTracker>(Timing(cfg), on);
    }
    opts.release.apply = [tracker = r.tracker](modules::DeviceList& list) {
      return tracker->Apply(list);
    };
    opts.release.due_before_start = [tracker = r.tracker](const std::vector<std::string>& ids,
                                                          bool* wait) {
      return tracker->ReleasesBeforeStart(ids, wait);
    };
    opts.release.released = [tracker = r.tracker, mailbox = mailbox_, i = r.id, m = r.metrics](
                                const std::vector<std::string>& ids, int rc,
                                const std::string& why, bool before_start) {
      m->Release(rc == 0 ? ops::ReleaseResult::kReleased
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
    if (st.ok()) r.instance = std::move(inst);
    else r.failure = std::move(st);
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
  if (retried)
    spdlog::info("resource \"{}\": started (attempt {})", r.cfg.name, r.attempts);
  spdlog::info("resource \"{}\": module \"{}\" {} from {}", r.cfg.name, r.module->name(),
               r.module->version(), r.module->path());
  // At start every resource is served together, once all are created.
  if (started_ && !shut_down_) ServeAndRegister(r);
}

void Agent::LeaveOut(Resource& r, Status why, bool retry) {
  const bool same = !r.failure.ok() && r.failure.message() == why.message();
  r.start_backoff = Doubled(r.start_backoff, kMinStartBackoff, kMaxStartBackoff);
  if (retry) r.start_at = Clock::now() + r.start_backoff;
  const std::string next =
      retry ? StrCat("; retrying in ", r.start_backoff.count() / 1000, " s")
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

void Agent::RebuildUdevMonitor() {
  std::map<std::string, std::vector<uint64_t>, std::less<>> subscribers;
  for (const auto& r : resources_) {
    if (!r->module || r->module->descriptor().udev_subsystems == nullptr) continue;
    for (const char* const* s = r->module->descriptor().udev_subsystems; *s; ++s)
      if (**s) subscribers[*s].push_back(r->id);
  }
  std::vector<std::string> subsystems;
  for (const auto& [s, _] : subscribers) subsystems.push_back(s);
  udev_subscribers_ = std::move(subscribers);
  if (subsystems == udev_subsystems_ && (udev_ || subsystems.empty())) return;
  udev_subsystems_ = subsystems;
  if (subsystems.empty()) return;
  const config::UdevSource source = udev::ResolveSource(config_.udev_source);
  auto monitor = udev::Monitor::Create(source, subsystems);
  if (!monitor.ok()) {
    spdlog::warn("no hotplug events ({}); devices are rescanned every {} ms only",
                 monitor.status().message(), config_.resync_interval.count());
    return;
  }
  // The new monitor listens before the old one goes: nothing falls between.
  if (udev_) DispatchUdevEvents(*udev_);
  udev_ = std::move(*monitor);
  spdlog::info("listening for {} events on subsystems {}{}", config::UdevSourceName(source),
               StrJoin(subsystems, ","),
               config_.udev_source == config::UdevSource::kAuto ? " (udev_source auto)" : "");
}

void Agent::DispatchUdevEvents(udev::Monitor& monitor) {
  bool overflowed = false;
  std::vector<udev::Event> events = monitor.Drain(&overflowed);
  std::map<uint64_t, std::vector<udev::Event>> batches;
  for (udev::Event& e : events) {
    spdlog::trace("uevent {} {} {}", e.action, e.subsystem, e.syspath);
    auto it = udev_subscribers_.find(e.subsystem);
    if (it == udev_subscribers_.end()) continue;
    metrics_->Uevent(e.subsystem);
    for (uint64_t id : it->second) batches[id].push_back(e);
  }
  for (auto& [id, batch] : batches) {
    Resource* r = ById(id);
    if (r && r->instance) r->instance->OnUdevEvents(std::move(batch));
  }
  if (overflowed) {
    spdlog::warn("uevent queue overflowed; rescanning every resource");
    for (auto& r : resources_)
      if (r->instance) r->instance->RequestRescan();
  }
}

// ---- serving and registering --------------------------------------------------------------

Status Agent::StartServer(Resource& r) {
  StopServer(r);
  if (UnixSocketIsLive(r.socket_path))
    return FailedPreconditionError(StrCat("socket ", r.socket_path,
                                          " is served by another process (a second devplugd?)"));
  // gRPC removes a stale file at the path before it binds.
  std::function<void(const std::vector<std::string>&)> on_allocated =
      [handed = r.handed_out, tracker = r.tracker, mailbox = mailbox_,
       i = r.id](const std::vector<std::string>& ids) {
        const auto now = Clock::now();
        handed->Record(ids, now);
        if (!tracker) return;
        tracker->OnAllocated(ids, now);
        mailbox->Post({Event::kTrackerChanged, i, 0, OkStatus(), nullptr});
      };
  r.service = std::make_unique<kubelet::DevicePluginService>(
      r.instance.get(), r.hub.get(), &timers_, config_.call_timeout, config_.prestart_timeout,
      std::move(on_allocated),
      r.metrics);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + r.socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(r.service.get());
  r.server = builder.BuildAndStart();
  if (!r.server) {
    r.service.reset();
    if (watch_.Gone()) plugin_dir_lost_ = true;
    return UnavailableError(StrCat("cannot serve on ", r.socket_path,
                                   " (is the directory writable?)"));
  }
  struct stat st;
  if (stat(r.socket_path.c_str(), &st) == 0) r.socket_file = std::make_pair(st.st_dev, st.st_ino);
  r.socket_check_at.reset();
  spdlog::debug("resource \"{}\": serving on {}", r.cfg.name, r.socket_path);
  return OkStatus();
}

void Agent::StopServer(Resource& r, [[maybe_unused]] bool exiting) {
  if (r.pending) {
    r.pending->Cancel();
    r.pending.reset();
  }
  r.hub->ExpectKubeletStream(0);
  r.socket_file.reset();
  if (!r.server) return;
  // End our streams first so the kubelet sees a clean end, then stop the
  // server; Shutdown waits for calls in flight up to the deadline.
  r.hub->CloseAll();
  r.service->AbortPending();
  r.server->Shutdown(std::chrono::system_clock::now() + kServerStopGrace);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  if (exiting) {
    // The process ends right after; destroying the server would wait for
    // gRPC's callback threads (milliseconds of SIGTERM-to-exit). Its
    // service stays alive with it. Sanitizer builds destroy both, so that
    // leaks and errors at exit still show there.
    (void)r.server.release();
    (void)r.service.release();
    return;
  }
#endif
  r.server.reset();
  r.service.reset();
}

bool Agent::SocketIsOurs(const Resource& r) const {
  struct stat st;
  return r.socket_file && stat(r.socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) &&
         std::make_pair(st.st_dev, st.st_ino) == *r.socket_file;
}

// A fresh socket, then Register (or a retry later when serving failed).
void Agent::ServeAndRegister(Resource& r) {
  if (Status st = StartServer(r); !st.ok()) {
    spdlog::error("resource \"{}\": {}", r.cfg.name, st.message());
    r.state = State::kDown;
    ScheduleRegister(r, milliseconds(0));
    return;
  }
  Register(r);
}

void Agent::Register(Resource& r) {
  r.retry_at.reset();
  r.pending_kubelet = KubeletSocketIdentity();
  if (!r.pending_kubelet) {
    if (r.state != State::kWaitingKubelet)
      spdlog::info("resource \"{}\": waiting for {} to appear", r.cfg.name, KubeletSocketPath());
    r.state = State::kWaitingKubelet;
    return;
  }
  v1beta1::RegisterRequest req;
  req.set_version("v1beta1");
  req.set_endpoint(r.cfg.socket);
  req.set_resource_name(r.cfg.name);
  *req.mutable_options() = kubelet::OptionsFor(*r.instance);
  r.state = State::kRegistering;
  const uint64_t registration = ++r.registration;
  // Armed before the call: the kubelet may open its stream before Register
  // returns.
  r.hub->ExpectKubeletStream(registration);
  {
    std::lock_guard lock(register_mu_);
    ++registers_in_flight_;
  }
  r.pending = kubelet::StartRegister(
      KubeletSocketPath(), req, kubelet::kRegisterDeadline,
      [this, mailbox = mailbox_, i = r.id, registration](const grpc::Status& st) {
        mailbox->Post({Event::kRegisterDone, i, registration,
                       Status(static_cast<StatusCode>(st.error_code()), st.error_message()),
                       nullptr});
        std::lock_guard lock(register_mu_);
        if (--registers_in_flight_ == 0) register_cv_.notify_all();
      });
}

void Agent::ScheduleRegister(Resource& r, milliseconds min_delay) {
  r.backoff = Doubled(r.backoff, kMinBackoff, kMaxBackoff);
  if (r.state != State::kDown) r.state = State::kRetryWait;
  r.retry_at = Clock::now() + std::max(min_delay, r.backoff);
}

bool Agent::WithThisKubelet(const Resource& r, const std::optional<KubeletId>& kubelet) const {
  return kubelet && ((r.state == State::kRegistered && r.registered_kubelet == kubelet) ||
                     (r.state == State::kRegistering && r.pending_kubelet == kubelet));
}

void Agent::OnKubeletRestart() {
  const auto kubelet = KubeletSocketIdentity();
  if (!kubelet) return;  // already gone again; its successor will tell us
  bool said = false;
  for (auto& r : resources_) {
    if (!r->instance) continue;
    // Already registered, or registering, with this very kubelet: a
    // kubelet.sock that appeared during our own start, or a retry that got
    // there first. Once per kubelet.sock identity.
    if (WithThisKubelet(*r, kubelet)) continue;
    if (!said) {
      spdlog::info("kubelet.sock created: the kubelet (re)started; serving and registering again");
      // Its pod list may be incomplete for a while: no release meanwhile.
      last_kubelet_restart_ = Clock::now();
      metrics_->KubeletRestart();
    }
    said = true;
    r->backoff = milliseconds(0);
    // The kubelet removed our socket and its old streams are gone.
    ServeAndRegister(*r);
  }
}

void Agent::OnSocketRemoved(Resource& r) {
  if (!r.server) return;
  // Events queue up while we work: say only what is true now.
  if (SocketIsOurs(r)) {
    spdlog::trace("resource \"{}\": an earlier removal of {} (served again since)", r.cfg.name,
                  r.cfg.socket);
    return;
  }
  if (r.socket_check_at) return;
  spdlog::info("resource \"{}\": socket {} was removed; serving it again in {} ms unless the "
               "kubelet restarts",
               r.cfg.name, r.socket_path, kSocketSettle.count());
  r.socket_check_at = Clock::now() + kSocketSettle;
}

void Agent::CheckSocket(Resource& r) {
  r.socket_check_at.reset();
  // Removed with its directory?
  if (watch_.Gone()) {
    plugin_dir_lost_ = true;
    return;
  }
  if (!r.server || SocketIsOurs(r)) return;
  const bool registered = r.state == State::kRegistered || r.state == State::kRegistering;
  // A kubelet restart is under way: its kubelet.sock creation serves us anew.
  if (registered && !WithThisKubelet(r, KubeletSocketIdentity())) return;
  // Removed by someone else: the kubelet's stream still runs on the old
  // socket, and a kubelet that restarts later could not reach us. End that
  // stream (stop the server), serve a fresh socket, register once the
  // kubelet has seen the end.
  if (Status st = StartServer(r); !st.ok()) {
    spdlog::error("resource \"{}\": {}", r.cfg.name, st.message());
    r.state = State::kDown;
    ScheduleRegister(r, milliseconds(0));
    return;
  }
  if (registered) {
    r.state = State::kRetryWait;
    r.retry_at = Clock::now() + kStreamLostDelay;
    spdlog::warn("resource \"{}\": serving {} again; registering again in {} ms", r.cfg.name,
                 r.socket_path, kStreamLostDelay.count());
  }
}

// ---- pod identity and releases --------------------------------------------------------------

void Agent::SchedulePodList(bool now) {
  if (config_.pod_resources_poll.count() == 0) return;
  const auto when = Clock::now() + (now ? milliseconds(0) : config_.pod_resources_poll);
  if (!next_pod_list_ || when < *next_pod_list_) next_pod_list_ = when;
}

void Agent::OnPodList(const Status& status, const kubelet::PodSnapshotPtr& pods) {
  pod_list_in_flight_ = false;
  bool needed = false;
  for (const auto& r : resources_) needed = needed || (r->tracker && r->tracker->NeedsList());
  if (!status.ok()) {
    // Never taken for "nothing is held": the next period asks again.
    if (status.message() != pods_problem_) {
      if (status.code() == StatusCode::kNotFound)
        spdlog::info("release tracking waits: {}", status.message());
      else
        spdlog::warn("release tracking: {}", status.message());
    }
    pods_problem_ = status.message();
    if (needed) SchedulePodList(false);
    UpdateStatus();
    return;
  }
  if (!pods_problem_.empty()) spdlog::info("release tracking: PodResources List works again");
  pods_problem_.clear();
  static const std::map<std::string, lifecycle::Holder, std::less<>> kNone;
  const auto now = Clock::now();
  for (auto& r : resources_) {
    if (!Tracking(*r) || !r->instance) continue;
    auto it = pods->holders.find(r->cfg.name);
    const std::vector<std::string> due =
        r->tracker->OnList(it == pods->holders.end() ? kNone : it->second, now,
                           last_kubelet_restart_);
    // The kubelet hears "Unhealthy (releasing)" before the release runs.
    OnTrackerChanged(*r);
    if (!due.empty()) {
      spdlog::info("resource \"{}\": {} no longer held; releasing", r->cfg.name,
                   StrJoin(due, ","));
      r->instance->Release(due);
    }
  }
  UpdateStatus();
}

void Agent::OnTrackerChanged(Resource& r) {
  if (!r.tracker || !r.instance) return;
  // What the kubelet is told about releases changed: publish again.
  if (const uint64_t g = r.tracker->generation(); g != r.tracker_generation) {
    r.tracker_generation = g;
    r.instance->Republish();
  }
  if (r.tracker->NeedsList()) SchedulePodList(false);
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
  Resource* found = ById(ev.resource);
  if (found == nullptr) {
    // Retired meanwhile. A release that ran in an instance a reload
    // replaced reports to the tracker its successor took over.
    if (ev.kind == Event::kTrackerChanged)
      for (auto& r : resources_) OnTrackerChanged(*r);
    return;
  }
  Resource& r = *found;
  switch (ev.kind) {
    case Event::kCreated:
      OnCreated(r, ev.number, ev.status);
      break;
    case Event::kRegisterDone:
      if (ev.number != r.registration || r.state != State::kRegistering) return;  // stale
      r.pending.reset();
      if (ev.status.ok()) {
        r.state = State::kRegistered;
        r.registered_kubelet = r.pending_kubelet;
        r.backoff = milliseconds(0);
        spdlog::info("resource \"{}\": registered with the kubelet (socket {}{})", r.cfg.name,
                     r.cfg.socket,
                     r.register_failures > 0 ? StrCat(", after ", r.register_failures,
                                                      " failed attempts")
                                             : std::string());
        r.register_failures = 0;
        r.registered_since = std::chrono::system_clock::now();
        r.last_error.clear();
        r.metrics->Registration();
      } else {
        r.last_error = StrCat("Register failed: ", StatusCodeName(ev.status.code()), ": ",
                              ev.status.message());
        r.hub->ExpectKubeletStream(0);
        ScheduleRegister(r, milliseconds(0));
        // The server stays up; only Register is retried. One warning, then
        // the retries at debug level until it works.
        const auto level = r.register_failures++ == 0 ? spdlog::level::warn : spdlog::level::debug;
        spdlog::log(level, "resource \"{}\": Register failed ({}: {}); retrying in {} ms",
                    r.cfg.name, StatusCodeName(ev.status.code()), ev.status.message(),
                    r.backoff.count());
      }
      break;
    case Event::kTrackerChanged:
      OnTrackerChanged(r);
      break;
    case Event::kPodList:
    case Event::kControl:
      break;  // handled above
    case Event::kStreamEnded:
      // Only the end of the stream that belongs to the current registration:
      // the kubelet never reopens ListAndWatch, so without a new registration
      // this resource is gone from the node after its grace period.
      if (ev.number != r.registration) return;
      if (r.state != State::kRegistered && r.state != State::kRegistering) return;
      r.pending.reset();
      r.state = State::kRetryWait;
      r.retry_at = Clock::now() + kStreamLostDelay;
      spdlog::warn("resource \"{}\": the kubelet closed ListAndWatch; registering again in {} ms",
                   r.cfg.name, kStreamLostDelay.count());
      break;
  }
  UpdateStatus();
}

int Agent::NextTimeoutMs() const {
  std::optional<Clock::time_point> next = next_resync_;
  auto consider = [&](const std::optional<Clock::time_point>& t) {
    if (t && (!next || *t < *next)) next = t;
  };
  consider(next_watchdog_);
  consider(next_pod_list_);
  if (reload_) consider(reload_->deadline);
  for (const auto& r : resources_) {
    consider(r->retry_at);
    consider(r->start_at);
    consider(r->start_deadline);
    consider(r->socket_check_at);
  }
  if (!next) return -1;
  const auto left = std::chrono::ceil<milliseconds>(*next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 3'600'000));
}

void Agent::FireTimers() {
  const auto now = Clock::now();
  auto due = [&](std::optional<Clock::time_point>& t) {
    if (!t || *t > now) return false;
    t.reset();
    return true;
  };
  if (next_watchdog_ && *next_watchdog_ <= now) {
    // Reaching this line proves the main loop runs; a loop stuck anywhere
    // stops the pings and systemd restarts the service.
    sd_notify(0, "WATCHDOG=1");
    next_watchdog_ = now + watchdog_interval_;
  }
  if (reload_ && reload_->deadline <= now) FinishReload();
  if (next_pod_list_ && *next_pod_list_ <= now && !pod_list_in_flight_) {
    next_pod_list_.reset();
    pod_list_in_flight_ = true;
    // Answers from the last List when it is younger than half a period:
    // every resource shares one List.
    pods_->Fetch(std::min<milliseconds>(milliseconds(1000), config_.pod_resources_poll / 2),
                 [mailbox = mailbox_](StatusOr<kubelet::PodSnapshotPtr> s) {
                   mailbox->Post({Event::kPodList, 0, 0, s.ok() ? OkStatus() : s.status(),
                                  s.ok() ? *s : nullptr});
                 });
  }
  if (next_resync_ && *next_resync_ <= now) {
    next_resync_ = now + config_.resync_interval;
    for (const auto& r : resources_)
      if (r->instance) r->instance->RequestRescan();
  }
  for (auto& rp : resources_) {
    Resource& r = *rp;
    if (r.start_deadline && *r.start_deadline <= now) GiveUp(r);
    if (due(r.start_at)) TryStart(r);
    if (!r.instance) continue;
    if (due(r.socket_check_at)) CheckSocket(r);
    if (due(r.retry_at)) {
      // Register again on the same server, unless its socket is gone.
      if (r.server && SocketIsOurs(r)) Register(r);
      else ServeAndRegister(r);
    }
  }
  UpdateStatus();
}

void Agent::UpdateStatus() {
  size_t registered = 0, running = 0;
  for (const auto& r : resources_) {
    if (r->state == State::kRegistered) ++registered;
    else r->registered_since.reset();
    if (r->instance) ++running;
    r->metrics->Registered(r->state == State::kRegistered);
  }
  std::string status = StrCat("registered ", registered, "/", resources_.size(), " resources");
  if (running < resources_.size()) {
    const size_t retried = std::count_if(resources_.begin(), resources_.end(), [](const auto& r) {
      return !r->instance && (r->starting || r->start_at);
    });
    StrAppend(&status, "; ", resources_.size() - running, " failed");
    if (retried > 0) StrAppend(&status, " (", retried, " retrying)");
  }
  if (registered < running && !KubeletSocketIdentity()) StrAppend(&status, "; waiting for kubelet");
  // Say which resources offer nothing usable: on a fresh node that is the
  // hint to look at the journal and the configuration.
  std::vector<std::string> idle;
  for (const auto& r : resources_) {
    if (!r->instance) continue;
    const modules::DeviceListPtr list = r->instance->devices();
    if (std::none_of(list->begin(), list->end(),
                     [](const modules::Device& d) { return d.healthy; }))
      idle.push_back(r->cfg.name);
  }
  if (!idle.empty())
    StrAppend(&status, "; no healthy devices: ", StrJoin(idle, ", "), " (see the journal)");
  if (!pods_problem_.empty()) StrAppend(&status, "; release tracking waits: ", pods_problem_);
  if (!reload_error_.empty())
    StrAppend(&status, "; reload failed (old configuration kept): ", reload_error_);
  if (status != last_status_) {
    last_status_ = status;
    sd_notifyf(0, "STATUS=%s", status.c_str());
    spdlog::debug("status: {}", status);
    for (const auto& r : resources_)
      spdlog::trace("  {}: {}", r->cfg.name, StateName(static_cast<int>(r->state)));
  }
}

int Agent::Run(int signal_fd) {
  int exit_status = 0;
  for (;;) {
    const int timeout_ms = NextTimeoutMs();
    pollfd fds[5] = {{signal_fd, POLLIN, 0},
                     {watch_.fd(), POLLIN, 0},
                     {mailbox_->fd(), POLLIN, 0},
                     {udev_ ? udev_->fd() : -1, POLLIN, 0},
                     {path_watch_ ? path_watch_->fd() : -1, POLLIN, 0}};
    const int n = poll(fds, 5, timeout_ms);
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
    if (fds[1].revents & POLLIN) {
      kubelet::PluginDirWatch::Events ev = watch_.Drain();
      if (ev.dir_gone) plugin_dir_lost_ = true;
      if (!plugin_dir_lost_) {
        if (ev.kubelet_socket_created) OnKubeletRestart();
        for (const std::string& name : ev.removed)
          for (auto& r : resources_)
            if (name == r->cfg.socket) OnSocketRemoved(*r);
      }
    }
    if (fds[3].revents & POLLIN) DispatchUdevEvents(*udev_);
    if (fds[4].revents & POLLIN) {
      for (uint64_t id : path_watch_->Drain()) {
        Resource* r = ById(id);
        if (r && r->instance) r->instance->OnPathChanged();
      }
    }
    if (fds[2].revents & POLLIN)
      for (const Event& e : mailbox_->Drain()) HandleEvent(e);
    if (!plugin_dir_lost_) FireTimers();
    if (plugin_dir_lost_) {
      // A directory created anew (kubeadm reset, an operator) is a
      // different directory: under systemd's ProtectSystem= our view of it
      // is read-only, and a hostPath mount would still show the old one.
      // A fresh process sees the new one: exit and let the service manager
      // start us again.
      spdlog::error("{} was removed; exiting (status {}) so that devplugd starts again with "
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
  sd_notify(0, "STOPPING=1");
  watch_.StopWatching();
  // Nothing reaches the main loop any more: a status request still waiting
  // learns that devplugd stops.
  mailbox_->Close();
  control_.Stop();
  exposer_.reset();
  // A reload under way is dropped; its new resources stop with the rest.
  if (reload_) {
    for (auto& r : reload_->staged) resources_.push_back(std::move(r));
    reload_.reset();
  }
  for (auto& r : resources_) {
    const bool served = r->server != nullptr;
    StopServer(*r, /*exiting=*/true);
    if (served) unlink(r->socket_path.c_str());
  }
  const auto t_servers = Clock::now();
  // Destroy module instances after every server is down: no call can reach
  // them any more. All stop at once, under one deadline; a module stuck in a
  // call costs its thread, not the shutdown.
  const auto deadline = Clock::now() + config_.start_timeout;
  for (auto& r : resources_) {
    if (r->instance) r->instance->RequestStop();
    if (r->starting) r->starting->RequestStop();
  }
  for (auto& r : resources_) {
    for (auto* inst : {&r->instance, &r->starting}) {
      if (!*inst) continue;
      if (!(*inst)->WaitStopped(deadline)) {
        spdlog::error("resource \"{}\": module \"{}\" did not stop within {} ms; abandoning it",
                      r->cfg.name, r->module->name(), config_.start_timeout.count());
        (void)inst->release();  // its thread may still use it
      }
      inst->reset();
    }
  }
  {
    // Cancelled above; their callbacks count down here.
    std::unique_lock lock(register_mu_);
    register_cv_.wait(lock, [&] { return registers_in_flight_ == 0; });
  }
  // Resources a reload retired: their threads end within their deadline.
  for (Retiring& t : retiring_) t.thread.join();
  retiring_.clear();
  mailbox_->Close();
  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  spdlog::info("stopped in {:.1f} ms (servers {:.1f} ms, modules {:.1f} ms)",
               ms(Clock::now() - t0), ms(t_servers - t0), ms(Clock::now() - t_servers));
}

}  // namespace devplug
