#include "kubelet_sim.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <google/protobuf/util/message_differencer.h>

#include "model/kubelet_limits.h"
#include "util/unix_socket.h"

namespace devplug::sim {
namespace {

using kubelet::kKubeletMaxMessageBytes;
using kubelet::kMaxSocketPathBytes;
constexpr char kKubeletSocket[] = "kubelet.sock";
constexpr char kCheckpoint[] = "kubelet_internal_checkpoint";
// The real kubelet sets no deadline on Allocate; the simulator bounds it so
// a hung plugin fails a test instead of hanging it.
constexpr std::chrono::seconds kCallDeadline{30};

grpc::Status Unknown(std::string msg) { return {grpc::StatusCode::UNKNOWN, std::move(msg)}; }

}  // namespace

// The kubelet's own check of a Register's resource name, written apart from
// the agent's (model/kubelet_names.h) so that each checks the other:
// IsExtendedResourceName = not native (it has a '/' and no
// "kubernetes.io/"), and "requests." + name is a qualified name (a DNS-1123
// subdomain prefix of at most 253 characters, a '/', and a name of at most
// 63 characters of [A-Za-z0-9._-] that starts and ends alphanumeric).
bool KubeletSim::AcceptsResourceName(const std::string& name) {
  if (name.find('/') == std::string::npos || name.find("kubernetes.io/") != std::string::npos)
    return false;
  static const std::regex kQualified(
      "([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/"
      "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])");
  std::smatch m;
  const std::string full = "requests." + name;
  return std::regex_match(full, m, kQualified) && m[1].length() <= 253 && m[5].length() <= 63;
}

size_t ResourceView::healthy() const {
  return std::count_if(devices.begin(), devices.end(),
                       [](const v1beta1::Device& d) { return d.health() == "Healthy"; });
}

struct KubeletSim::Endpoint {
  std::string resource;
  std::string path;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
  grpc::ClientContext stream_ctx;
  std::thread reader;
  std::atomic<bool> stopped{false};
};

class KubeletSim::RegistrationService final : public v1beta1::Registration::Service {
 public:
  explicit RegistrationService(KubeletSim* sim) : sim_(sim) {}
  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* req,
                        v1beta1::Empty*) override {
    return sim_->HandleRegister(*req);
  }

 private:
  KubeletSim* const sim_;
};

KubeletSim::KubeletSim(Options options) : options_(std::move(options)) {}

KubeletSim::~KubeletSim() {
  Stop();
  // A checkpoint we wrote into someone else's directory would mislead the
  // next real kubelet that starts there.
  if (checkpoint_ours_ && !options_.owns_dir) unlink((options_.dir + "/" + kCheckpoint).c_str());
}

void KubeletSim::Event(const std::string& line) const {
  if (options_.on_event) options_.on_event(line);
}

void KubeletSim::Violation(const std::string& line) {
  if (!options_.strict) return;
  {
    std::lock_guard lock(mu_);
    violations_.push_back(line);
  }
  Event("VIOLATION: " + line);
}

