// The kubelet simulator's plugin watcher: probe-based registration through
// the plugins_registry folder (pluginregistration v1), as the kubelet's
// plugin manager does it (see kubelet_sim.h for what is reproduced).
#include <dirent.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "kubelet_sim.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace devplug::sim {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The kubelet's deadlines: GetInfo 1 s, NotifyRegistrationStatus 5 s; its
// retry backoff: 500 ms doubling to about 2 min.
constexpr milliseconds kGetInfoDeadline{1000};
constexpr milliseconds kNotifyDeadline{5000};
constexpr milliseconds kMinBackoff{500};
constexpr milliseconds kMaxBackoff{122'000};

bool IsSocket(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// Every socket of the folder whose name does not start with '.'.
std::vector<std::string> Walk(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.' && IsSocket(dir + "/" + e->d_name))
        out.push_back(dir + "/" + e->d_name);
    closedir(d);
  }
  return out;
}

}  // namespace

void KubeletSim::StartWatcher() {
  std::error_code ec;
  std::filesystem::create_directories(options_.plugins_registry, ec);
  watcher_stop_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int stop = watcher_stop_;
  watcher_ = std::thread([this, stop] { WatchRegistry(stop); });
}

void KubeletSim::StopWatcher() {
  if (!watcher_.joinable()) return;
  const uint64_t one = 1;
  if (write(watcher_stop_, &one, sizeof(one)) < 0) {
  }
  watcher_.join();
  close(watcher_stop_);
  watcher_stop_ = -1;
}

void KubeletSim::WatchRegistry(int stop_fd) {
  const std::string& dir = options_.plugins_registry;
  const int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (in < 0 ||
      inotify_add_watch(in, dir.c_str(), IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) < 0) {
    Event(StrCat("kubelet: cannot watch ", dir));
    if (in >= 0) close(in);
    return;
  }
  // The desired state (sockets there, each with the generation it was last
  // created in) and the actual one (registered, and retries).
  uint64_t generation = 0;
  std::map<std::string, uint64_t> desired;
  struct Plugin {
    uint64_t generation = 0;
    std::string name;  // "" while not registered
    Clock::time_point next_try{};
    milliseconds backoff{0};
  };
  std::map<std::string, Plugin> actual;
  for (const std::string& p : Walk(dir)) desired[p] = ++generation;
  Event(StrCat("kubelet: plugin watcher on ", dir, ", ", desired.size(), " socket(s) there"));

  auto next_reconcile = Clock::now();
  for (;;) {
    const auto wait = std::chrono::duration_cast<milliseconds>(next_reconcile - Clock::now());
    pollfd fds[2] = {{stop_fd, POLLIN, 0}, {in, POLLIN, 0}};
    const int n = poll(fds, 2, static_cast<int>(std::max<int64_t>(0, wait.count())));
    if (n > 0 && fds[0].revents) break;
    if (n > 0 && (fds[1].revents & POLLIN)) {
      alignas(inotify_event) char buf[4096];
      for (ssize_t len; (len = read(in, buf, sizeof(buf))) > 0;) {
        for (char* p = buf; p < buf + len;) {
          const auto* ev = reinterpret_cast<const inotify_event*>(p);
          p += sizeof(inotify_event) + ev->len;
          if (ev->len == 0 || ev->name[0] == '.') continue;
          const std::string path = dir + "/" + ev->name;
          if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
            if (IsSocket(path)) desired[path] = ++generation;
          } else if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) {
            desired.erase(path);
          }
        }
      }
    }
    const auto now = Clock::now();
    if (now < next_reconcile) continue;
    next_reconcile = now + options_.reconcile_period;
    // Gone, or created anew since: deregister.
    for (auto it = actual.begin(); it != actual.end();) {
      auto d = desired.find(it->first);
      if (d != desired.end() && d->second == it->second.generation) {
        ++it;
        continue;
      }
      if (!it->second.name.empty()) Deregister(it->first);
      it = actual.erase(it);
    }
    // New, or failed before and due again: probe.
    for (const auto& [path, gen] : desired) {
      Plugin& p = actual[path];
      if (p.generation == gen && (!p.name.empty() || now < p.next_try)) continue;
      if (p.generation != gen) p = Plugin{gen, "", {}, milliseconds(0)};
      p.name = Probe(path);
      if (p.name.empty()) {
        p.backoff = std::clamp(p.backoff * 2, kMinBackoff, kMaxBackoff);
        p.next_try = Clock::now() + p.backoff;
      }
    }
  }
  close(in);
}

