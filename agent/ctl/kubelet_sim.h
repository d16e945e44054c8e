// A kubelet simulator: the kubelet's side of the device plugin protocol over
// real Unix sockets, for operators without a cluster (devplugctl
// simulate-kubelet, devplugctl demo) and for devplug's own tests.
//
// What it reproduces of the real kubelet (v1beta1, 1.25+):
//  - serves v1beta1.Registration on <dir>/kubelet.sock; with owns_dir it
//    first removes every socket in <dir>, as the kubelet does at start;
//  - Register: checks version and resource name, joins the endpoint with
//    <dir> unchecked, dials it (blocking, 10 s), calls GetDevicePluginOptions,
//    answers, then opens exactly one ListAndWatch and never reopens it;
//  - every ListAndWatch message is a full snapshot; "Healthy" exactly is
//    healthy; a stream end of any kind is a disconnect: devices become
//    unhealthy and calls fail with "endpoint ... has been stopped";
//  - a new Register for a resource replaces its endpoint;
//  - rewrites kubelet_internal_checkpoint through a dot-prefixed temp file
//    and a rename on every update (inotify noise a plugin must ignore);
//  - Allocate with one ContainerAllocateRequest, using container_responses[0];
//  - with pod_resources_socket set (kubelet_sim_pod_resources.cc), the
//    PodResources v1 API on its own socket: List (active pods; a device
//    once per NUMA node it sits on) and GetAllocatableResources (healthy devices), behind the
//    kubelet's token bucket (100 QPS, burst 10; RESOURCE_EXHAUSTED beyond). Tests bind allocated
//    IDs to pods (BindPod) and end pods (DeletePod);
//  - with plugins_registry set, the plugin watcher (kubelet_sim_watcher.cc):
//    the folder walked at start and watched; every second (reconcile) each
//    new socket is probed: dial (10 s), GetInfo (1 s), type "DevicePlugin",
//    "v1beta1" among the versions and an extended resource name, the
//    endpoint "" meaning this socket, then as after Register, and
//    NotifyRegistrationStatus (5 s) with the outcome; failures are probed
//    again with backoff (500 ms doubling to 2 min) while the socket stays; a
//    socket removed deregisters its plugin; a socket created anew at the
//    same path is deregistered and probed again. The folder is never wiped,
//    and a stream that ends is not probed again by itself.
// In strict mode it also records contract violations (see violations()).
//
// Safe beside a real kubelet: it refuses a directory whose kubelet.sock
// accepts connections, and unless it owns the directory (a test's or the
// demo's temporary one) it deletes no socket and writes no checkpoint that it
// did not create (a dead kubelet's kubelet.sock is replaced, as binding
// needs).
//
// Thread safety: all public methods are thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "dra/v1/api.grpc.pb.h"
#include "pluginregistration/v1/api.grpc.pb.h"
#include "podresources/v1/api.grpc.pb.h"
#include "util/status.h"

namespace devplug::sim {

// How a resource came to be registered (ResourceView::via).
inline constexpr char kViaKubeletSock[] = "kubelet.sock";
inline constexpr char kViaPluginsRegistry[] = "plugins_registry";

struct ResourceView {
  std::string name;
  std::string endpoint;                  // as sent in RegisterRequest (plugin watcher: the path)
  std::string via;                       // kViaKubeletSock or kViaPluginsRegistry
  v1beta1::DevicePluginOptions options;  // from GetDevicePluginOptions
  std::vector<v1beta1::Device> devices;  // latest snapshot
  uint64_t snapshots = 0;                // ListAndWatch messages received
  uint64_t stream_snapshots = 0;         // ... on the current stream
  uint64_t registrations = 0;            // successful Register calls
  uint64_t stream_ends = 0;              // ListAndWatch streams that ended
  uint64_t probes = 0;                   // plugin watcher: GetInfo calls made
  bool connected = false;                // ListAndWatch open
  size_t healthy() const;
};

// A DRA driver the plugin watcher registered (type "DRAPlugin").
struct DraDriverView {
  std::string name;      // the driver name
  std::string socket;    // its latest registration socket
  std::string endpoint;  // where that one's DRAPlugin service is
  // Instances registered (1.33+: a rolling update runs two; the calls go
  // to the latest, and back to the one before when it goes).
  size_t instances = 0;
  std::vector<std::string> versions;
  uint64_t probes = 0;
  uint64_t registrations = 0;
  bool registered = false;
  // DRAResourceHealth, when it offers it: the version the kubelet takes
  // (the newest), the messages read, and each device's last health
  // ("Healthy", "Unhealthy", "Unknown") and message, by device name.
  std::string health_service;
  uint64_t health_messages = 0;
  std::map<std::string, std::pair<std::string, std::string>> health;
};

namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;

class KubeletSim {
 public:
  struct Options {
    std::string dir;  // required
    // The directory is the simulator's own (a temporary one): wipe its
    // sockets at every start like the kubelet, write its checkpoint freely.
    bool owns_dir = false;
    std::chrono::milliseconds dial_timeout{10'000};
    // Rewrite kubelet_internal_checkpoint on every update (inotify noise a
    // plugin must ignore); without owns_dir only when no checkpoint existed.
    bool checkpoint_noise = true;
    bool strict = true;
    // Called with a one-line description of everything that happens.
    std::function<void(const std::string&)> on_event;
    // Serves PodResources here ("" = not at all).
    std::string pod_resources_socket;
    double pod_resources_qps = 100;
    int pod_resources_burst = 10;
    // The plugin watcher's folder ("" = no plugin watcher).
    std::string plugins_registry;
    // How often the plugin watcher's reconciler looks (the kubelet: 1 s).
    std::chrono::milliseconds reconcile_period{1000};
    // Fault injection: refuse every probe with this error, as a kubelet
    // whose device manager refuses the plugin does ("" = none).
    std::string refuse_probes;
  };