Status KubeletSim::Start() {
  if (options_.dir.empty()) return InvalidArgumentError("no plugin directory given");
  const std::string kubelet_sock = options_.dir + "/" + kKubeletSocket;
  if (UnixSocketIsLive(kubelet_sock))
    return FailedPreconditionError(
        StrCat("a kubelet already answers on ", kubelet_sock, "; refusing to run beside it"));
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  if (ec) return InternalError(StrCat("cannot create ", options_.dir, ": ", ec.message()));
  const std::string checkpoint = options_.dir + "/" + kCheckpoint;
  if (!checkpoint_ours_)
    checkpoint_ours_ = options_.owns_dir || access(checkpoint.c_str(), F_OK) != 0;
  // Like the kubelet: remove every socket at the top level, then listen.
  int removed = 0;
  if (!options_.owns_dir) {
    // Not ours to wipe.
  } else if (DIR* d = opendir(options_.dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string p = options_.dir + "/" + e->d_name;
      struct stat st;
      if (lstat(p.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && unlink(p.c_str()) == 0) ++removed;
    }
    closedir(d);
  }
  // PodResources first, as on a real node: a plugin that registers and
  // asks who holds a device finds it answering.
  if (!options_.pod_resources_socket.empty()) {
    std::filesystem::create_directories(
        std::filesystem::path(options_.pod_resources_socket).parent_path(), ec);
    pod_service_ = MakePodResourcesService();
    grpc::ServerBuilder pb;
    pb.AddListeningPort("unix:" + options_.pod_resources_socket, grpc::InsecureServerCredentials());
    pb.RegisterService(pod_service_.get());
    pod_server_ = pb.BuildAndStart();
    if (!pod_server_)
      return UnavailableError(StrCat("cannot listen on ", options_.pod_resources_socket));
  }
  service_ = std::make_unique<RegistrationService>(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + options_.dir + "/" + kKubeletSocket,
                           grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_)
    return UnavailableError(StrCat("cannot listen on ", options_.dir, "/", kKubeletSocket));
  {
    std::lock_guard lock(mu_);
    serving_ = true;
  }
  Event(StrCat("kubelet: started, ",
               options_.owns_dir ? StrCat("removed ", removed, " socket(s), ") : std::string(),
               "serving ", kubelet_sock));
  WriteCheckpoint();
  if (!options_.plugins_registry.empty()) StartWatcher();
  return OkStatus();
}

void KubeletSim::Stop() {
  {
    std::lock_guard lock(mu_);
    serving_ = false;
  }
  StopWatcher();
  std::vector<std::string> watched;
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, w] : health_watches_) watched.push_back(name);
  }
  for (const std::string& name : watched) StopDraHealth(name);
  if (pod_server_) {
    pod_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    pod_server_.reset();
    pod_service_.reset();
    unlink(options_.pod_resources_socket.c_str());
  }
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_.reset();
    service_.reset();
    unlink((options_.dir + "/" + kKubeletSocket).c_str());
    Event("kubelet: stopped");
  }
  std::vector<std::shared_ptr<Endpoint>> eps;
  {
    std::lock_guard lock(mu_);
    eps.swap(all_endpoints_);
    endpoints_.clear();
  }
  for (auto& ep : eps) {
    ep->stopped = true;
    ep->stream_ctx.TryCancel();
  }
  for (auto& ep : eps)
    if (ep->reader.joinable()) ep->reader.join();
  std::lock_guard lock(mu_);
  for (auto& [name, r] : resources_) r.connected = false;
  cv_.notify_all();
}

// The plugin watcher saw `socket` go: the kubelet drops its client.
void KubeletSim::Deregister(const std::string& socket) {
  std::vector<std::shared_ptr<Endpoint>> eps;
  {
    std::lock_guard lock(mu_);
    for (auto& [name, ep] : endpoints_)
      if (ep->path == socket) eps.push_back(ep);
  }
  for (auto& ep : eps) {
    Event(StrCat("kubelet: plugin watcher: ", socket, " removed; deregistering ", ep->resource));
    ep->stream_ctx.TryCancel();
  }
  std::vector<std::string> gone;
  {
    std::lock_guard lock(mu_);
    for (auto& [name, d] : dra_drivers_) {
      auto& instances = dra_instances_[name];
      if (std::erase_if(instances, [&](const DraInstance& i) { return i.socket == socket; }) == 0)
        continue;
      d.instances = instances.size();
      if (!instances.empty()) {
        // Another instance of the driver serves (a rolling update).
        d.socket = instances.back().socket;
        d.endpoint = instances.back().endpoint;
        Event(StrCat("kubelet: plugin watcher: ", socket, " removed; DRA driver ", name,
                     " is served at ", d.endpoint));
        continue;
      }
      Event(
          StrCat("kubelet: plugin watcher: ", socket, " removed; deregistering DRA driver ", name));
      d.registered = false;
      gone.push_back(name);
    }
  }
  for (const std::string& name : gone) StopDraHealth(name);
}

