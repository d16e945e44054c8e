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

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include "conflicts.h"
#include "modules/loaded_module.h"
#include "util/unix_socket.h"

namespace devplug {
namespace {

using std::chrono::milliseconds;

// After the kubelet ends a stream without restarting, wait this long before
// re-registering: a restart's kubelet.sock creation usually arrives first, and
// a kubelet that is still shutting the old connection down must not see the
// new registration before the old stream's end.
constexpr milliseconds kStreamLostDelay{1000};
constexpr milliseconds kMinBackoff{500};
constexpr milliseconds kMaxBackoff{30'000};
// How long a server may take to end its calls when it is stopped.
constexpr milliseconds kServerStopGrace{2000};

std::string_view StateName(int s) {
  static constexpr std::string_view kNames[] = {"idle", "waiting for kubelet", "registering",
                                                "registered", "retrying"};
  return kNames[s];
}

}  // namespace

Agent::Agent(config::AgentConfig config) : config_(std::move(config)) {
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

Agent::~Agent() {
  Shutdown();
  if (event_fd_ >= 0) close(event_fd_);
}

std::string Agent::KubeletSocketPath() const {
  return StrCat(config_.plugin_dir, "/", kubelet::kKubeletSocketName);
}

bool Agent::KubeletSocketExists() const { return KubeletSocketIdentity().has_value(); }

std::optional<std::pair<uint64_t, int64_t>> Agent::KubeletSocketIdentity() const {
  struct stat st;
  if (stat(KubeletSocketPath().c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
  return std::make_pair(static_cast<uint64_t>(st.st_ino),
                        static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec);
}

Status Agent::Start() {
  if (event_fd_ < 0) return InternalError(StrCat("eventfd: ", std::strerror(errno)));
  // Watch before the first registration so a kubelet that starts meanwhile
  // is not missed.
  if (Status st = watch_.Start(config_.plugin_dir); !st.ok()) return st;

  for (size_t i = 0; i < config_.resources.size(); ++i) {
    auto r = std::make_unique<Resource>();
    r->cfg = config_.resources[i];
    r->socket_path = StrCat(config_.plugin_dir, "/", r->cfg.socket);
    resources_.push_back(std::move(r));
  }
  // Load every module first: their subsystems make up the udev filter, and
  // the monitor must listen before the first scans so no event is lost.
  // A configuration mistake is fatal at start (like a TOML error): the
  // operator sees it at once instead of a silently missing resource. Other
  // failures cost the resource, unless it is required.
  auto failed = [&](size_t i, const Status& st) -> Status {
    if (st.code() == StatusCode::kInvalidArgument) return st;
    const config::ResourceConfig& cfg = resources_[i]->cfg;
    if (cfg.required)
      return FailedPreconditionError(
          StrCat("required resource \"", cfg.name, "\" failed: ", st.message()));
    spdlog::error("resource \"{}\" left out: {}", cfg.name, st.message());
    return OkStatus();
  };
  for (size_t i = 0; i < resources_.size(); ++i) {
    if (Status st = LoadResource(i); !st.ok())
      if (Status fatal = failed(i, st); !fatal.ok()) return fatal;
  }
  StartUdevMonitor();
  for (size_t i = 0; i < resources_.size(); ++i) {
    if (!resources_[i]->module) continue;
    if (Status st = StartResource(i); !st.ok())
      if (Status fatal = failed(i, st); !fatal.ok()) return fatal;
  }
  std::vector<std::pair<std::string, modules::DeviceListPtr>> lists;
  for (const auto& r : resources_)
    if (r->instance) lists.emplace_back(r->cfg.name, r->instance->devices());
  for (const std::string& w : FindRecipeConflicts(lists)) spdlog::warn("{}", w);
  for (size_t i = 0; i < resources_.size(); ++i) {
    if (resources_[i]->state != State::kIdle) Register(i);
  }
  if (config_.resync_interval.count() > 0) next_resync_ = Clock::now() + config_.resync_interval;
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

Status Agent::LoadResource(size_t index) {
  Resource& r = *resources_[index];
  const std::string path = modules::ResolveModulePath(r.cfg.module, config_.module_dir);
  auto module = modules::LoadedModule::Load(path);
  if (!module.ok()) return module.status();
  if (Status st = (*module)->CheckKeys(r.cfg, index); !st.ok()) return st;
  r.module = *module;
  return OkStatus();
}

void Agent::StartUdevMonitor() {
  udev_subscribers_.clear();
  for (size_t i = 0; i < resources_.size(); ++i) {
    const auto& m = resources_[i]->module;
    if (!m || m->descriptor().udev_subsystems == nullptr) continue;
    for (const char* const* s = m->descriptor().udev_subsystems; *s; ++s)
      if (**s) udev_subscribers_[*s].push_back(i);
  }
  if (udev_subscribers_.empty()) return;
  std::vector<std::string> subsystems;
  for (const auto& [s, _] : udev_subscribers_) subsystems.push_back(s);
  const config::UdevSource source = udev::ResolveSource(config_.udev_source);
  auto monitor = udev::Monitor::Create(source, subsystems);
  if (!monitor.ok()) {
    spdlog::warn("no hotplug events ({}); devices are rescanned every {} ms only",
                 monitor.status().message(), config_.resync_interval.count());
    return;
  }
  udev_ = std::move(*monitor);
  spdlog::info("listening for {} events on subsystems {}{}", config::UdevSourceName(source),
               StrJoin(subsystems, ","),
               config_.udev_source == config::UdevSource::kAuto ? " (udev_source auto)" : "");
}

void Agent::DispatchUdevEvents() {
  bool overflowed = false;
  std::vector<udev::Event> events = udev_->Drain(&overflowed);
  std::map<size_t, std::vector<udev::Event>> batches;
  for (udev::Event& e : events) {
    spdlog::trace("uevent {} {} {}", e.action, e.subsystem, e.syspath);
    auto it = udev_subscribers_.find(e.subsystem);
    if (it == udev_subscribers_.end()) continue;
    for (size_t i : it->second) batches[i].push_back(e);
  }
  for (auto& [i, batch] : batches)
    if (resources_[i]->instance) resources_[i]->instance->OnUdevEvents(std::move(batch));
  if (overflowed) {
    spdlog::warn("uevent queue overflowed; rescanning every resource");
    for (auto& r : resources_)
      if (r->instance) r->instance->RequestRescan();
  }
}

Status Agent::StartResource(size_t index) {
  Resource& r = *resources_[index];
  r.hub = std::make_unique<kubelet::StreamHub>([this, index](bool by_agent, uint64_t gen) {
    if (!by_agent) Post({Event::kStreamEnded, index, gen, grpc::Status::OK});
  });
  modules::ModuleInstance::Options opts;
  opts.host_root = config_.host_root;
  opts.index = index;
  opts.on_change = [hub = r.hub.get(), name = r.cfg.name](modules::DeviceListPtr list) {
    kubelet::SnapshotPtr snapshot = kubelet::MakeSnapshot(*list);
    // The kubelet drops a stream whose message exceeds its 4 MiB receive
    // limit and never reconnects: keep the previous list instead.
    if (const size_t bytes = snapshot->ByteSizeLong(); bytes > kubelet::kKubeletMaxMessageBytes) {
      spdlog::error("resource \"{}\": {} devices make a {} byte device list, over the kubelet's "
                    "4 MiB message limit; not sending it",
                    name, list->size(), bytes);
      return;
    }
    hub->Publish(std::move(snapshot));
  };
  opts.start_timeout = config_.start_timeout;
  auto instance = modules::ModuleInstance::Create(r.module, r.cfg, std::move(opts));
  if (!instance.ok()) return instance.status();
  r.instance = std::move(*instance);
  spdlog::info("resource \"{}\": module \"{}\" {} from {}", r.cfg.name, r.module->name(),
               r.module->version(), r.module->path());

  if (UnixSocketIsLive(r.socket_path)) {
    r.instance.reset();
    return FailedPreconditionError(StrCat(
        "socket ", r.socket_path, " is served by another process (a second devplugd?)"));
  }
  if (Status st = StartServer(r); !st.ok()) {
    r.instance.reset();
    return st;
  }
  return OkStatus();
}

Status Agent::StartServer(Resource& r) {
  StopServer(r);
  ++r.generation;
  r.hub->set_generation(r.generation);
  // gRPC removes a stale file at the path before it binds.
  r.service = std::make_unique<kubelet::DevicePluginService>(r.instance.get(), r.hub.get(),
                                                             &timers_, config_.call_timeout);
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort("unix:" + r.socket_path, grpc::InsecureServerCredentials(),
                           &bound_port);
  builder.RegisterService(r.service.get());
  r.server = builder.BuildAndStart();
  if (!r.server) {
    r.state = State::kIdle;
    return UnavailableError(StrCat("cannot serve on ", r.socket_path,
                                               " (is the directory writable?)"));
  }
  r.state = State::kWaitingKubelet;
  spdlog::debug("resource \"{}\": serving on {}", r.cfg.name, r.socket_path);
  return OkStatus();
}

void Agent::StopServer(Resource& r) {
  if (r.pending) {
    r.pending->Cancel();
    r.pending.reset();
  }
  if (!r.server) return;
  // End our streams first so the kubelet sees a clean end, then stop the
  // server; Shutdown waits for calls in flight up to the deadline.
  r.hub->CloseAll();
  r.service->AbortPending();
  r.server->Shutdown(std::chrono::system_clock::now() + kServerStopGrace);
  r.server.reset();
  r.service.reset();
}

void Agent::Register(size_t index) {
  Resource& r = *resources_[index];
  r.retry_at.reset();
  r.pending_kubelet = KubeletSocketIdentity();
  if (!r.pending_kubelet) {
    spdlog::info("resource \"{}\": waiting for {} to appear", r.cfg.name, KubeletSocketPath());
    r.state = State::kWaitingKubelet;
    return;
  }
  v1beta1::RegisterRequest req;
  req.set_version("v1beta1");
  req.set_endpoint(r.cfg.socket);
  req.set_resource_name(r.cfg.name);
  *req.mutable_options() = kubelet::OptionsFor(r.instance->module());
  r.state = State::kRegistering;
  const uint64_t gen = r.generation;
  {
    std::lock_guard lock(register_mu_);
    ++registers_in_flight_;
  }
  r.pending = kubelet::StartRegister(KubeletSocketPath(), req, kubelet::kRegisterDeadline,
                                     [this, index, gen](const grpc::Status& st) {
                                       Post({Event::kRegisterDone, index, gen, st});
                                       std::lock_guard lock(register_mu_);
                                       if (--registers_in_flight_ == 0)
                                         register_cv_.notify_all();
                                     });
}

void Agent::RestartAndRegister(size_t index) {
  Resource& r = *resources_[index];
  if (Status st = StartServer(r); !st.ok()) {
    spdlog::error("resource \"{}\": {}", r.cfg.name, st.message());
    ScheduleRetry(r, milliseconds(0));
    return;
  }
  Register(index);
}

void Agent::ScheduleRetry(Resource& r, milliseconds min_delay) {
  r.backoff = std::clamp(r.backoff * 2, kMinBackoff, kMaxBackoff);
  r.state = State::kRetryWait;
  r.retry_at = Clock::now() + std::max(min_delay, r.backoff);
}

void Agent::OnKubeletRestart() {
  const auto kubelet = KubeletSocketIdentity();
  if (!kubelet) return;  // already gone again; its successor will tell us
  spdlog::info("kubelet.sock created: the kubelet (re)started; serving and registering again");
  for (size_t i = 0; i < resources_.size(); ++i) {
    Resource& r = *resources_[i];
    if (!r.instance) continue;
    // A retry may have registered with this very kubelet already.
    if (r.state == State::kRegistered && r.registered_kubelet == kubelet) continue;
    r.backoff = milliseconds(0);
    RestartAndRegister(i);
  }
}

void Agent::HandleEvent(const Event& ev) {
  Resource& r = *resources_[ev.resource];
  if (ev.generation != r.generation || !r.instance) return;  // stale
  switch (ev.kind) {
    case Event::kRegisterDone:
      r.pending.reset();
      if (r.state != State::kRegistering) return;
      if (ev.status.ok()) {
        r.state = State::kRegistered;
        r.registered_kubelet = r.pending_kubelet;
        r.backoff = milliseconds(0);
        ++r.registrations;
        spdlog::info("resource \"{}\": registered with the kubelet (socket {})", r.cfg.name,
                     r.cfg.socket);
      } else {
        ScheduleRetry(r, milliseconds(0));
        spdlog::warn("resource \"{}\": Register failed ({}: {}); retrying in {} ms", r.cfg.name,
                     static_cast<int>(ev.status.error_code()), ev.status.error_message(),
                     r.backoff.count());
      }
      break;
    case Event::kStreamEnded:
      // The kubelet never reopens ListAndWatch: without a new registration
      // this resource is gone from the node after its grace period.
      if (r.state != State::kRegistered && r.state != State::kRegistering) return;
      ScheduleRetry(r, kStreamLostDelay);
      spdlog::warn("resource \"{}\": the kubelet closed ListAndWatch; registering again in {} ms",
                   r.cfg.name,
                   std::chrono::duration_cast<milliseconds>(*r.retry_at - Clock::now()).count());
      break;
  }
  UpdateStatus();
}

int Agent::NextTimeoutMs() const {
  std::optional<Clock::time_point> next = next_resync_;
  if (next_watchdog_ && (!next || *next_watchdog_ < *next)) next = next_watchdog_;
  for (const auto& r : resources_)
    if (r->retry_at && (!next || *r->retry_at < *next)) next = r->retry_at;
  if (!next) return -1;
  const auto left = std::chrono::ceil<milliseconds>(*next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 3'600'000));
}

void Agent::FireTimers() {
  const auto now = Clock::now();
  if (next_watchdog_ && *next_watchdog_ <= now) {
    // Reaching this line proves the main loop runs; a loop stuck anywhere
    // stops the pings and systemd restarts the service.
    sd_notify(0, "WATCHDOG=1");
    next_watchdog_ = now + watchdog_interval_;
  }
  if (next_resync_ && *next_resync_ <= now) {
    next_resync_ = now + config_.resync_interval;
    for (const auto& r : resources_)
      if (r->instance) r->instance->RequestRescan();
  }
  for (size_t i = 0; i < resources_.size(); ++i) {
    Resource& r = *resources_[i];
    if (!r.retry_at || *r.retry_at > now) continue;
    r.retry_at.reset();
    if (!r.instance) continue;
    RestartAndRegister(i);
  }
  UpdateStatus();
}

void Agent::Post(Event ev) {
  {
    std::lock_guard lock(events_mu_);
    events_.push_back(std::move(ev));
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof(one));
}

void Agent::UpdateStatus() {
  size_t registered = 0, serving = 0;
  for (const auto& r : resources_) {
    if (r->state == State::kRegistered) ++registered;
    if (r->instance) ++serving;
  }
  std::string status = StrCat("registered ", registered, "/", resources_.size(),
                                    " resources");
  if (serving < resources_.size()) StrAppend(&status, "; ", resources_.size() - serving, " failed");
  if (registered < serving && !KubeletSocketExists()) StrAppend(&status, "; waiting for kubelet");
  // Say which resources offer nothing usable: on a fresh node that is the
  // hint to look at the journal and the configuration.
  std::vector<std::string> idle;
  for (const auto& r : resources_) {
    if (!r->instance) continue;
    const modules::DeviceListPtr list = r->instance->devices();
    if (!list || std::none_of(list->begin(), list->end(),
                              [](const modules::Device& d) { return d.healthy; }))
      idle.push_back(r->cfg.name);
  }
  if (!idle.empty())
    StrAppend(&status, "; no healthy devices: ", StrJoin(idle, ", "), " (see the journal)");
  if (status != last_status_) {
    last_status_ = status;
    sd_notifyf(0, "STATUS=%s", status.c_str());
    spdlog::debug("status: {}", status);
    for (const auto& r : resources_)
      spdlog::trace("  {}: {}", r->cfg.name, StateName(static_cast<int>(r->state)));
  }
}

void Agent::Run(int signal_fd) {
  for (;;) {
    const int timeout_ms = NextTimeoutMs();
    pollfd fds[4] = {{signal_fd, POLLIN, 0},
                     {watch_.fd(), POLLIN, 0},
                     {event_fd_, POLLIN, 0},
                     {udev_ ? udev_->fd() : -1, POLLIN, 0}};
    const int n = poll(fds, 4, timeout_ms);
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
        if (si.ssi_signo == SIGHUP)
          spdlog::warn("SIGHUP: configuration reload is not supported yet, ignoring");
      }
    }
    if (fds[1].revents & POLLIN) {
      kubelet::PluginDirWatch::Events ev = watch_.Drain();
      if (ev.dir_gone) {
        spdlog::warn("{} was removed; recreating it and waiting for the kubelet",
                     config_.plugin_dir);
        if (Status st = watch_.Start(config_.plugin_dir); !st.ok())
          spdlog::error("{}", st.message());
        ev.kubelet_socket_created = KubeletSocketExists();
      }
      if (ev.kubelet_socket_created) OnKubeletRestart();
      for (const std::string& name : ev.removed) {
        for (const auto& r : resources_)
          if (name == r->cfg.socket)
            spdlog::debug("resource \"{}\": socket {} removed", r->cfg.name, name);
      }
    }
    if (fds[3].revents & POLLIN) DispatchUdevEvents();
    if (fds[2].revents & POLLIN) {
      uint64_t count;
      [[maybe_unused]] ssize_t rd = read(event_fd_, &count, sizeof(count));
      std::vector<Event> events;
      {
        std::lock_guard lock(events_mu_);
        events.swap(events_);
      }
      for (const Event& e : events) HandleEvent(e);
    }
    FireTimers();
  }
  Shutdown();
}

void Agent::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  sd_notify(0, "STOPPING=1");
  for (auto& r : resources_) {
    StopServer(*r);
    if (r->instance) unlink(r->socket_path.c_str());
  }
  // Destroy module instances after every server is down: no call can reach
  // them any more. A module stuck in a call costs its thread, not shutdown.
  for (auto& r : resources_) {
    if (r->instance && !r->instance->Stop(config_.start_timeout)) {
      spdlog::error("resource \"{}\": module \"{}\" did not stop within {} ms; abandoning it",
                    r->cfg.name, r->module->name(), config_.start_timeout.count());
      (void)r->instance.release();  // its thread may still use it
    }
    r->instance.reset();
  }
  {
    // Cancelled above; their callbacks still reference this agent.
    std::unique_lock lock(register_mu_);
    register_cv_.wait(lock, [&] { return registers_in_flight_ == 0; });
  }
  // Stream-end callbacks may have posted events; nothing reads them now.
  spdlog::info("stopped");
}

}  // namespace devplug