  explicit KubeletSim(Options options);
  ~KubeletSim();
  KubeletSim(const KubeletSim&) = delete;
  KubeletSim& operator=(const KubeletSim&) = delete;

  // Serves kubelet.sock (after removing every socket, with owns_dir).
  // Fails when a live kubelet answers on kubelet.sock.
  Status Start();
  // The kubelet goes away: kubelet.sock stops answering (and is removed) and
  // every plugin connection is closed.
  void Stop();
  // Closes every plugin connection while kubelet.sock keeps serving (what a
  // plugin sees when the kubelet drops a stream without restarting).
  void DropConnections();
  // Stop, wait `down`, Start: a kubelet restart.
  Status Restart(std::chrono::milliseconds down);

  std::vector<std::string> resource_names() const;
  std::optional<ResourceView> resource(const std::string& name) const;
  uint64_t total_registrations() const;
  // Contract violations seen in strict mode, one line each.
  std::vector<std::string> violations() const;

  // Waits until pred(resources) holds; pred runs under the simulator's lock
  // after every change. False on timeout.
  bool WaitUntil(const std::function<bool(const std::map<std::string, ResourceView>&)>& pred,
                 std::chrono::milliseconds timeout) const;
  // Waits for `name` to have at least `registrations` registrations and a
  // snapshot received on an open stream after the last one.
  bool WaitForResource(const std::string& name, uint64_t registrations,
                       std::chrono::milliseconds timeout) const;

  // Kubelet-side calls on the resource's current connection.
  grpc::Status Allocate(const std::string& name, const std::vector<std::string>& ids,
                        v1beta1::ContainerAllocateResponse* out);
  grpc::Status GetPreferredAllocation(const std::string& name,
                                      const std::vector<std::string>& available,
                                      const std::vector<std::string>& must_include, int32_t size,
                                      std::vector<std::string>* out);
  grpc::Status PreStartContainer(const std::string& name, const std::vector<std::string>& ids);

  // DRA: the drivers the plugin watcher knows, and the kubelet's calls to
  // one (v1), each claim as {namespace, uid, name}.
  std::optional<DraDriverView> dra_driver(const std::string& name) const;
  grpc::Status NodePrepareResources(const std::string& driver,
                                    const std::vector<std::array<std::string, 3>>& claims,
                                    drav1::NodePrepareResourcesResponse* out);
  grpc::Status NodeUnprepareResources(const std::string& driver,
                                      const std::vector<std::array<std::string, 3>>& claims,
                                      drav1::NodeUnprepareResourcesResponse* out);

  // PodResources: the container `container` of pod namespace/name holds
  // `ids` of `resource` (what the kubelet records after Allocate), until
  // DeletePod. Pods survive a simulated kubelet restart.
  void BindPod(const std::string& pod_namespace, const std::string& pod_name,
               const std::string& container, const std::string& resource,
               const std::vector<std::string>& ids);
  void DeletePod(const std::string& pod_namespace, const std::string& pod_name);
  // List calls answered, and those refused by the token bucket.
  uint64_t pod_resources_lists() const;
  uint64_t pod_resources_refused() const;