void KubeletSim::DropConnections() {
  std::vector<std::shared_ptr<Endpoint>> eps;
  {
    std::lock_guard lock(mu_);
    eps = all_endpoints_;
  }
  for (auto& ep : eps) ep->stream_ctx.TryCancel();
  Event("kubelet: dropped every plugin connection");
}

Status KubeletSim::Restart(std::chrono::milliseconds down) {
  Stop();
  std::this_thread::sleep_for(down);
  return Start();
}

grpc::Status KubeletSim::HandleRegister(const v1beta1::RegisterRequest& req) {
  const std::string& name = req.resource_name();
  if (req.version() != "v1beta1") {
    return Unknown(StrCat("requested API version \"", req.version(),
                          "\" is not supported by kubelet. Supported version is [\"v1beta1\"]"));
  }
  if (!AcceptsResourceName(name))
    return Unknown(StrCat("the ResourceName \"", name, "\" is invalid"));

  // The kubelet joins the endpoint with its directory, unchecked.
  const std::string path = options_.dir + "/" + req.endpoint();
  if (req.endpoint().find('/') != std::string::npos)
    Violation(StrCat(name, ": endpoint \"", req.endpoint(), "\" is not a bare file name"));
  if (path.size() > kMaxSocketPathBytes)
    Violation(
        StrCat(name, ": socket path ", path, " is longer than ", kMaxSocketPathBytes, " bytes"));
  return Connect(name, path, req.endpoint(), &req.options(), kViaKubeletSock);
}

grpc::Status KubeletSim::Connect(const std::string& name, const std::string& path,
                                 const std::string& endpoint,
                                 const v1beta1::DevicePluginOptions* register_options,
                                 const std::string& via) {
  bool stream_open = false;
  std::string open_via, open_endpoint;
  {
    std::lock_guard lock(mu_);
    auto it = resources_.find(name);
    stream_open = it != resources_.end() && it->second.connected;
    if (stream_open) open_via = it->second.via;
    if (stream_open) open_endpoint = it->second.endpoint;
  }
  // The kubelet (1.26 and later) holds one endpoint per socket of a
  // resource and calls the latest: a second socket is a handover (a new
  // devplugd beside the old one); the same socket again, a mistake.
  if (stream_open && open_via != via)
    Violation(StrCat(name, ": registered through ", via, " while registered through ", open_via,
                     " (the kubelet would hold two clients)"));
  else if (stream_open && open_endpoint == endpoint)
    Violation(StrCat(name, ": registered again while its previous ListAndWatch stream was open"));

  auto ep = std::make_shared<Endpoint>();
  ep->resource = name;
  ep->path = path;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(static_cast<int>(kKubeletMaxMessageBytes));
  ep->channel = grpc::CreateCustomChannel("unix:" + path, grpc::InsecureChannelCredentials(), args);
  // Blocking dial, like the kubelet's grpc.DialContext(WithBlock) with 10 s.
  const auto dial_deadline = std::chrono::system_clock::now() + options_.dial_timeout;
  bool connected = false;
  auto serving = [this] {
    std::lock_guard lock(mu_);
    return serving_;
  };
  while (!connected && std::chrono::system_clock::now() < dial_deadline && serving()) {
    connected = ep->channel->WaitForConnected(
        std::min(dial_deadline, std::chrono::system_clock::now() + std::chrono::milliseconds(100)));
  }
  if (!connected) {
    Event(StrCat("kubelet: ", via, " ", name, ": cannot dial ", path));
    return Unknown("failed to dial device plugin: context deadline exceeded");
  }
  ep->stub = v1beta1::DevicePlugin::NewStub(ep->channel);
  v1beta1::DevicePluginOptions opts;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    grpc::Status st = ep->stub->GetDevicePluginOptions(&ctx, v1beta1::Empty(), &opts);
    if (!st.ok()) return Unknown("failed to get device plugin options: " + st.error_message());
  }
  if (register_options &&
      !google::protobuf::util::MessageDifferencer::Equals(opts, *register_options))
    Violation(StrCat(name, ": RegisterRequest.options differ from GetDevicePluginOptions"));

  {
    std::lock_guard lock(mu_);
    if (!serving_) return Unknown("kubelet is shutting down");
    ResourceView& r = resources_[name];
    r.name = name;
    r.endpoint = endpoint;
    r.via = via;
    r.options = opts;
    r.registrations++;
    r.stream_snapshots = 0;
    r.connected = true;
    ++total_registrations_;
    // A new registration replaces the endpoint; the old connection is left
    // to end on its own, as the kubelet does.
    endpoints_[name] = ep;
    all_endpoints_.push_back(ep);
    ep->reader = std::thread([this, ep] { RunStream(ep); });
    cv_.notify_all();
  }
  Event(StrCat("kubelet: registered ", name, " at ", endpoint, " (", via, ")",
               " (preferred allocation: ", opts.get_preferred_allocation_available() ? "yes" : "no",
               ", pre-start: ", opts.pre_start_required() ? "yes" : "no", ")"));
  return grpc::Status::OK;
}

