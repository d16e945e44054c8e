// devplugd's orchestrator: owns one Resource per [[resource]] (resource.h:
// its module, instance, server and registration), the watches and event
// sources they share, and the main loop that routes every fd, timer and
// mailbox event to the one that holds it.
//
// Its rooms:
//   agent.cc           Start, the main loop (fds, timers, STATUS=, watchdog),
//                      PodResources Lists, Shutdown
//   resource.h         class Resource: start, retry, give up, serve, register,
//                      its share of a List; over Resource::Services (the agent)
//   hotplug.h          class Hotplug: the udev filter, which resource hears
//                      which event; the Agent is its Targets
//   reload.h           class Reload: what a new configuration changes, the
//                      reload under way, its commit; agent_reload.cc asks
//   resource_set.h     class ResourceSet: the resources served, and retired
//   mailbox.h          how other threads reach the main loop
//   agent_status.cc    the view ops/status_report.h makes STATUS= and the status
//                      JSON of; control answers
//   agent_handover.cc  handing over to a new devplugd process (devplugctl
//                      handover), and taking over from the one before
// The registration state machine is kubelet::Registrar (kubelet/registrar.h);
// what the kubelet's folders say reaches each registration through
// kubelet::KubeletWatch (kubelet/kubelet_watch.h).
//
// Thread safety: Start(), Run() and the destructor are called from the main
// thread. Other threads (gRPC, module workers) only reach the agent through
// its mailbox, which outlives the agent for callbacks that come late.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api_handoff.h"
#include "config/config.h"
#include "config/config_watch.h"
#include "hotplug.h"
#include "kubelet/kubelet_watch.h"
#include "kubelet/plugin_dir_watch.h"
#include "kubelet/pod_resources.h"
#include "lifecycle/release_coordinator.h"
#include "mailbox.h"
#include "node_labels.h"
#include "ops/control.h"
#include "ops/metrics.h"
#include "ops/status_report.h"
#include "reload.h"
#include "resource.h"
#include "resource_set.h"
#include "util/in_flight.h"
#include "util/instance_lock.h"
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
// At exit, every DRA driver's last work (deleting this node's slices) ends
// within this, counted from when the servers are down (the whole exit
// then stays under a second with an API server that does not answer).
inline constexpr std::chrono::milliseconds kDraStopTimeout{700};
// The nice value every thread takes once a stop begins (util/exit_priority.h).
inline constexpr int kExitNice = -10;

