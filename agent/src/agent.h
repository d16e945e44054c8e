// devplugd's orchestrator: loads modules, runs one module instance, one gRPC
// server and one kubelet registration per [[resource]], follows the kubelet
// through restarts, and keeps retrying resources that could not start.
//
// Its jobs, one file each:
//   agent.cc           Start, the main loop (timers, STATUS=, watchdog), Shutdown
//   mailbox.cc         how other threads reach the main loop
//   resource_start.cc  loading a module, creating its instance, retries, giving up
//   serving.cc         each resource's gRPC server, and what its Registrar acts on
//   (hotplug.h         class Hotplug: the udev filter, which resource hears which
//                      event; the Agent is its Targets)
//   releases.cc        PodResources Lists and the release trackers (ReleaseCoordinator)
//   reload.cc          SIGHUP: stage, check, commit or keep the old configuration
//   agent_status.cc    the view ops/status_report.h makes STATUS= and the status
//                      JSON of; control answers
// The registration state machine is kubelet::Registrar (kubelet/registrar.h).
//
// Thread safety: Start(), Run() and the destructor are called from the main
// thread. Other threads (gRPC, module workers) only reach the agent through
// its mailbox, which outlives the agent for callbacks that come late.
#pragma once

#include <sys/types.h>

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

#include "cdi/resource_cdi.h"
#include "config/config.h"
#include "config/config_watch.h"
#include "hotplug.h"
#include "kubelet/device_plugin_service.h"
#include "kubelet/plugin_dir_watch.h"
#include "kubelet/pod_resources.h"
#include "kubelet/registrar.h"
#include "kubelet/registration.h"
#include "kubelet/registration_service.h"
#include "kubelet/stream_hub.h"
#include "lifecycle/handed_out.h"
#include "lifecycle/release_coordinator.h"
#include "lifecycle/release_tracker.h"
#include "lifecycle/resource_releases.h"
#include "mailbox.h"
#include "modules/module_instance.h"
#include "ops/control.h"
#include "ops/metrics.h"
#include "ops/status_report.h"
#include "udev/path_watch.h"
#include "udev/udev_monitor.h"
#include "util/status.h"
#include "util/timers.h"

namespace prometheus {
class Exposer;
}

namespace devplug {

// Exit status when the plugin directory was removed under us: a fresh
// process (a fresh sandbox under systemd) is the only way to see the new one.
inline constexpr int kExitPluginDirLost = 75;  // EX_TEMPFAIL

// At SIGTERM, module instances get this long (or start_timeout, if shorter)
// to finish a call under way and destroy(); past it they are abandoned and
// the process exits: well inside a pod's 30 s grace period.
inline constexpr std::chrono::milliseconds kStopTimeout{5000};
// The nice value every thread takes once a stop begins (util/exit_priority.h).
inline constexpr int kExitNice = -10;

class Agent final : private Hotplug::Targets {
 public:
  struct Options {
    std::string version = "unknown";
    // Reads the configuration again (SIGHUP): the same files and command
    // line as at start. Without it a reload is refused.
    std::function<StatusOr<config::AgentConfig>()> reload;
    // The main configuration file, for [agent] watch_config ("" = none: a
    // built-in configuration).
    std::string config_path;
  };