void KubeletSim::RunStream(std::shared_ptr<Endpoint> ep) {
  auto reader = ep->stub->ListAndWatch(&ep->stream_ctx, v1beta1::Empty());
  v1beta1::ListAndWatchResponse msg;
  while (reader->Read(&msg)) {
    CheckSnapshot(ep->resource, msg);
    size_t healthy = 0;
    {
      std::lock_guard lock(mu_);
      auto it = endpoints_.find(ep->resource);
      if (it == endpoints_.end() || it->second != ep) continue;  // replaced
      ResourceView& r = resources_[ep->resource];
      r.devices.assign(msg.devices().begin(), msg.devices().end());
      r.snapshots++;
      r.stream_snapshots++;
      healthy = r.healthy();
      cv_.notify_all();
    }
    Event(StrCat("kubelet: ", ep->resource, ": ", msg.devices_size(), " devices, ", healthy,
                 " healthy"));
    WriteCheckpoint();
  }
  grpc::Status st = reader->Finish();
  {
    std::lock_guard lock(mu_);
    auto it = endpoints_.find(ep->resource);
    if (it != endpoints_.end() && it->second == ep) {
      // Disconnect: every device becomes unhealthy; no reconnect.
      ResourceView& r = resources_[ep->resource];
      r.connected = false;
      r.stream_ends++;
      for (auto& d : r.devices) d.set_health("Unhealthy");
    }
    ep->stopped = true;
    cv_.notify_all();
  }
  Event(StrCat("kubelet: ", ep->resource, ": ListAndWatch ended (",
               st.ok() ? "OK" : st.error_message(), ")"));
}

void KubeletSim::CheckSnapshot(const std::string& name, const v1beta1::ListAndWatchResponse& msg) {
  if (!options_.strict) return;
  std::set<std::string> seen;
  for (const auto& d : msg.devices()) {
    if (d.id().empty()) Violation(name + ": device with an empty ID");
    if (d.id().size() > 63) Violation(StrCat(name, ": device ID \"", d.id(), "\" over 63 chars"));
    if (!seen.insert(d.id()).second)
      Violation(StrCat(name, ": duplicate device ID \"", d.id(), "\""));
    if (d.health() != "Healthy" && d.health() != "Unhealthy")
      Violation(StrCat(name, ": device \"", d.id(), "\" has health \"", d.health(), "\""));
  }
}

void KubeletSim::WriteCheckpoint() {
  if (!options_.checkpoint_noise || !checkpoint_ours_) return;
  std::string body = "{\"Data\":{\"PodDeviceEntries\":null,\"RegisteredDevices\":{";
  uint64_t seq;
  {
    std::lock_guard lock(mu_);
    bool first = true;
    for (const auto& [name, r] : resources_) {
      StrAppend(&body, first ? "" : ",", "\"", name, "\":[");
      first = false;
      bool first_id = true;
      for (const auto& d : r.devices) {
        if (d.health() != "Healthy") continue;
        StrAppend(&body, first_id ? "" : ",", "\"", d.id(), "\"");
        first_id = false;
      }
      body += "]";
    }
    seq = ++checkpoint_seq_;
  }
  body += "}},\"Checksum\":0}\n";
  const std::string tmp = StrCat(options_.dir, "/.", kCheckpoint, ".", seq, ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << body;
  }
  std::rename(tmp.c_str(), (options_.dir + "/" + kCheckpoint).c_str());
}

