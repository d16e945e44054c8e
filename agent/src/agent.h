// devplugd's orchestrator: loads modules, runs one module instance, one gRPC
// server and one kubelet registration per [[resource]], follows the kubelet
// through restarts, and keeps retrying resources that could not start.
//
// Per resource, the kubelet side moves through these states:
//
//   down ──serve──▶ waiting for kubelet ──kubelet.sock──▶ registering ──OK──▶ registered
//                                                            │  ▲                │
//                                         Register failed ───┘  └── retry_at ◀───┘ our stream
//                                         (server stays up)        (retry wait)     ended
//
// A kubelet restart (kubelet.sock created anew) serves on a fresh socket and
// registers at once; our socket removed by someone else is served again
// (after its stream ended) and registered after a short wait. Only the
// stream that belongs to the current registration counts (see StreamHub).
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

#include "config/config.h"
#include "kubelet/device_plugin_service.h"
#include "kubelet/plugin_dir_watch.h"
#include "kubelet/pod_resources.h"
#include "lifecycle/handed_out.h"
#include "lifecycle/release_tracker.h"
#include "kubelet/registration.h"
#include "kubelet/stream_hub.h"
#include "modules/module_instance.h"
#include "ops/control.h"
#include "ops/metrics.h"
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

class Agent {
 public:
  struct Options {
    std::string version = "unknown";
    // Reads the configuration again (SIGHUP): the same files and command
    // line as at start. Without it a reload is refused.
    std::function<StatusOr<config::AgentConfig>()> reload;
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
  // (contracts/operations.md): resources that did not change keep serving
  // untouched, the others start, stop or restart alone, and a configuration
  // with any mistake changes nothing. Returns the process exit status: 0, or
  // kExitPluginDirLost.
  int Run(int signal_fd);

  // Stops every resource (idempotent; also done by the destructor).
  void Shutdown();

 private:
  using Clock = std::chrono::steady_clock;
  // A kubelet.sock instance: inode and change time (ns).
  using KubeletId = std::pair<uint64_t, int64_t>;

  enum class State {
    kDown,            // not serving (not started, failed, or stopped)
    kWaitingKubelet,  // serving; kubelet.sock absent
    kRegistering,     // Register in flight
    kRegistered,      // kubelet accepted us
    kRetryWait,       // serving; Register again at retry_at
  };

  struct Resource {
    uint64_t id = 0;     // unique for the agent's life: how events find it
    size_t index = 0;    // position in the configuration (for messages)
    config::ResourceConfig cfg;
    std::string socket_path;
    std::shared_ptr<const modules::LoadedModule> module;  // null: not loaded (yet)
    // The hub outlives every instance that publishes into it.
    std::unique_ptr<kubelet::StreamHub> hub;

    // ---- the module instance ----
    std::unique_ptr<modules::ModuleInstance> instance;  // running
    std::unique_ptr<modules::ModuleInstance> starting;  // create() and first scan under way
    uint64_t launch = 0;                                 // numbers create attempts
    std::optional<Clock::time_point> start_deadline;     // for `starting`
    // Why the resource is not running ("" when it is), and its retries.
    Status failure;
    std::optional<Clock::time_point> start_at;
    std::chrono::milliseconds start_backoff{0};
    uint64_t attempts = 0;

    // ---- serving ----
    std::unique_ptr<kubelet::DevicePluginService> service;
    std::unique_ptr<grpc::Server> server;
    std::optional<std::pair<dev_t, ino_t>> socket_file;  // the file our server bound
    std::optional<Clock::time_point> socket_check_at;    // our socket was removed

    std::shared_ptr<ops::ResourceMetrics> metrics;
    // A reload's new resource, not serving until the reload commits.
    bool staged = false;

    // ---- release tracking (a module with on_release; off while
    // pod_resources_poll is 0) ----
    std::shared_ptr<lifecycle::ReleaseTracker> tracker;
    uint64_t tracker_generation = 0;  // of the last published list
    // When each device was last handed out (pod_of); a reload's new
    // instance takes over its predecessor's.
    std::shared_ptr<lifecycle::HandedOut> handed_out;

    // ---- registration ----
    State state = State::kDown;
    std::shared_ptr<kubelet::PendingRegister> pending;
    uint64_t registration = 0;  // number of the latest Register sent
    std::optional<Clock::time_point> retry_at;
    std::chrono::milliseconds backoff{0};
    uint64_t register_failures = 0;  // in a row
    std::optional<KubeletId> pending_kubelet;     // kubelet.sock the pending Register went to
    std::optional<KubeletId> registered_kubelet;  // ... and the accepted one
    std::optional<std::chrono::system_clock::time_point> registered_since;
    std::string last_error;  // the latest Register failure, for the status
  };

