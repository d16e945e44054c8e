#include "resource.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <spdlog/spdlog.h>

#include "dra/resource_slice.h"
#include "kubelet/list_publisher.h"
#include "kubelet/pod_lookup.h"
#include "kubelet/registration.h"
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

lifecycle::ReleaseTiming Timing(const config::AgentConfig& c) {
  lifecycle::ReleaseTiming timing;
  timing.grace = c.release_grace;
  timing.settle = c.kubelet_settle;
  timing.unseen = c.unseen_timeout;
  return timing;
}

}  // namespace

Resource::Resource(Services& services, const config::ResourceConfig& cfg, uint64_t id, size_t index,
                   std::shared_ptr<ops::ResourceMetrics> metrics, bool staged)
    : services_(services),
      id_(id),
      index_(index),
      cfg_(cfg),
      socket_path_(StrCat(cfg.registration == RegistrationMode::kPluginWatcher
                              ? services.running().plugins_registry_dir
                              : services.running().plugin_dir,
                          "/", cfg.socket)),
      staged_(staged),
      hub_(std::make_unique<kubelet::StreamHub>([mailbox = services.mailbox(), id](uint64_t reg) {
        mailbox->Post({AgentEvent::kStreamEnded, id, reg, OkStatus(), nullptr});
      })),
      metrics_(std::move(metrics)) {
  if (cfg.cdi != CdiMode::kOff) {
    // The configuration refused names without a CDI kind.
    auto c = cdi::ResourceCdi::Make({.resource = cfg.name,
                                     .mode = cfg.cdi,
                                     .dir = cfg.cdi_dir,
                                     .host_root = services.running().host_root,
                                     .only = cfg.cdi_only,
                                     .active = !staged});
    if (c.ok()) cdi_ = *c;
  }
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
  if (cfg_.api == ServingApi::kDra && !dra_) {
    auto front = dra::FrontEnd::Make(services_.running(), cfg_, (*module)->has_on_release(),
                                     metrics_, predecessor ? predecessor->dra_.get() : nullptr);
    if (!front.ok()) return front.status();
    dra_ = std::move(*front);
  }
  module_ = *module;
  return OkStatus();
}

void Resource::Launch(const config::AgentConfig& cfg, const Resource* predecessor) {
  if (predecessor) handed_out_ = predecessor->handed_out_;
  modules::ModuleInstance::Options opts;
  opts.host_root = cfg.host_root;
  opts.index = index_;
  opts.start_timeout = cfg.start_timeout;
  opts.prestart_timeout = cfg.prestart_timeout;
  if (dra_) {
    opts.lists = dra_->Sink(!staged_);
  } else {
    opts.lists = std::make_shared<kubelet::ListPublisher>(hub_.get(), cdi_);
  }
  opts.observer = metrics_;
  if (dra_) {
    // Under DRA the claims say who holds a device (review D6: PodResources'
    // `devices` never lists a claim's, so cex's sweep destroyed the nodes of
    // prepared claims and `namespaces` refused every prepare).
    opts.pods = std::make_shared<kubelet::DraPodLookup>(
        services_.pods(), cfg_.driver, cfg.node_name,
        [holders = dra_->driver()->holders()](
            const std::string& id) -> std::optional<kubelet::DraPodLookup::Claim> {
          std::optional<dra::ClaimRef> c = holders->Of(id);
          if (!c) return std::nullopt;
          return kubelet::DraPodLookup::Claim{c->ns, c->name, dra::DeviceName(id)};
        });
  } else {
    opts.pods = std::make_shared<kubelet::PodLookup>(services_.pods(), handed_out_, cfg_.name);
  }
  tracker_.reset();
  // A DRA resource's devices are released by NodeUnprepareResources, not
  // by what PodResources lists.
  if (module_->has_on_release() && !dra_) {
    // Every module with on_release has a tracker, switched off while
    // pod_resources_poll is "0s", so a reload can switch tracking on and
    // off for instances that keep running. A resource a reload re-creates
    // takes over its predecessor's: no release state is lost, and releases
    // still running in the old instance report to it.
    //
    // A carried tracker belongs to the running resource until the reload
    // commits: staging only reads it (the first scan's held-back devices).
    // Its timing and on/off change in ApplyAgentKeys, which runs on serving
    // resources only, so a refused reload leaves it exactly as it was.
    if (predecessor && predecessor->tracker_)
      tracker_ = predecessor->tracker_;
    else
      tracker_ = std::make_shared<lifecycle::ReleaseTracker>(Timing(cfg),
                                                             cfg.pod_resources_poll.count() > 0);
  }
  releases_ = std::make_shared<lifecycle::ResourceReleases>(
      handed_out_, tracker_, [mailbox = services_.mailbox(), i = id_] {
        mailbox->Post({AgentEvent::kTrackerChanged, i, 0, OkStatus(), nullptr});
      });
  if (tracker_) opts.releases = releases_;
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
  if (tracker_ && !instance_->tracks_releases()) tracker_.reset();  // opted out
  if (dra_) dra_->Serve(instance_.get(), /*publish=*/false);
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
  // Its spec replaces the old resource's before the kubelet hears of it.
  if (cdi_) cdi_->Activate();
  if (tracker_ && !instance_->tracks_releases()) tracker_.reset();  // opted out
  if (dra_) dra_->Serve(instance_.get(), /*publish=*/true);
}

