#include "resource.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include <spdlog/spdlog.h>

#include "front_end/make.h"
#include "kubelet/registration.h"
#include "model/kubelet_names.h"
#include "util/sanitizers.h"
#include "util/unix_socket.h"

namespace devplug {
namespace {

using std::chrono::milliseconds;

// Retries of a resource that could not start.
constexpr milliseconds kMinStartBackoff{1000};
constexpr milliseconds kMaxStartBackoff{60'000};
// How long a server may take to end its calls when it is stopped.
constexpr milliseconds kServerStopGrace{2000};

}  // namespace

Resource::Resource(Services& services, const config::ResourceConfig& cfg, uint64_t id, size_t index,
                   std::shared_ptr<ops::ResourceMetrics> metrics, bool staged,
                   const FrontEndFactory& make_front_end)
    : services_(services),
      id_(id),
      index_(index),
      cfg_(cfg),
      socket_path_(StrCat(cfg.registration == RegistrationMode::kPluginWatcher
                              ? services.running().plugins_registry_dir
                              : services.running().plugin_dir,
                          "/", cfg.socket)),
      second_name_(kubelet::SecondSocketName(cfg.socket)),
      second_path_(
          StrCat(socket_path_.substr(0, socket_path_.size() - cfg.socket.size()), second_name_)),
      staged_(staged),
      metrics_(std::move(metrics)) {
  front_end::Context context;
  context.cfg = cfg;
  context.staged = staged;
  context.pods = services.pods();
  context.timers = &services.timers();
  context.observer = metrics_;
  context.kubelet_runs = services.KubeletSocketIdentity().has_value();
  context.stream_ended = [mailbox = services.mailbox(), id](uint64_t reg) {
    mailbox->Post({AgentEvent::kStreamEnded, id, reg, OkStatus(), nullptr});
  };
  context.tracker_changed = [mailbox = services.mailbox(), id] {
    mailbox->Post({AgentEvent::kTrackerChanged, id, 0, OkStatus(), nullptr});
  };
  front_ = make_front_end ? make_front_end(std::move(context))
                          : front_end::Make(services.running(), std::move(context));
  kubelet::Registrar::Env* env = this;
  registrar_ = std::make_unique<kubelet::Registrar>(
      kubelet::Registrar::Names{cfg_.name, cfg_.socket, socket_path_, services.KubeletSocketPath()},
      env, cfg_.registration);
}

// The registrar goes first: it cancels a Register in flight through us.
Resource::~Resource() { registrar_.reset(); }

std::vector<std::string> Resource::Subsystems() const {
  std::vector<std::string> out;
  if (!module_ || module_->descriptor().udev_subsystems == nullptr) return out;
  for (const char* const* s = module_->descriptor().udev_subsystems; *s; ++s) out.emplace_back(*s);
  return out;
}

// ---- starting -----------------------------------------------------------------------------

Status Resource::LoadModule(const Resource* predecessor) {
  const std::string path = modules::ResolveModulePath(cfg_.module, services_.running().module_dir);
  auto module = modules::LoadedModule::Load(path);
  if (!module.ok()) return module.status();
  if (Status st = (*module)->CheckKeys(cfg_, index_); !st.ok()) return st;
  if (Status st = front_->ModuleLoaded(services_.running(), **module,
                                       predecessor ? predecessor->front_.get() : nullptr);
      !st.ok())
    return st;
  module_ = *module;
  return OkStatus();
}

void Resource::Launch(const config::AgentConfig& cfg, const Resource* predecessor) {
  modules::ModuleInstance::Options opts;
  opts.host_root = cfg.host_root;
  opts.index = index_;
  opts.start_timeout = cfg.start_timeout;
  opts.prestart_timeout = cfg.prestart_timeout;
  front_end::InstanceHooks hooks =
      front_->Launch(cfg, *module_, predecessor ? predecessor->front_.get() : nullptr);
  opts.lists = std::move(hooks.lists);
  opts.pods = std::move(hooks.pods);
  opts.releases = std::move(hooks.releases);
  opts.withholds = std::move(hooks.withholds);
  opts.observer = metrics_;
  if (services_.path_watch())
    opts.watches = std::make_shared<udev::PathWatchSet>(services_.path_watch(), id_);
  const uint64_t launch = ++launch_;
  ++attempts_;
  start_deadline_ = Clock::now() + cfg.start_timeout;
  starting_ = modules::ModuleInstance::Launch(
      module_, cfg_, std::move(opts), [mailbox = services_.mailbox(), i = id_, launch](Status st) {
        mailbox->Post({AgentEvent::kCreated, i, launch, std::move(st), nullptr});
      });
}

bool Resource::Created(uint64_t launch, Status st) {
  if (launch != launch_ || !starting_) return false;  // given up meanwhile
  std::unique_ptr<modules::ModuleInstance> inst = std::move(starting_);
  start_deadline_.reset();
  if (staged_) {
    // A reload's resource: the reload decides, once all of them are known.
    if (st.ok())
      instance_ = std::move(inst);
    else
      failure_ = std::move(st);
    return true;
  }
  if (!st.ok()) {
    inst.reset();  // stops its (idle) worker
    // A configuration problem found by the module needs the operator.
    LeaveOut(st, st.code() != StatusCode::kInvalidArgument);
    return true;
  }
  instance_ = std::move(inst);
  front_->Serve(instance_.get(), /*commit=*/false);
  const bool retried = !failure_.ok();
  failure_ = OkStatus();
  start_backoff_ = milliseconds(0);
  if (retried) spdlog::info("resource \"{}\": started (attempt {})", cfg_.name, attempts_);
  spdlog::info("resource \"{}\": module \"{}\" {} from {}", cfg_.name, module_->name(),
               module_->version(), module_->path());
  return true;
}

void Resource::LeaveOut(Status why, bool retry) {
  const bool same = !failure_.ok() && failure_.message() == why.message();
  start_backoff_ = std::clamp(start_backoff_ * 2, kMinStartBackoff, kMaxStartBackoff);
  if (retry) start_at_ = Clock::now() + start_backoff_;
  const std::string next = retry ? StrCat("; retrying in ", start_backoff_.count() / 1000, " s")
                                 : std::string("; not retried (fix it, then restart devplugd)");
  // The first failure, and a changed reason, are worth the operator's eye;
  // the same reason again is not.
  if (failure_.ok())
    spdlog::error("resource \"{}\" left out: {}{}", cfg_.name, why.message(), next);
  else if (!same)
    spdlog::warn("resource \"{}\" still left out: {}{}", cfg_.name, why.message(), next);
  else
    spdlog::debug("resource \"{}\" still left out: {}{}", cfg_.name, why.message(), next);
  failure_ = std::move(why);
}

void Resource::GiveUp() {
  if (!starting_) return;
  const std::string why = starting_->GiveUpMessage();
  starting_->RequestStop();
  // Stuck inside the module: its worker may come back at any time, so the
  // instance outlives us on purpose.
  (void)modules::StopOrAbandon(starting_, Clock::now());
  starting_.reset();
  start_deadline_.reset();
  ++launch_;
  if (staged_)
    failure_ = UnavailableError(why);  // the reload reports it
  else
    LeaveOut(UnavailableError(why), false);
}

std::optional<Resource::Clock::time_point> Resource::NextDeadline() const {
  std::optional<Clock::time_point> next = registrar_->NextDeadline();
  for (const auto& t : {start_at_, start_deadline_})
    if (t && (!next || *t < *next)) next = t;
  return next;
}

bool Resource::OnTimer(Clock::time_point now) {
  if (start_deadline_ && *start_deadline_ <= now) GiveUp();
  const bool retry = start_at_ && *start_at_ <= now;
  if (retry) start_at_.reset();
  if (instance_) registrar_->OnTimer();
  return retry;
}

// ---- a reload -----------------------------------------------------------------------------

void Resource::Commit() {
  staged_ = false;
  failure_ = OkStatus();
  front_->Serve(instance_.get(), /*commit=*/true);
}

void Resource::Renumber(size_t index, const config::ResourceConfig& cfg) {
  index_ = index;
  cfg_ = cfg;  // the same, written elsewhere perhaps
}

void Resource::HandOver(const Resource& successor) { front_->HandOver(*successor.front_); }

void Resource::SetClaimed(const std::map<std::string, std::string>& claimed) {
  if (front_->SetClaimed(claimed) && instance_) instance_->Republish();
}

bool Resource::ApplyAgentKeys(const config::AgentConfig& cfg,
                              lifecycle::ReleaseCoordinator& releases) {
  return front_->ApplyAgentKeys(cfg, releases, staged_ ? nullptr : instance_.get());
}

// ---- serving ------------------------------------------------------------------------------

std::optional<kubelet::KubeletId> Resource::Kubelet() const {
  return services_.KubeletSocketIdentity();
}

Status Resource::Serve() {
  StopServing();
  const config::AgentConfig& cfg = services_.running();
  const bool watched = cfg_.registration == RegistrationMode::kPluginWatcher;
  if (watched)
    if (Status st = services_.WatchRegistry(); !st.ok()) return st;
  if (Status st = PickSocket(); !st.ok()) return st;
  const std::string path = serving_path();
  // gRPC binds a hidden name, which is then renamed into place. gRPC
  // unlinks the path it bound when its server stops, whatever file is there
  // by then; bound at the shared name, that could be another process's
  // live socket. The hidden name is ours alone, and both the kubelet's
  // plugin watcher and our own watches ignore dot files. The shared name is
  // removed by us, and only while it is still the file we bound.
  const std::string bind_path = BindPath(path);
  unlink(bind_path.c_str());  // one a killed devplugd left
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + bind_path, grpc::InsecureServerCredentials());
  front_->Register(builder, instance_.get(), cfg);
  if (watched) {
    kubelet::RegistrationService::Callbacks cb;
    cb.probed = [probes = probes_, front = front_.get(), mailbox = services_.mailbox(), i = id_] {
      // Armed here, on gRPC's thread: the kubelet opens ListAndWatch right
      // after GetInfo, before the main loop could hear of the probe.
      const uint64_t n = probes->fetch_add(1) + 1;
      front->ExpectStream(n);
      mailbox->Post({AgentEvent::kProbed, i, n, OkStatus(), nullptr});
    };
    cb.status = [mailbox = services_.mailbox(), i = id_](Status st) {
      mailbox->Post({AgentEvent::kKubeletStatus, i, 0, std::move(st), nullptr});
    };
    registration_ =
        std::make_unique<kubelet::RegistrationService>(front_->Info(path), std::move(cb));
    builder.RegisterService(registration_.get());
  }
  server_ = builder.BuildAndStart();
  if (!server_) {
    registration_.reset();
    front_->DropServices(false);
    (void)services_.PluginDirGone();  // then the agent exits
    return UnavailableError(StrCat("cannot serve on ", path, " (is the directory writable?)"));
  }
  if (bind_path != path && rename(bind_path.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    StopServing();
    unlink(bind_path.c_str());
    return UnavailableError(StrCat("cannot serve on ", path, ": rename: ", why));
  }
  // Its time says which devplugd started later (see Superseded).
  const timespec stamp = ProcessStamp();
  const timespec times[2] = {stamp, stamp};
  if (utimensat(AT_FDCWD, path.c_str(), times, 0) != 0)
    spdlog::debug("resource \"{}\": cannot set the time of {}: {}", cfg_.name, path,
                  std::strerror(errno));
  struct stat st;
  if (stat(path.c_str(), &st) == 0) socket_file_ = std::make_pair(st.st_dev, st.st_ino);
  spdlog::debug("resource \"{}\": serving on {}", cfg_.name, path);
  return OkStatus();
}

Status Resource::PickSocket() {
  const std::string& mine = serving_path();
  if (!UnixSocketIsLive(mine)) return OkStatus();
  const std::string& other = on_second_ ? socket_path_ : second_path_;
  // Another devplugd serves the name: we serve beside it on the other one
  // (the kubelet calls the later registration, of a device plugin or a DRA
  // driver), while both are free of a third.
  if (UnixSocketIsLive(other))
    return FailedPreconditionError(
        StrCat("socket ", mine, " is served by another process (a second devplugd?)"));
  if (other.size() > kubelet::kMaxSocketPathBytes)
    return FailedPreconditionError(StrCat("socket ", mine,
                                          " is served by another process, and its second name ",
                                          other, " is too long for a Unix socket"));
  on_second_ = !on_second_;
  spdlog::info("resource \"{}\": another devplugd serves {}; serving beside it on {}", cfg_.name,
               mine, other);
  registrar_->SetSocket(serving_name(), serving_path());
  return OkStatus();
}

std::string Resource::Superseded() const {
  const std::string& other = on_second_ ? socket_path_ : second_path_;
  struct stat st;
  if (lstat(other.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return "";
  // Later started is newer; at the same instant, the second name's.
  const timespec mine = ProcessStamp();
  const auto theirs_at = std::make_pair(st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  const auto ours_at = std::make_pair(mine.tv_sec, mine.tv_nsec);
  const bool newer = theirs_at != ours_at ? theirs_at > ours_at : !on_second_;
  if (!newer || !UnixSocketIsLive(other)) return "";
  return other;
}

timespec Resource::ProcessStamp() {
  static const timespec stamp = [] {
    timespec t{};
    clock_gettime(CLOCK_REALTIME, &t);
    return t;
  }();
  return stamp;
}

bool Resource::SocketIsOurs() const {
  struct stat st;
  return socket_file_ && stat(serving_path().c_str(), &st) == 0 && S_ISSOCK(st.st_mode) &&
         std::make_pair(st.st_dev, st.st_ino) == *socket_file_;
}

bool Resource::KubeletAnswers() const { return UnixSocketIsLive(services_.KubeletSocketPath()); }

void Resource::ExpectStream(uint64_t n) { front_->ExpectStream(n); }

std::function<void()> Resource::Register(uint64_t n) {
  v1beta1::RegisterRequest req;
  req.set_version("v1beta1");
  req.set_endpoint(serving_name());
  req.set_resource_name(cfg_.name);
  *req.mutable_options() = front_->RegisterOptions(*instance_);
  InFlight& in_flight = services_.registers();
  in_flight.Add();
  std::shared_ptr<kubelet::PendingRegister> pending = kubelet::StartRegister(
      services_.KubeletSocketPath(), req, kubelet::kRegisterDeadline,
      [&in_flight, mailbox = services_.mailbox(), i = id_, n](const grpc::Status& st) {
        mailbox->Post({AgentEvent::kRegisterDone, i, n,
                       Status(static_cast<StatusCode>(st.error_code()), st.error_message()),
                       nullptr});
        // The agent waits for every answer before it goes.
        in_flight.Done();
      });
  return [pending] { pending->Cancel(); };
}

std::string Resource::BindPath(const std::string& socket_path) {
  const size_t slash = socket_path.rfind('/');
  const std::string hidden =
      StrCat(socket_path.substr(0, slash + 1), ".", socket_path.substr(slash + 1), ".bind");
  // sun_path holds 107 bytes: a path too long for the hidden name is bound
  // as it is (gRPC's unlink at stop is then the one left risk).
  return hidden.size() < 108 ? hidden : socket_path;
}

void Resource::Withdraw(bool exiting) {
  // Looked at now: what serves beside us decides what stays of ours.
  if (front_->Streamless()) front_->SetSuperseded(!Superseded().empty());
  const std::optional<std::pair<dev_t, ino_t>> bound = socket_file_;
  StopServer(exiting);
  if (bound) UnlinkIfSame(serving_path(), *bound);
  // Exiting, every resource's front end stops at once, and
  // WaitFrontEndStopped waits for them all under one deadline.
  front_->Withdraw(instance_.get(), exiting);
}

bool Resource::WaitFrontEndStopped(Clock::time_point deadline) {
  return front_->WaitStopped(deadline);
}

void Resource::StopServer(bool exiting) {
  registrar_->Stop();
  StopServing(exiting);
}

void Resource::StopServing([[maybe_unused]] bool exiting) {
  front_->ExpectStream(0);
  socket_file_.reset();
  if (!server_) return;
#if !defined(DEVPLUG_ASAN) && !defined(DEVPLUG_TSAN)
  if (exiting) {
    // The process ends right after, and its end closes every connection:
    // the kubelet's ListAndWatch ends as it would after our own Finish (it
    // reads an error either way and lets the endpoint go). Ending streams
    // and shutting the server down gracefully would wait for gRPC's
    // threads and for the kubelet to close its side after our GOAWAY (100
    // ms from a gRPC C++ client, up to kServerStopGrace), each wake-up
    // delayed on a loaded node. The caller removes the socket's name; the
    // server and its service stay alive until the exit. Sanitizer builds
    // stop and destroy both, so that leaks and errors at exit still show.
    (void)server_.release();
    (void)registration_.release();
    front_->DropServices(true);
    return;
  }
#endif
  // End our streams first so the kubelet sees a clean end; Shutdown waits
  // for calls in flight up to the deadline.
  front_->EndCalls();
  server_->Shutdown(std::chrono::system_clock::now() + kServerStopGrace);
  server_.reset();
  registration_.reset();
  front_->DropServices(false);
}

void Resource::RequestStop() {
  for (auto* inst : {&instance_, &starting_})
    if (*inst) (*inst)->RequestStop();
}

bool Resource::StopModule(Clock::time_point deadline, [[maybe_unused]] bool keep) {
  bool stopped = true;
  for (auto* inst : {&instance_, &starting_}) {
    if (!*inst) continue;
    front_->Clear(inst->get());
    if (!modules::StopOrAbandon(*inst, deadline)) stopped = false;
#if !defined(DEVPLUG_ASAN) && !defined(DEVPLUG_TSAN)
    if (keep) {
      (void)inst->release();
      continue;
    }
#endif
    inst->reset();
  }
  return stopped;
}

// ---- releases -----------------------------------------------------------------------------

lifecycle::ReleaseTracker* Resource::TrackerForList(bool list_ok) const {
  return front_->TrackerForList(list_ok, instance_ != nullptr);
}

void Resource::TrackerChanged(lifecycle::ReleaseCoordinator& releases, Clock::time_point now) {
  front_->TrackerChanged(releases, now, instance_.get());
}

void Resource::Release(const std::vector<std::string>& ids, const PodSnapshot& pods) {
  front_->Release(ids, pods, instance_.get());
}

// ---- status -------------------------------------------------------------------------------

ops::ResourceView Resource::View(const std::string& module_dir) const {
  ops::ResourceView rv;
  rv.name = cfg_.name;
  rv.module = module_ ? std::string(module_->name()) : cfg_.module;
  rv.module_version = module_ ? std::string(module_->version()) : std::string();
  rv.module_file = module_ ? module_->path() : modules::ResolveModulePath(cfg_.module, module_dir);
  rv.socket = serving_path();
  rv.registration = cfg_.registration;
  rv.running = instance_ != nullptr;
  rv.starting = starting_ != nullptr;
  rv.failed = !failure_.ok();
  rv.failure = failure_.message();
  rv.retrying = start_at_.has_value();
  const kubelet::Registrar& reg = *registrar_;
  rv.state = reg.state();
  rv.superseded = reg.superseded();
  rv.registered = reg.registered();
  rv.registered_since = reg.registered_since();
  rv.kubelet_status = reg.kubelet_status();
  rv.last_error = reg.last_error();
  rv.kubelet_connected = rv.registered && front_->Connected(reg.registration());
  if (instance_) rv.devices = instance_->devices();
  front_->View(rv);
  return rv;
}

}  // namespace devplug