  explicit Agent(config::AgentConfig config);
  Agent(config::AgentConfig config, Options options);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Loads modules, creates every instance (in parallel, each within
  // start_timeout), starts every resource's server and the first
  // registrations. Fails with INVALID_ARGUMENT for a configuration mistake in
  // a resource's module keys, and otherwise only when a `required` resource
  // fails or the plugin directory cannot be watched; other resources that
  // fail are logged, left out and retried with backoff.
  Status Start();

  // Runs until a SIGTERM/SIGINT arrives on `signal_fd` (a signalfd), then
  // stops serving and removes the sockets. SIGHUP reloads the configuration
  // (docs/design.md, "Reload, status, metrics"): resources that did not change keep serving
  // untouched, the others start, stop or restart alone, and a configuration
  // with any mistake changes nothing. Returns the process exit status: 0, or
  // kExitPluginDirLost.
  int Run(int signal_fd);

  // Stops every resource (idempotent; also done by the destructor).
  void Shutdown();

 private:
  using Clock = std::chrono::steady_clock;
  using KubeletId = kubelet::KubeletId;

  // One [[resource]]. It is its registrar's Env: the server it serves on and
  // the kubelet.sock it registers with (serving.cc).
  struct Resource final : kubelet::Registrar::Env {
    Resource(Agent* agent, const config::ResourceConfig& cfg, uint64_t id, size_t index);
    ~Resource() override;
    Agent* const agent;
    const uint64_t id;  // unique for the agent's life: how events find it
    size_t index = 0;   // position in the configuration (for messages)
    config::ResourceConfig cfg;
    std::string socket_path;
    std::shared_ptr<const modules::LoadedModule> module;  // null: not loaded (yet)
    // The hub outlives every instance that publishes into it.
    std::unique_ptr<kubelet::StreamHub> hub;

    // ---- the module instance ----
    std::unique_ptr<modules::ModuleInstance> instance;  // running
    std::unique_ptr<modules::ModuleInstance> starting;  // create() and first scan under way
    uint64_t launch = 0;                                // numbers create attempts
    std::optional<Clock::time_point> start_deadline;    // for `starting`
    // Why the resource is not running ("" when it is), and its retries.
    Status failure;
    std::optional<Clock::time_point> start_at;
    std::chrono::milliseconds start_backoff{0};
    uint64_t attempts = 0;

    // ---- serving ----
    std::unique_ptr<kubelet::DevicePluginService> service;
    // Plugin watcher: Registration, on the same server.
    std::unique_ptr<kubelet::RegistrationService> registration;
    // Plugin watcher: numbers the kubelet's probes (its gRPC threads count).
    std::shared_ptr<std::atomic<uint64_t>> probes = std::make_shared<std::atomic<uint64_t>>(0);
    std::unique_ptr<grpc::Server> server;
    std::optional<std::pair<dev_t, ino_t>> socket_file;  // the file our server bound

    std::shared_ptr<ops::ResourceMetrics> metrics;
    // Devices by CDI name (null while cdi is "off"): its spec file.
    std::shared_ptr<cdi::ResourceCdi> cdi;
    // A reload's new resource, not serving until the reload commits.
    bool staged = false;

    // ---- release tracking (a module with on_release; off while
    // pod_resources_poll is 0) ----
    std::shared_ptr<lifecycle::ReleaseTracker> tracker;
    uint64_t tracker_generation = 0;  // of the last published list
    // When each device was last handed out (pod_of); a reload's new
    // instance takes over its predecessor's.
    std::shared_ptr<lifecycle::HandedOut> handed_out;
    // Both, as the instance (ReleaseHooks) and the device plugin service
    // (each Allocate) see them; made at each launch.
    std::shared_ptr<lifecycle::ResourceReleases> releases;

    // ---- registration ----
    std::unique_ptr<kubelet::Registrar> registrar;

    // kubelet::Registrar::Env
    Clock::time_point Now() const override { return Clock::now(); }
    std::optional<KubeletId> Kubelet() const override;
    Status Serve() override;
    bool HasServer() const override { return server != nullptr; }
    bool SocketIsOurs() const override;
    bool KubeletAnswers() const override;
    bool PluginDirGone() const override;
    void ExpectStream(uint64_t n) override;
    std::function<void()> Register(uint64_t n) override;
  };

  using Event = AgentEvent;

  // The resource with this id (serving, or staged by a reload), or nullptr.
  Resource* ById(uint64_t id);
  std::unique_ptr<Resource> NewResource(const config::ResourceConfig& cfg, size_t index,
                                        bool staged = false);

  // ---- starting resources ----
  Status LoadModule(Resource& r);
  // Creates the module instance under `cfg` (the running configuration, or
  // a reload's), taking over `carried` as its release tracker when given.
  void Launch(Resource& r, const config::AgentConfig& cfg,
              std::shared_ptr<lifecycle::ReleaseTracker> carried = nullptr);
  static lifecycle::ReleaseTiming Timing(const config::AgentConfig& c);
  // Release tracking is on for this resource.
  static bool Tracking(const Resource& r);
  void OnCreated(Resource& r, uint64_t launch, Status st);
  void LeaveOut(Resource& r, Status why, bool retry);
  void GiveUp(Resource& r);
  void TryStart(Resource& r);
  // The udev filter after the set of loaded modules changed.
  void UpdateHotplug();
  // Hotplug::Targets
  std::map<uint64_t, std::vector<std::string>> Subscriptions() const override;
  void Deliver(uint64_t id, std::vector<udev::Event> events) override;
  void PathChanged(uint64_t id) override;
  void RescanAll() override;

  // ---- serving and registering ----
  // Stops the registration and the server: the streams end. `exiting`: the
  // process ends next (see Shutdown), the server object is not destroyed.
  void StopServer(Resource& r, bool exiting = false);
  // Ends the streams and stops the server, if one runs.
  void StopServing(Resource& r, bool exiting = false);
  Status StartServer(Resource& r);
  // Where gRPC binds a resource's socket before it is renamed into place.
  static std::string BindPath(const std::string& socket_path);
  // StopServer, then removes the socket file if it is still the one this
  // server bound (never another process's socket at the same name).
  void Withdraw(Resource& r, bool exiting = false);
  void OnKubeletRestart();

  // ---- reload (SIGHUP) ----
  struct PendingReload {
    config::AgentConfig config;
    std::vector<std::unique_ptr<Resource>> staged;  // added and changed, being created
    Clock::time_point deadline;
  };
  // `why`: what asked for it, for the log ("SIGHUP").
  void BeginReload(const char* why = "SIGHUP");
  // watch_config on or off as config_ says.
  void UpdateConfigWatch();
  // Sockets an earlier devplugd left behind (killed, or its pod deleted
  // without a clean exit) for resources this configuration does not have:
  // the kubelet's plugin watcher would keep probing them.
  void RemoveStaleSockets();
  // devplugd's CDI specs that no resource of the running configuration
  // writes (`also`: the folders of the configuration before a reload).
  void RemoveStaleSpecs(const config::AgentConfig* also = nullptr);
  void FinishReload();  // when every staged resource is created, or the deadline passed
  void FailReload(const std::string& why);
  void CommitReload();
  // config_ is the new configuration: applies what changed since `previous`
  // to every resource.
  void ApplyAgentKeys(const config::AgentConfig& previous);
  // Release tracking on or off as pod_resources_poll says, the release
  // timings of config_, and what the kubelet is told about it.
  void ApplyTracking(Resource& r);
  // Stops a resource for good without waiting for its module: a thread
  // waits for it and then frees everything (or leaks it, if it hangs).
  void Retire(std::unique_ptr<Resource> r);

  // ---- status and metrics ----
  void OnControl(const std::shared_ptr<ops::ControlCall>& call);
  // What status reports are made of (ops/status_report.h).
  ops::AgentView View() const;

  // ---- pod identity and releases ----
  void SchedulePodList(bool now);
  void SendPodListIfDue();
  void OnPodList(const Status& status, const kubelet::PodSnapshotPtr& pods);
  void OnTrackerChanged(Resource& r);

  // ---- the main loop ----
  void HandleEvent(const Event& ev);
  void FireTimers();
  int NextTimeoutMs() const;
  void UpdateStatus();
  std::optional<KubeletId> KubeletSocketIdentity() const;
  std::string KubeletSocketPath() const;

  config::AgentConfig config_;
  const Options options_;
  const std::shared_ptr<Mailbox> mailbox_;
  const std::shared_ptr<ops::Metrics> metrics_;
  std::shared_ptr<prometheus::Exposer> exposer_;
  ops::ControlServer control_;
  const std::chrono::system_clock::time_point started_at_ = std::chrono::system_clock::now();
  std::unique_ptr<PendingReload> reload_;
  // A reload asked for while one was under way (SIGHUP, or the files
  // changed again): what asked, run as soon as that one ends.
  std::optional<const char*> reload_again_;
  std::string reload_error_;  // the last reload's first error ("" after one that worked)
  // Retired resources' stop threads; joined (within start_timeout) at shutdown.
  struct Retiring {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Retiring> retiring_;
  // One PodResources client for every resource; shared with module workers
  // (pod_of), which may outlive the agent when given up.
  const std::shared_ptr<kubelet::PodResourcesClient> pods_;
  lifecycle::ReleaseCoordinator releases_;
  // Call deadlines; declared before the resources so it outlives them.
  Timers timers_;
  std::vector<std::unique_ptr<Resource>> resources_;
  kubelet::PluginDirWatch watch_;
  ConfigWatch config_watch_;
  // plugins_registry, watched once a resource serves there.
  kubelet::PluginDirWatch registry_watch_;
  // The plugin directory was removed: Run ends with kExitPluginDirLost.
  bool plugin_dir_lost_ = false;
  // Uevents and module path watches, routed to the resources (hotplug.h).
  Hotplug hotplug_{this, metrics_};
  uint64_t next_id_ = 1;
  // Register calls whose callback has not run yet; Shutdown waits for them
  // (their callbacks run on gRPC threads and count down here).
  std::mutex register_mu_;
  std::condition_variable register_cv_;
  int registers_in_flight_ = 0;  // guarded by register_mu_
  bool started_ = false;         // Start() is done: a resource created now is served at once
  bool shut_down_ = false;
  std::string last_status_;
  // Next safety rescan of every resource (resync_interval); unset if 0.
  std::optional<Clock::time_point> next_resync_;
  // systemd's watchdog: pinged from the main loop at half its interval.
  std::optional<Clock::time_point> next_watchdog_;
  std::chrono::microseconds watchdog_interval_{0};
};

}  // namespace devplug