void Resource::Renumber(size_t index, const config::ResourceConfig& cfg) {
  index_ = index;
  cfg_ = cfg;  // the same, written elsewhere perhaps
}

void Resource::HandOver(const Resource& successor) {
  if (!tracker_ || tracker_ == successor.tracker_) return;
  const std::vector<std::string> dropped = tracker_->SetEnabled(false);
  if (!dropped.empty())
    spdlog::warn(
        "resource \"{}\": the new module instance does not release devices; {} will not be "
        "released",
        cfg_.name, StrJoin(dropped, ","));
}

bool Resource::ApplyAgentKeys(const config::AgentConfig& cfg,
                              lifecycle::ReleaseCoordinator& releases) {
  if (service_) {
    service_->set_call_timeout(cfg.call_timeout);
    service_->set_prestart_timeout(cfg.prestart_timeout);
  }
  // The one place a tracker's settings change, and only for a resource that
  // serves: a staged one may share its running predecessor's tracker.
  if (!tracker_ || !instance_ || staged_) return false;
  tracker_->set_timing(Timing(cfg));
  const bool on = cfg.pod_resources_poll.count() > 0;
  if (on == tracker_->enabled()) return false;
  const std::vector<std::string> dropped = tracker_->SetEnabled(on);
  if (on)
    spdlog::info("resource \"{}\": tracking device releases through {}", cfg_.name,
                 services_.pods()->socket());
  else
    spdlog::warn(
        "resource \"{}\": release tracking is off (pod_resources_poll = \"0s\"){}", cfg_.name,
        dropped.empty() ? std::string() : StrCat("; not released: ", StrJoin(dropped, ",")));
  // Devices held back are offered again, or the reverse.
  TrackerChanged(releases, Clock::now());
  return on;  // the first List is the truth about what is held
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
  if (UnixSocketIsLive(socket_path_))
    return FailedPreconditionError(
        StrCat("socket ", socket_path_, " is served by another process (a second devplugd?)"));
  // gRPC binds a hidden name, which is then renamed into place. gRPC
  // unlinks the path it bound when its server stops, whatever file is there
  // by then; bound at the shared name, that could be another process's
  // live socket. The hidden name is ours alone, and both the kubelet's
  // plugin watcher and our own watches ignore dot files. The shared name is
  // removed by us, and only while it is still the file we bound.
  const std::string bind_path = BindPath(socket_path_);
  unlink(bind_path.c_str());  // one a killed devplugd left
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + bind_path, grpc::InsecureServerCredentials());
  if (dra_) {
    dra_->Register(builder);
  } else {
    service_ = std::make_unique<kubelet::DevicePluginService>(
        instance_.get(), hub_.get(), &services_.timers(), cfg.call_timeout, cfg.prestart_timeout,
        releases_, metrics_, cdi_);
    builder.RegisterService(service_.get());
  }
  if (watched) {
    kubelet::RegistrationService::Callbacks cb;
    cb.probed = [probes = probes_, hub = hub_.get(), mailbox = services_.mailbox(), i = id_] {
      // Armed here, on gRPC's thread: the kubelet opens ListAndWatch right
      // after GetInfo, before the main loop could hear of the probe.
      const uint64_t n = probes->fetch_add(1) + 1;
      hub->ExpectKubeletStream(n);
      mailbox->Post({AgentEvent::kProbed, i, n, OkStatus(), nullptr});
    };
    cb.status = [mailbox = services_.mailbox(), i = id_](Status st) {
      mailbox->Post({AgentEvent::kKubeletStatus, i, 0, std::move(st), nullptr});
    };
    if (dra_) {
      registration_ =
          std::make_unique<kubelet::RegistrationService>(dra_->Info(socket_path_), std::move(cb));
    } else {
      registration_ = std::make_unique<kubelet::RegistrationService>(cfg_.name, std::move(cb));
    }
    builder.RegisterService(registration_.get());
  }
  server_ = builder.BuildAndStart();
  if (!server_) {
    service_.reset();
    registration_.reset();
    if (dra_) dra_->DropServices(false);
    (void)services_.PluginDirGone();  // then the agent exits
    return UnavailableError(
        StrCat("cannot serve on ", socket_path_, " (is the directory writable?)"));
  }
  if (bind_path != socket_path_ && rename(bind_path.c_str(), socket_path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    StopServing();
    unlink(bind_path.c_str());
    return UnavailableError(StrCat("cannot serve on ", socket_path_, ": rename: ", why));
  }
  struct stat st;
  if (stat(socket_path_.c_str(), &st) == 0) socket_file_ = std::make_pair(st.st_dev, st.st_ino);
  spdlog::debug("resource \"{}\": serving on {}", cfg_.name, socket_path_);
  return OkStatus();
}