  struct Event {
    enum Kind {
      kCreated,         // number: launch
      kRegisterDone,    // number: registration
      kStreamEnded,     // number: registration
      kTrackerChanged,  // an Allocate or a release moved a device
      kPodList,         // a PodResources List finished (resource unused)
      kControl,         // a control socket request (resource unused)
    } kind;
    uint64_t resource;  // Resource::id
    uint64_t number;
    Status status;
    kubelet::PodSnapshotPtr pods;  // kPodList, when it worked
    std::shared_ptr<ops::ControlCall> control = nullptr;  // kControl
  };

  // Where other threads post events; an eventfd wakes the main loop. Shared
  // with every callback, so one that runs after the agent is gone (a given-up
  // module finishing create() at last) finds it closed.
  class Mailbox {
   public:
    Mailbox();
    ~Mailbox();
    int fd() const { return fd_; }
    void Post(Event ev);
    std::vector<Event> Drain();
    void Close();

   private:
    int fd_ = -1;
    std::mutex mu_;
    std::vector<Event> events_;  // guarded by mu_
    bool closed_ = false;        // guarded by mu_
  };

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
  void RebuildUdevMonitor();
  void DispatchUdevEvents(udev::Monitor& monitor);

  // ---- serving and registering ----
  Status StartServer(Resource& r);
  // Ends the streams and stops the server. `exiting`: the process ends next
  // (see Shutdown), the server object is not destroyed.
  void StopServer(Resource& r, bool exiting = false);
  bool SocketIsOurs(const Resource& r) const;
  void ServeAndRegister(Resource& r);
  void Register(Resource& r);
  void ScheduleRegister(Resource& r, std::chrono::milliseconds min_delay);
  void OnKubeletRestart();
  void OnSocketRemoved(Resource& r);
  void CheckSocket(Resource& r);
  bool WithThisKubelet(const Resource& r, const std::optional<KubeletId>& kubelet) const;

  // ---- reload (SIGHUP) ----
  struct PendingReload {
    config::AgentConfig config;
    std::vector<std::unique_ptr<Resource>> staged;  // added and changed, being created
    Clock::time_point deadline;
  };
  void BeginReload();
  void FinishReload();   // when every staged resource is created, or the deadline passed
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
  std::string StatusJson(bool devices, const std::string& only) const;
  void CountPublished(Resource& r, const modules::DeviceList& list);

  // ---- pod identity and releases ----
  void SchedulePodList(bool now);
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
  std::optional<Clock::time_point> next_pod_list_;
  bool pod_list_in_flight_ = false;
  std::optional<Clock::time_point> last_kubelet_restart_;  // since our start
  std::string pods_problem_;  // why tracking waits ("" when Lists work)
  // Call deadlines; declared before the resources so it outlives them.
  Timers timers_;
  std::vector<std::unique_ptr<Resource>> resources_;
  kubelet::PluginDirWatch watch_;
  // The plugin directory was removed: Run ends with kExitPluginDirLost.
  bool plugin_dir_lost_ = false;
  std::unique_ptr<udev::Monitor> udev_;
  // Paths modules watch (host->watch_path); null when inotify failed.
  std::shared_ptr<udev::PathWatch> path_watch_;
  std::vector<std::string> udev_subsystems_;  // the monitor's filter, sorted
  // Subsystem -> ids of the resources whose module declared it.
  std::map<std::string, std::vector<uint64_t>, std::less<>> udev_subscribers_;
  uint64_t next_id_ = 1;
  // Register calls whose callback has not run yet; Shutdown waits for them
  // (their callbacks run on gRPC threads and count down here).
  std::mutex register_mu_;
  std::condition_variable register_cv_;
  int registers_in_flight_ = 0;  // guarded by register_mu_
  bool started_ = false;  // Start() is done: a resource created now is served at once
  bool shut_down_ = false;
  std::string last_status_;
  // Next safety rescan of every resource (resync_interval); unset if 0.
  std::optional<Clock::time_point> next_resync_;
  // systemd's watchdog: pinged from the main loop at half its interval.
  std::optional<Clock::time_point> next_watchdog_;
  std::chrono::microseconds watchdog_interval_{0};
};

}  // namespace devplug
