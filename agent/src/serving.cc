// Each resource's gRPC server, and the Env its kubelet::Registrar acts on.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include <spdlog/spdlog.h>

#include "agent.h"
#include "model/kubelet_names.h"
#include "util/unix_socket.h"

namespace devplug {
namespace {

using std::chrono::milliseconds;

// How long a server may take to end its calls when it is stopped.
constexpr milliseconds kServerStopGrace{2000};

}  // namespace

Agent::Resource::Resource(Agent* a, const config::ResourceConfig& c, uint64_t i, size_t idx)
    : agent(a),
      id(i),
      index(idx),
      cfg(c),
      socket_path(StrCat(c.registration == RegistrationMode::kPluginWatcher
                             ? a->config_.plugins_registry_dir
                             : a->config_.plugin_dir,
                         "/", c.socket)) {
  registrar = std::make_unique<kubelet::Registrar>(
      kubelet::Registrar::Names{cfg.name, cfg.socket, socket_path, a->KubeletSocketPath()}, this,
      cfg.registration);
}

// The registrar goes first: it cancels a Register in flight through us.
Agent::Resource::~Resource() { registrar.reset(); }

std::optional<Agent::KubeletId> Agent::Resource::Kubelet() const {
  return agent->KubeletSocketIdentity();
}

Status Agent::Resource::Serve() { return agent->StartServer(*this); }

bool Agent::Resource::SocketIsOurs() const {
  struct stat st;
  return socket_file && stat(socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) &&
         std::make_pair(st.st_dev, st.st_ino) == *socket_file;
}

bool Agent::Resource::KubeletAnswers() const {
  return UnixSocketIsLive(agent->KubeletSocketPath());
}

bool Agent::Resource::PluginDirGone() const {
  if (agent->watch_.Gone()) agent->plugin_dir_lost_ = true;
  return agent->plugin_dir_lost_;
}

void Agent::Resource::ExpectStream(uint64_t n) { hub->ExpectKubeletStream(n); }

std::function<void()> Agent::Resource::Register(uint64_t n) {
  v1beta1::RegisterRequest req;
  req.set_version("v1beta1");
  req.set_endpoint(cfg.socket);
  req.set_resource_name(cfg.name);
  *req.mutable_options() = kubelet::OptionsFor(*instance);
  {
    std::lock_guard lock(agent->register_mu_);
    ++agent->registers_in_flight_;
  }
  std::shared_ptr<kubelet::PendingRegister> pending = kubelet::StartRegister(
      agent->KubeletSocketPath(), req, kubelet::kRegisterDeadline,
      [a = agent, mailbox = agent->mailbox_, i = id, n](const grpc::Status& st) {
        mailbox->Post({Event::kRegisterDone, i, n,
                       Status(static_cast<StatusCode>(st.error_code()), st.error_message()),
                       nullptr});
        // Shutdown waits for every callback, so the agent is still there.
        std::lock_guard lock(a->register_mu_);
        if (--a->registers_in_flight_ == 0) a->register_cv_.notify_all();
      });
  return [pending] { pending->Cancel(); };
}

std::string Agent::KubeletSocketPath() const {
  return StrCat(config_.plugin_dir, "/", kubelet::kKubeletSocketName);
}

std::optional<Agent::KubeletId> Agent::KubeletSocketIdentity() const {
  struct stat st;
  if (stat(KubeletSocketPath().c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
  return std::make_pair(
      static_cast<uint64_t>(st.st_ino),
      static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec);
}

void Agent::RemoveStaleSpecs(const config::AgentConfig* also) {
  std::set<std::string> dirs;
  std::vector<std::pair<std::string, cdi::Kind>> keep;
  for (const config::AgentConfig* c : {static_cast<const config::AgentConfig*>(&config_), also}) {
    if (c == nullptr) continue;
    dirs.insert(c->cdi_dir);
    for (const auto& r : c->resources) dirs.insert(r.cdi_dir);
  }
  for (const auto& r : resources_)
    if (r->cdi) keep.emplace_back(r->cdi->dir(), r->cdi->kind());
  cdi::RemoveStale(config_.host_root, dirs, keep);
}

Status Agent::StartServer(Resource& r) {
  StopServing(r);
  const bool watched = r.cfg.registration == RegistrationMode::kPluginWatcher;
  if (watched) {
    // The folder is the kubelet's, which never removes it; watch it for
    // our sockets removed behind our back (made when missing). Removed and
    // made again by someone, it is another folder: watched anew, or later
    // removals of our socket would go unnoticed.
    if (registry_watch_.fd() < 0 || registry_watch_.Gone())
      if (Status st = registry_watch_.Start(config_.plugins_registry_dir); !st.ok()) return st;
  }
  if (UnixSocketIsLive(r.socket_path))
    return FailedPreconditionError(
        StrCat("socket ", r.socket_path, " is served by another process (a second devplugd?)"));
  // gRPC binds a hidden name, which is then renamed into place. gRPC
  // unlinks the path it bound when its server stops, whatever file is there
  // by then; bound at the shared name, that could be another process's
  // live socket. The hidden name is ours alone, and both the kubelet's
  // plugin watcher and our own watches ignore dot files. The shared name is
  // removed by us, and only while it is still the file we bound.
  const std::string bind_path = BindPath(r.socket_path);
  unlink(bind_path.c_str());  // one a killed devplugd left
  r.service = std::make_unique<kubelet::DevicePluginService>(
      r.instance.get(), r.hub.get(), &timers_, config_.call_timeout, config_.prestart_timeout,
      r.releases, r.metrics, r.cdi);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + bind_path, grpc::InsecureServerCredentials());
  builder.RegisterService(r.service.get());
  if (watched) {
    kubelet::RegistrationService::Callbacks cb;
    cb.probed = [probes = r.probes, hub = r.hub.get(), mailbox = mailbox_, i = r.id] {
      // Armed here, on gRPC's thread: the kubelet opens ListAndWatch right
      // after GetInfo, before the main loop could hear of the probe.
      const uint64_t n = probes->fetch_add(1) + 1;
      hub->ExpectKubeletStream(n);
      mailbox->Post({Event::kProbed, i, n, OkStatus(), nullptr});
    };
    cb.status = [mailbox = mailbox_, i = r.id](Status st) {
      mailbox->Post({Event::kKubeletStatus, i, 0, std::move(st), nullptr});
    };
    r.registration = std::make_unique<kubelet::RegistrationService>(r.cfg.name, std::move(cb));
    builder.RegisterService(r.registration.get());
  }
  r.server = builder.BuildAndStart();
  if (!r.server) {
    r.service.reset();
    r.registration.reset();
    if (watch_.Gone()) plugin_dir_lost_ = true;
    return UnavailableError(
        StrCat("cannot serve on ", r.socket_path, " (is the directory writable?)"));
  }
  if (bind_path != r.socket_path && rename(bind_path.c_str(), r.socket_path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    StopServing(r);
    unlink(bind_path.c_str());
    return UnavailableError(StrCat("cannot serve on ", r.socket_path, ": rename: ", why));
  }
  struct stat st;
  if (stat(r.socket_path.c_str(), &st) == 0) r.socket_file = std::make_pair(st.st_dev, st.st_ino);
  spdlog::debug("resource \"{}\": serving on {}", r.cfg.name, r.socket_path);
  return OkStatus();
}

std::string Agent::BindPath(const std::string& socket_path) {
  const size_t slash = socket_path.rfind('/');
  const std::string hidden =
      StrCat(socket_path.substr(0, slash + 1), ".", socket_path.substr(slash + 1), ".bind");
  // sun_path holds 107 bytes: a path too long for the hidden name is bound
  // as it is (gRPC's unlink at stop is then the one left risk).
  return hidden.size() < 108 ? hidden : socket_path;
}

void Agent::Withdraw(Resource& r, bool exiting) {
  const std::optional<std::pair<dev_t, ino_t>> bound = r.socket_file;
  StopServer(r, exiting);
  if (bound) UnlinkIfSame(r.socket_path, *bound);
}

void Agent::StopServer(Resource& r, bool exiting) {
  r.registrar->Stop();
  StopServing(r, exiting);
}

void Agent::StopServing(Resource& r, [[maybe_unused]] bool exiting) {
  r.hub->ExpectKubeletStream(0);
  r.socket_file.reset();
  if (!r.server) return;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
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
    (void)r.server.release();
    (void)r.service.release();
    (void)r.registration.release();
    return;
  }
#endif
  // End our streams first so the kubelet sees a clean end; Shutdown waits
  // for calls in flight up to the deadline.
  r.hub->CloseAll();
  r.service->AbortPending();
  r.server->Shutdown(std::chrono::system_clock::now() + kServerStopGrace);
  r.server.reset();
  r.service.reset();
  r.registration.reset();
}

void Agent::RemoveStaleSockets() {
  std::set<std::string> ours;
  for (const auto& r : resources_) ours.insert(r->socket_path);
  // Both folders, whatever the resources use now: an earlier devplugd may
  // have served through the plugin watcher (its dead socket there would be
  // probed by the kubelet for ever).
  const std::set<std::string> dirs{config_.plugin_dir, config_.plugins_registry_dir};
  for (const std::string& dir : dirs) {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      // Only names devplugd makes by default; a socket nobody answers on.
      const std::string name = e->d_name;
      const std::string path = StrCat(dir, "/", name);
      struct stat st;
      if (!kubelet::IsDefaultSocketName(name) || ours.count(path) ||
          lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || UnixSocketIsLive(path))
        continue;
      if (unlink(path.c_str()) == 0)
        spdlog::info(
            "removed {}, a socket an earlier devplugd left for a resource not "
            "configured now",
            path);
    }
    closedir(d);
  }
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
    if (r->registrar->WithKubelet(kubelet)) continue;
    if (!said) {
      spdlog::info("kubelet.sock created: the kubelet (re)started{}",
                   r->cfg.registration == RegistrationMode::kKubelet
                       ? "; serving and registering again"
                       : "; its plugin watcher finds our sockets by itself");
      // Its pod list may be incomplete for a while: no release meanwhile.
      releases_.OnKubeletRestart(Clock::now());
      metrics_->KubeletRestart();
    }
    said = true;
    r->registrar->OnKubeletRestart();
  }
}

}  // namespace devplug