bool Resource::SocketIsOurs() const {
  struct stat st;
  return socket_file_ && stat(socket_path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) &&
         std::make_pair(st.st_dev, st.st_ino) == *socket_file_;
}

bool Resource::KubeletAnswers() const { return UnixSocketIsLive(services_.KubeletSocketPath()); }

void Resource::ExpectStream(uint64_t n) { hub_->ExpectKubeletStream(n); }

std::function<void()> Resource::Register(uint64_t n) {
  v1beta1::RegisterRequest req;
  req.set_version("v1beta1");
  req.set_endpoint(cfg_.socket);
  req.set_resource_name(cfg_.name);
  *req.mutable_options() = kubelet::OptionsFor(*instance_);
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
  const std::optional<std::pair<dev_t, ino_t>> bound = socket_file_;
  StopServer(exiting);
  if (bound) UnlinkIfSame(socket_path_, *bound);
  if (!dra_) return;
  if (!exiting) {
    dra_->Stop(instance_.get());
    return;
  }
  // Exiting: every resource's driver stops at once; WaitDriverStopped
  // waits for them all under one deadline.
  dra_->RequestStop();
}

bool Resource::WaitDriverStopped(Clock::time_point deadline) {
  if (!dra_) return true;
  const bool stopped = dra_->WaitStopped(deadline);
  dra_.reset();
  return stopped;
}

void Resource::StopServer(bool exiting) {
  registrar_->Stop();
  StopServing(exiting);
}

void Resource::StopServing([[maybe_unused]] bool exiting) {
  hub_->ExpectKubeletStream(0);
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
    (void)service_.release();
    (void)registration_.release();
    if (dra_) dra_->DropServices(true);
    return;
  }