std::vector<std::string> KubeletSim::resource_names() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, r] : resources_) out.push_back(name);
  return out;
}

std::optional<ResourceView> KubeletSim::resource(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = resources_.find(name);
  if (it == resources_.end()) return std::nullopt;
  return it->second;
}

uint64_t KubeletSim::total_registrations() const {
  std::lock_guard lock(mu_);
  return total_registrations_;
}

std::vector<std::string> KubeletSim::violations() const {
  std::lock_guard lock(mu_);
  return violations_;
}

bool KubeletSim::WaitUntil(
    const std::function<bool(const std::map<std::string, ResourceView>&)>& pred,
    std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return pred(resources_); });
}

bool KubeletSim::WaitForResource(const std::string& name, uint64_t registrations,
                                 std::chrono::milliseconds timeout) const {
  return WaitUntil(
      [&](const std::map<std::string, ResourceView>& rs) {
        auto it = rs.find(name);
        return it != rs.end() && it->second.registrations >= registrations &&
               it->second.connected && it->second.stream_snapshots > 0;
      },
      timeout);
}

std::shared_ptr<KubeletSim::Endpoint> KubeletSim::Current(const std::string& name,
                                                          grpc::Status* err) const {
  std::lock_guard lock(mu_);
  auto it = endpoints_.find(name);
  if (it == endpoints_.end()) {
    *err = Unknown("endpoint not found in cache for a registered resource: " + name);
    return nullptr;
  }
  if (it->second->stopped) {
    *err = Unknown(StrCat("endpoint ", name, " has been stopped"));
    return nullptr;
  }
  return it->second;
}

grpc::Status KubeletSim::Allocate(const std::string& name, const std::vector<std::string>& ids,
                                  v1beta1::ContainerAllocateResponse* out) {
  grpc::Status err;
  auto ep = Current(name, &err);
  if (!ep) return err;
  v1beta1::AllocateRequest req;
  auto* c = req.add_container_requests();
  for (const auto& id : ids) c->add_devices_ids(id);
  v1beta1::AllocateResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  grpc::Status st = ep->stub->Allocate(&ctx, req, &resp);
  if (!st.ok()) return st;
  if (resp.container_responses_size() == 0)
    return Unknown("no containers return in allocation response");
  *out = resp.container_responses(0);
  return grpc::Status::OK;
}

grpc::Status KubeletSim::GetPreferredAllocation(const std::string& name,
                                                const std::vector<std::string>& available,
                                                const std::vector<std::string>& must_include,
                                                int32_t size, std::vector<std::string>* out) {
  grpc::Status err;
  auto ep = Current(name, &err);
  if (!ep) return err;
  v1beta1::PreferredAllocationRequest req;
  auto* c = req.add_container_requests();
  for (const auto& id : available) c->add_available_deviceids(id);
  for (const auto& id : must_include) c->add_must_include_deviceids(id);
  c->set_allocation_size(size);
  v1beta1::PreferredAllocationResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  grpc::Status st = ep->stub->GetPreferredAllocation(&ctx, req, &resp);
  if (!st.ok()) return st;
  out->clear();
  if (resp.container_responses_size() > 0)
    out->assign(resp.container_responses(0).deviceids().begin(),
                resp.container_responses(0).deviceids().end());
  return grpc::Status::OK;
}

grpc::Status KubeletSim::PreStartContainer(const std::string& name,
                                           const std::vector<std::string>& ids) {
  grpc::Status err;
  auto ep = Current(name, &err);
  if (!ep) return err;
  v1beta1::PreStartContainerRequest req;
  for (const auto& id : ids) req.add_devices_ids(id);
  v1beta1::PreStartContainerResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return ep->stub->PreStartContainer(&ctx, req, &resp);
}

}  // namespace devplug::sim