std::string KubeletSim::Probe(const std::string& socket) {
  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  // Blocking dial, 10 s, like the kubelet's.
  const auto dial_deadline = std::chrono::system_clock::now() + options_.dial_timeout;
  bool connected = false;
  auto serving = [this] {
    std::lock_guard lock(mu_);
    return serving_;
  };
  while (!connected && std::chrono::system_clock::now() < dial_deadline && serving())
    connected = channel->WaitForConnected(
        std::min(dial_deadline, std::chrono::system_clock::now() + milliseconds(100)));
  if (!connected) {
    Event(StrCat("kubelet: plugin watcher: cannot dial ", socket));
    return {};
  }
  auto stub = pluginregistration::Registration::NewStub(channel);
  pluginregistration::PluginInfo info;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + kGetInfoDeadline);
    grpc::Status st = stub->GetInfo(&ctx, pluginregistration::InfoRequest(), &info);
    if (!st.ok()) {
      Event(
          StrCat("kubelet: plugin watcher: GetInfo at ", socket, " failed: ", st.error_message()));
      return {};
    }
  }
  const std::string& name = info.name();
  if (info.type() != "DRAPlugin") {
    std::lock_guard lock(mu_);
    auto& r = resources_[name];
    r.name = name;
    r.probes++;
  }
  auto notify = [&](bool ok, const std::string& error) {
    pluginregistration::RegistrationStatus status;
    status.set_plugin_registered(ok);
    status.set_error(error);
    pluginregistration::RegistrationStatusResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + kNotifyDeadline);
    grpc::Status st = stub->NotifyRegistrationStatus(&ctx, status, &resp);
    if (!st.ok())
      Event(StrCat("kubelet: plugin watcher: NotifyRegistrationStatus at ", socket,
                   " failed: ", st.error_message()));
  };
  auto refuse = [&](const std::string& why) {
    Event(StrCat("kubelet: plugin watcher: ", socket, ": ", why));
    notify(false, why);
    return std::string();
  };
  if (!options_.refuse_probes.empty())
    return refuse(StrCat("RegisterPlugin error -- plugin registration failed with err: ",
                         options_.refuse_probes));
  if (info.type() == "DRAPlugin") {
    if (std::string why = ProbeDra(socket, info); !why.empty()) return refuse(why);
    notify(true, "");
    return name;
  }
  if (info.type() != "DevicePlugin")
    return refuse(StrCat("RegisterPlugin error -- no handler registered for plugin type: ",
                         info.type(), " at socket ", socket));
  const auto& versions = info.supported_versions();
  if (std::find(versions.begin(), versions.end(), "v1beta1") == versions.end())
    return refuse(StrCat(
        "RegisterPlugin error -- plugin validation failed with err: manager version, v1beta1, "
        "is not among the supported versions of the plugin ",
        name));
  if (!AcceptsResourceName(name))
    return refuse(
        StrCat("RegisterPlugin error -- plugin validation failed with err: invalid name of "
               "device plugin socket: ",
               name));
  // "" means this same socket; anything else is taken as it is.
  const std::string endpoint = info.endpoint().empty() ? socket : info.endpoint();
  if (endpoint.front() != '/')
    Violation(StrCat(name, ": endpoint \"", endpoint,
                     "\" is not an absolute path (the plugin watcher does not join it)"));
  grpc::Status st = Connect(name, endpoint, endpoint, nullptr, kViaPluginsRegistry);
  if (!st.ok())
    return refuse(StrCat("RegisterPlugin error -- plugin registration failed with err: ",
                         st.error_message()));
  notify(true, "");
  return name;
}