#endif
  // End our streams first so the kubelet sees a clean end; Shutdown waits
  // for calls in flight up to the deadline.
  hub_->CloseAll();
  if (service_) service_->AbortPending();
  if (dra_) dra_->AbortPending();
  server_->Shutdown(std::chrono::system_clock::now() + kServerStopGrace);
  server_.reset();
  service_.reset();
  registration_.reset();
  if (dra_) dra_->DropServices(false);
}

void Resource::RequestStop() {
  for (auto* inst : {&instance_, &starting_})
    if (*inst) (*inst)->RequestStop();
}

bool Resource::StopModule(Clock::time_point deadline, [[maybe_unused]] bool keep) {
  bool stopped = true;
  for (auto* inst : {&instance_, &starting_}) {
    if (!*inst) continue;
    if (dra_) dra_->Clear(inst->get());
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
  if (!tracker_) return nullptr;
  // Every tracker hears of a failed List (it says whether it needs one);
  // only running, tracking resources take an answer.
  if (list_ok && (!tracking() || !instance_)) return nullptr;
  return tracker_.get();
}

void Resource::RegistrationConfirmed() {
  if (dra_) dra_->Resync();
}

void Resource::TrackerChanged(lifecycle::ReleaseCoordinator& releases, Clock::time_point now) {
  if (!tracker_ || !instance_) return;
  if (releases.OnTrackerChanged(*tracker_, tracker_generation_, now)) instance_->Republish();
}

void Resource::Release(const std::vector<std::string>& ids, const PodSnapshot& pods) {
  if (ids.empty() || !instance_) return;
  spdlog::info("resource \"{}\": {} no longer held; releasing", cfg_.name, StrJoin(ids, ","));
  instance_->Release(ids);
  if (cdi_) cdi_->Released(ids, pods.asked);
}

// ---- status -------------------------------------------------------------------------------

ops::ResourceView Resource::View(const std::string& module_dir) const {
  ops::ResourceView rv;
  rv.name = cfg_.name;
  rv.module = module_ ? std::string(module_->name()) : cfg_.module;
  rv.module_version = module_ ? std::string(module_->version()) : std::string();
  rv.module_file = module_ ? module_->path() : modules::ResolveModulePath(cfg_.module, module_dir);
  rv.socket = socket_path_;
  rv.registration = cfg_.registration;
  rv.running = instance_ != nullptr;
  rv.starting = starting_ != nullptr;
  rv.failed = !failure_.ok();
  rv.failure = failure_.message();
  rv.retrying = start_at_.has_value();
  const kubelet::Registrar& reg = *registrar_;
  rv.state = reg.state();
  rv.registered = reg.registered();
  rv.registered_since = reg.registered_since();
  rv.kubelet_status = reg.kubelet_status();
  rv.last_error = reg.last_error();
  rv.kubelet_connected =
      rv.registered && reg.registration() != 0 && hub_->kubelet_stream() == reg.registration();
  if (instance_) rv.devices = instance_->devices();
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
  if (const dra::Driver* driver = dra_ ? dra_->driver() : nullptr) {
    ops::DraView v;
    v.driver = driver->options().driver;
    v.pool = driver->options().node;
    v.generation = driver->generation();
    v.slice_syncs = driver->syncs();
    v.slice_error = driver->sync_error();
    v.cdi_dir = driver->options().cdi_dir;
    v.cdi_written_to = driver->Dir();
    for (const dra::PreparedClaim& c : driver->prepared()) {
      ops::DraView::Claim claim{c.uid, c.ns, c.name, {}};
      for (const dra::PreparedDevice& d : c.devices)
        claim.devices.push_back({d.request, d.device, d.id, d.cdi_ids});
      v.prepared.push_back(std::move(claim));
    }
    v.releasing = driver->releasing();
    rv.dra = std::move(v);
  }
  return rv;
}

}  // namespace devplug