class Agent final : private Hotplug::Targets,
                    private Resource::Services,
                    private kubelet::KubeletWatch::Targets {
 public:
  struct Options {
    std::string version = "unknown";
    // Reads the configuration again (SIGHUP): the same files and command
    // line as at start. Without it a reload is refused.
    std::function<StatusOr<config::AgentConfig>()> reload;
    // The main configuration file, for [agent] watch_config ("" = none: a
    // built-in configuration).
    std::string config_path;
    // The command line this process was started with: a handover starts
    // it again (empty: handovers are refused).
    std::vector<std::string> argv;
    // Started by a devplugd that hands over to this one (util/handover.h):
    // our end of its socket pair, or -1.
    int predecessor_fd = -1;
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

  // Runs until a SIGTERM/SIGINT arrives on `signal_fd` (a signalfd), or a
  // handover is done (a new devplugd serves in this one's place), then
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
  using Event = AgentEvent;

  // The resource with this id (serving, or staged by a reload), or nullptr.
  Resource* ById(uint64_t id);
  std::unique_ptr<Resource> NewResource(const config::ResourceConfig& cfg, size_t index,
                                        bool staged = false);

  // ---- starting resources ----
  void OnCreated(Resource& r, uint64_t launch, Status st);
  // A retry: loads the module if it is not yet, then creates the instance.
  void TryStart(Resource& r);
  // The udev filter after the set of loaded modules changed.
  void UpdateHotplug();
  // Hotplug::Targets
  std::map<uint64_t, std::vector<std::string>> Subscriptions() const override;
  void Deliver(uint64_t id, std::vector<udev::Event> events) override;
  void PathChanged(uint64_t id) override;
  void RescanAll() override;
  // Resource::Services
  const config::AgentConfig& running() const override { return config_; }
  std::string KubeletSocketPath() const override { return kubelet_.SocketPath(); }
  std::optional<KubeletId> KubeletSocketIdentity() const override { return kubelet_.Identity(); }
  bool PluginDirGone() override { return kubelet_.Lost(); }
  Status WatchRegistry() override { return kubelet_.WatchRegistry(); }
  const std::shared_ptr<Mailbox>& mailbox() const override { return mailbox_; }
  Timers& timers() override { return timers_; }
  const std::shared_ptr<kubelet::PodResourcesClient>& pods() const override { return pods_; }
  std::shared_ptr<udev::PathWatch> path_watch() const override { return hotplug_.path_watch(); }
  InFlight& registers() override { return registers_; }

  // ---- the node (agent_node.cc) ----
  // Locks the state folder. Another devplugd holding it (a rolling
  // update): this one serves beside it, and RetryInstanceLock takes the
  // lock once it is gone. A folder that cannot be written only costs a
  // warning.
  Status TakeInstanceLock();
  void RetryInstanceLock(Clock::time_point now);
  // ---- serving and registering ----
  // kubelet::KubeletWatch::Targets
  std::vector<kubelet::KubeletWatch::Registration> Registrations() override;
  void KubeletRestarted(const kubelet::KubeletWatch::Registration& first) override;
  // Sockets an earlier devplugd left behind (killed, or its pod deleted
  // without a clean exit) for resources this configuration does not have:
  // the kubelet's plugin watcher would keep probing them.
  void RemoveStaleSockets();
  // devplugd's CDI specs that no resource of the running configuration
  // writes (`also`: the folders of the configuration before a reload).
  // None while an older devplugd serves beside this one.
  void RemoveStaleSpecs(const config::AgentConfig* also = nullptr);

  // ---- reload (agent_reload.cc) ----
  // `why`: what asked for it, for the log ("SIGHUP").
  void BeginReload(const char* why = "SIGHUP");
  // Checks `next` against what runs and stages it. A resource it moves from
  // the device plugin API to DRA first needs a fresh PodResources List:
  // `holders` null, the List is asked for and the reload waits for it
  // (kReloadHolders); then this runs again with its answer.
  struct HoldersAnswer {
    Status status;
    kubelet::PodSnapshotPtr pods;
  };
  void StageReload(config::AgentConfig next, const HoldersAnswer* holders);
  // watch_config on or off as config_ says.
  void UpdateConfigWatch();
  // The Node label watch on, off or renewed as config_ says (a resource
  // with api = "node-label"; its node, label and credentials).
  void UpdateNodeLabelWatch();
  // The watch saw the Node's label at `value`: a reload when what runs was
  // chosen by another value (or by no Node at all).
  void OnNodeLabel(const std::optional<std::string>& value);
  // Why `next` may not replace the running configuration: it removes a
  // DRA resource or renames its driver while claims are prepared on it, or
  // changes a resource whose DRA side still drains ("" when none does).
  // `plan`: the resources `next` stages.
  std::string OrphanedClaims(const config::AgentConfig& next, const Reload::Plan& plan) const;
  // A draining DRA side's claims changed: its successor withholds what
  // they hold, and once none is left the DRA side goes.
  void UpdateDrains();
  // At start: a resource served through the device plugin API whose DRA
  // form's checkpoint holds claims (an earlier devplugd prepared them)
  // gets a draining DRA side for them.
  void StartDrains();
  // At start: handles events until none of [begin, end) is still in
  // create() or its first scan, or start_timeout passes.
  template <typename It>
  void AwaitCreated(It begin, It end);
  // The resources `next` moves from the device plugin API to DRA.
  std::vector<std::string> MovedToDra(const config::AgentConfig& next) const;
  // Why `next` may not move them ("" when it may): PodResources did not
  // answer, or pods hold their devices through the device plugin API while
  // `next` asks no PodResources Lists (pod_resources_poll "0s"), which
  // would tell when they are gone. Otherwise the devices pods hold go to
  // `*withhold` (resource name -> module ID -> "ns/pod"): the new DRA side
  // leaves them out of its slices until their pods are gone.
  using Withheld = std::map<std::string, std::map<std::string, std::string>>;
  std::string HeldThroughDevicePlugin(const config::AgentConfig& next, const HoldersAnswer& holders,
                                      Withheld* withhold) const;
  // Resources with devices pods hold through the device plugin API since
  // before a move to DRA, or waiting for a first List: what a PodResources
  // List (`pods` when `status` is OK) says of them now.
  void WithholdListed(const Status& status, const kubelet::PodSnapshotPtr& pods);
  void FinishReload();  // when every staged resource is created, or the deadline passed
  // Before the commit of a reload that moves resources from the device
  // plugin API to DRA: starts the hand-off (api_handoff.h) and returns true,
  // or false when there is none to make (no such move, done already, no
  // API server credentials).
  bool StartHandoff();
  // The hand-off ended (kReloadHandoff): the devices the pods it waited
  // for hold are withheld too, and the reload commits.
  void OnHandoff(const Event& ev);
  // A DRA side a reload moved to the device plugin API drains: its
  // hand-off (api_handoff.h, DraHandoff) waits for the claims allocated
  // from its last slices, and its successor registers once it ends
  // (OnDrainHandoff).
  void StartDrainHandoff(Resource& drained);
  void OnDrainHandoff(const Event& ev);
  void FailReload(const std::string& why);
  void CommitReload();
  // config_ is the new configuration: applies what changed since `previous`
  // to every resource.
  void ApplyAgentKeys(const config::AgentConfig& previous);

  // ---- status and metrics ----
  void OnControl(const std::shared_ptr<ops::ControlCall>& call);
  // The control socket, at start and once the devplugd before this one is
  // gone (it served the path until then).
  void StartControl();
  // Whether systemd hears from this process: not while the devplugd that
  // started this one is the service's main process, nor once this one
  // handed over.
  bool NotifiesManager() const { return predecessor_fd_ < 0 && !handed_over_; }
  // What status reports are made of (ops/status_report.h).
  ops::AgentView View() const;

  // ---- handover (agent_handover.cc) ----
  // devplugctl handover: starts options_.argv beside this process; the
  // answer comes once the new one serves (this one then leaves) or fails.
  void BeginHandover(const std::shared_ptr<ops::ControlCall>& call);
  void OnSuccessorReadable();
  void FailHandover(const std::string& why);
  void CompleteHandover(const std::string& version);
  // Serving: every resource whose module runs is registered with the
  // kubelet (with no kubelet there is nothing to register with).
  bool Serving() const;
  // In a process a handover started: tells the one before once this one
  // serves, and takes over when it is gone.
  void TellPredecessorIfServing();
  void OnPredecessorReadable();

  // ---- pod identity and releases ----
  void SchedulePodList(bool now);
  void SendPodListIfDue();
  void OnPodList(const Status& status, const kubelet::PodSnapshotPtr& pods);

  // ---- the main loop ----
  void HandleEvent(const Event& ev);
  void FireTimers();
  int NextTimeoutMs() const;
  void UpdateStatus();

  config::AgentConfig config_;
  const Options options_;
  // One devplugd per node: held from the start to the process's end.
  InstanceLock lock_;
  // Serving beside an older devplugd that holds lock_: when to try again.
  std::optional<Clock::time_point> lock_retry_at_;
  const std::shared_ptr<Mailbox> mailbox_;
  const std::shared_ptr<ops::Metrics> metrics_;
  std::shared_ptr<prometheus::Exposer> exposer_;
  ops::ControlServer control_;
  const std::chrono::system_clock::time_point started_at_ = std::chrono::system_clock::now();
  std::unique_ptr<Reload> reload_;
  // A reload asked for while one was under way (SIGHUP, or the files
  // changed again): what asked, run as soon as that one ends.
  std::optional<const char*> reload_again_;
  // The reload being staged moves these resources to DRA while pods hold
  // some of their devices (HeldThroughDevicePlugin): given to the staged
  // resources before they serve.
  Withheld withhold_at_commit_;
  // A reload waiting for its PodResources List (StageReload).
  std::unique_ptr<config::AgentConfig> reload_waits_;
  // The hand-off the staged reload waits for before it commits, and
  // whether it ended (the reload then commits without another).
  std::unique_ptr<DevicePluginHandoff> handoff_;
  bool handed_off_ = false;
  // The hand-offs of draining DRA sides, by that side's id: while one
  // runs, the side stays (even with no claim) and its successor is not
  // registered. Destroyed before the side is.
  std::map<uint64_t, std::unique_ptr<DraHandoff>> drain_handoffs_;
  std::string reload_error_;  // the last reload's first error ("" after one that worked)
  // One PodResources client for every resource; shared with module workers
  // (pod_of), which may outlive the agent when given up.
  const std::shared_ptr<kubelet::PodResourcesClient> pods_;
  lifecycle::ReleaseCoordinator releases_;
  // Call deadlines; declared before the resources so it outlives them.
  Timers timers_;
  // Serving, and retired while their modules stop.
  ResourceSet resources_;
  // DRA sides a reload moved to the device plugin API while claims were
  // prepared: registered for those claims' unprepares only, beside their
  // successor of the same name (Resource::Drain), until none is left.
  std::vector<std::unique_ptr<Resource>> draining_;
  // The kubelet's folders (its removed device-plugins folder ends Run with
  // kExitPluginDirLost), routed to each resource's registration.
  kubelet::KubeletWatch kubelet_{this};
  ConfigWatch config_watch_;
  // The Node's api_label, watched while a resource takes its API from it;
  // retired watches end on their own and are joined at the end.
  std::unique_ptr<NodeLabelWatch> node_watch_;
  std::vector<std::unique_ptr<NodeLabelWatch>> retired_node_watches_;
  // Uevents and module path watches, routed to the resources (hotplug.h).
  Hotplug hotplug_{this, metrics_};
  uint64_t next_id_ = 1;
  // Register calls whose answer has not come yet; Shutdown waits for them
  // (they come on gRPC's threads).
  InFlight registers_;
  bool started_ = false;  // Start() is done: a resource created now is served at once
  bool shut_down_ = false;
  std::string last_status_;
  // Next safety rescan of every resource (resync_interval); unset if 0.
  std::optional<Clock::time_point> next_resync_;
  // systemd's watchdog: pinged from the main loop at half its interval.
  std::optional<Clock::time_point> next_watchdog_;
  std::chrono::microseconds watchdog_interval_{0};
  // A handover under way: the new process, our end of its socket pair, and
  // the devplugctl call that waits for it.
  struct Handover {
    pid_t pid = -1;
    int fd = -1;
    std::string buffer;
    Clock::time_point started, deadline;
    std::shared_ptr<ops::ControlCall> call;
  };
  std::optional<Handover> handover_;
  bool handed_over_ = false;  // the new process serves: Run ends
  // The devplugd that started this one, while it runs (Options::predecessor_fd).
  int predecessor_fd_ = -1;
  bool told_predecessor_ = false;
};

}  // namespace devplug