std::string KubeletSim::ProbeDra(const std::string& socket,
                                 const pluginregistration::PluginInfo& info) {
  const std::string& name = info.name();
  {
    std::lock_guard lock(mu_);
    auto& d = dra_drivers_[name];
    d.name = name;
    d.probes++;
  }
  // The kubelet's DRA handler takes the newest version it knows.
  const auto& versions = info.supported_versions();
  std::vector<std::string> offered(versions.begin(), versions.end());
  if (std::find(offered.begin(), offered.end(), "v1.DRAPlugin") == offered.end())
    return StrCat(
        "RegisterPlugin error -- plugin validation failed with err: none of the "
        "versions ",
        StrJoin(offered, ","), " of DRA driver ", name, " is supported");
  if (name.empty() || name.size() > 63 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") != std::string::npos)
    return StrCat(
        "RegisterPlugin error -- plugin validation failed with err: invalid DRA driver "
        "name \"",
        name, "\"");
  const std::string& endpoint = info.endpoint();
  if (endpoint.empty() || endpoint.front() != '/') {
    Violation(StrCat(name, ": DRA endpoint \"", endpoint, "\" is not an absolute path"));
    return StrCat("RegisterPlugin error -- invalid endpoint \"", endpoint, "\"");
  }
  auto channel = grpc::CreateChannel("unix:" + endpoint, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + options_.dial_timeout))
    return StrCat("RegisterPlugin error -- cannot dial DRA driver ", name, " at ", endpoint);
  // The health service it offers, the newest the kubelet knows.
  std::string health;
  for (const char* v : {"v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"})
    if (health.empty() && std::find(offered.begin(), offered.end(), v) != offered.end()) health = v;
  {
    std::lock_guard lock(mu_);
    auto& d = dra_drivers_[name];
    d.socket = socket;
    d.endpoint = endpoint;
    d.versions = offered;
    d.registrations++;
    d.registered = true;
    d.health_service = health;
    auto& instances = dra_instances_[name];
    std::erase_if(instances, [&](const DraInstance& i) { return i.socket == socket; });
    instances.push_back({socket, endpoint, channel});
    d.instances = instances.size();
    cv_.notify_all();
  }
  Event(StrCat("kubelet: DRA driver ", name, " registered at ", endpoint,
               health.empty() ? "" : StrCat("; watching its health (", health, ")")));
  if (!health.empty()) WatchDraHealth(name, health, channel);
  return "";
}

std::optional<DraDriverView> KubeletSim::dra_driver(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = dra_drivers_.find(name);
  if (it == dra_drivers_.end()) return std::nullopt;
  return it->second;
}

std::shared_ptr<grpc::Channel> KubeletSim::DraChannel(const std::string& driver,
                                                      grpc::Status* err) const {
  std::lock_guard lock(mu_);
  auto it = dra_instances_.find(driver);
  if (it == dra_instances_.end() || it->second.empty()) {
    *err = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        StrCat("DRA driver ", driver, " is not registered"));
    return nullptr;
  }
  return it->second.back().channel;
}

namespace {
template <typename Request>
void AddClaims(const std::vector<std::array<std::string, 3>>& claims, Request* req) {
  for (const auto& [ns, uid, name] : claims) {
    auto* c = req->add_claims();
    c->set_namespace_(ns);
    c->set_uid(uid);
    c->set_name(name);
  }
}
// The kubelet gives the driver's calls 45 s.
constexpr std::chrono::seconds kDraCallDeadline{45};
}  // namespace

grpc::Status KubeletSim::NodePrepareResources(const std::string& driver,
                                              const std::vector<std::array<std::string, 3>>& claims,
                                              drav1::NodePrepareResourcesResponse* out) {
  grpc::Status err;
  auto channel = DraChannel(driver, &err);
  if (!channel) return err;
  drav1::NodePrepareResourcesRequest req;
  AddClaims(claims, &req);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kDraCallDeadline);
  return drav1::DRAPlugin::NewStub(channel)->NodePrepareResources(&ctx, req, out);
}

grpc::Status KubeletSim::NodeUnprepareResources(
    const std::string& driver, const std::vector<std::array<std::string, 3>>& claims,
    drav1::NodeUnprepareResourcesResponse* out) {
  grpc::Status err;
  auto channel = DraChannel(driver, &err);
  if (!channel) return err;
  drav1::NodeUnprepareResourcesRequest req;
  AddClaims(claims, &req);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kDraCallDeadline);
  return drav1::DRAPlugin::NewStub(channel)->NodeUnprepareResources(&ctx, req, out);
}

}  // namespace devplug::sim