 private:
  class RegistrationService;
  friend class PodResourcesService;  // kubelet_sim_pod_resources.cc
  struct Endpoint;
  struct PodRecord {
    // container -> resource -> IDs
    std::map<std::string, std::map<std::string, std::vector<std::string>>> containers;
  };
  grpc::Status HandleList(v1::ListPodResourcesResponse* out);
  grpc::Status HandleAllocatable(v1::AllocatableResourcesResponse* out);
  bool TakeToken();
  std::unique_ptr<grpc::Service> MakePodResourcesService();

  // The kubelet's check of a resource name (IsExtendedResourceName).
  static bool AcceptsResourceName(const std::string& name);
  grpc::Status HandleRegister(const v1beta1::RegisterRequest& req);
  // Dials the DevicePlugin service at `path`, asks its options and opens
  // ListAndWatch: what follows a Register and a plugin watcher's probe.
  grpc::Status Connect(const std::string& name, const std::string& path,
                       const std::string& endpoint,
                       const v1beta1::DevicePluginOptions* register_options,
                       const std::string& via);
  // The plugin watcher (kubelet_sim_watcher.cc).
  void StartWatcher();
  void StopWatcher();
  void WatchRegistry(int stop_fd);
  // GetInfo, validation, Connect, NotifyRegistrationStatus; the resource's
  // name, or "" after a failure.
  std::string Probe(const std::string& socket);
  // The DRA handler's part of a probe: validation and a dial; "" when it
  // registered, else why not.
  std::string ProbeDra(const std::string& socket, const pluginregistration::PluginInfo& info);
  std::shared_ptr<grpc::Channel> DraChannel(const std::string& driver, grpc::Status* err) const;
  // Opens the driver's health stream, as the kubelet does after it
  // registered one that offers DRAResourceHealth, and reads it on a thread
  // of its own until it ends.
  void WatchDraHealth(const std::string& driver, const std::string& service,
                      std::shared_ptr<grpc::Channel> channel);
  template <typename Stub, typename Request, typename Response>
  void ReadDraHealth(const std::string& driver, Stub& stub, grpc::ClientContext* ctx);
  struct HealthWatch {
    grpc::ClientContext ctx;
    std::thread thread;
  };
  void StopDraHealth(const std::string& driver);
  void Deregister(const std::string& socket);
  void RunStream(std::shared_ptr<Endpoint> ep);
  void CheckSnapshot(const std::string& name, const v1beta1::ListAndWatchResponse& msg);
  void WriteCheckpoint();
  void Event(const std::string& line) const;
  void Violation(const std::string& line);
  std::shared_ptr<Endpoint> Current(const std::string& name, grpc::Status* err) const;

  const Options options_;
  std::unique_ptr<RegistrationService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Service> pod_service_;
  std::unique_ptr<grpc::Server> pod_server_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, ResourceView> resources_;               // guarded by mu_
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints_;  // guarded by mu_
  std::vector<std::shared_ptr<Endpoint>> all_endpoints_;        // guarded by mu_
  std::vector<std::string> violations_;                         // guarded by mu_
  std::map<std::string, DraDriverView> dra_drivers_;            // guarded by mu_
  struct DraInstance {
    std::string socket, endpoint;
    std::shared_ptr<grpc::Channel> channel;
  };
  // By driver, oldest first.
  std::map<std::string, std::vector<DraInstance>> dra_instances_;  // guarded by mu_
  // The health streams open, by driver.
  std::map<std::string, std::unique_ptr<HealthWatch>> health_watches_;  // guarded by mu_
  uint64_t total_registrations_ = 0;                                    // guarded by mu_
  uint64_t checkpoint_seq_ = 0;                                         // guarded by mu_
  bool serving_ = false;                                                // guarded by mu_
  bool checkpoint_ours_ = false;  // set in Start(): may write (and remove) the checkpoint
  // PodResources, guarded by mu_.
  std::map<std::pair<std::string, std::string>, PodRecord> pods_;
  uint64_t pod_lists_ = 0, pod_refused_ = 0;
  // The plugin watcher's thread and the eventfd that stops it.
  std::thread watcher_;
  int watcher_stop_ = -1;
  double tokens_ = 0;
  std::chrono::steady_clock::time_point tokens_at_{};
};

}  // namespace devplug::sim
