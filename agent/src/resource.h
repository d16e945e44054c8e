// One [[resource]]: its module, its module instance (create() under
// start_timeout, retries with backoff, giving up on a module stuck in
// create()), its gRPC server and its registration with the kubelet (it is
// its kubelet::Registrar's Env). What it serves, and how, is its front
// end's (front_end/front_end.h): the device plugin API or DRA, chosen once
// by front_end::Make; Resource itself never asks which. It reaches the
// agent only through Resource::Services.
//
// A reload's new resource is "staged": created and scanned beside the
// running one, not serving, until the reload commits it (Commit).
//
// Thread safety: not thread-safe; the agent's main thread owns it. Other
// threads (gRPC, the module's worker) reach it through the mailbox, by id().
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "config/config.h"
#include "front_end/front_end.h"
#include "kubelet/pod_resources.h"
#include "kubelet/registrar.h"
#include "kubelet/registration_service.h"
#include "lifecycle/release_coordinator.h"
#include "lifecycle/release_tracker.h"
#include "mailbox.h"
#include "modules/loaded_module.h"
#include "modules/module_instance.h"
#include "ops/metrics.h"
#include "ops/status_report.h"
#include "udev/path_watch.h"
#include "util/in_flight.h"
#include "util/status.h"
#include "util/timers.h"

namespace devplug {

class Resource final : private kubelet::Registrar::Env {
 public:
  using Clock = std::chrono::steady_clock;

  // What a resource needs of the agent that holds it; every one outlives
  // the resource.
  class Services {
   public:
    virtual ~Services() = default;
    // The running configuration's agent keys (folders, timeouts).
    virtual const config::AgentConfig& running() const = 0;
    // kubelet.sock: its path, and the one there now (nullopt: none).
    virtual std::string KubeletSocketPath() const = 0;
    virtual std::optional<kubelet::KubeletId> KubeletSocketIdentity() const = 0;
    // The plugin directory was removed: the agent exits (and remembers it).
    virtual bool PluginDirGone() = 0;
    // plugins_registry is watched for our sockets removed behind our back
    // (watched anew when the folder was removed and made again).
    virtual Status WatchRegistry() = 0;
    // Where other threads post what they have to say to the main loop.
    virtual const std::shared_ptr<Mailbox>& mailbox() const = 0;
    // Call deadlines, for every resource's DevicePlugin calls.
    virtual Timers& timers() = 0;
    // The one PodResources client (host->pod_of, release tracking).
    virtual const std::shared_ptr<kubelet::PodResourcesClient>& pods() const = 0;
    // Module path watches; null when inotify could not be had.
    virtual std::shared_ptr<udev::PathWatch> path_watch() const = 0;
    // Register calls in flight: the agent waits for their answers at exit.
    virtual InFlight& registers() = 0;
  };

  // Makes a resource's front end from what the resource gives it.
  using FrontEndFactory =
      std::function<std::unique_ptr<front_end::FrontEnd>(front_end::Context context)>;

  // `metrics`: its series (the agent's registry says whether they are
  // exported yet). `staged`: a reload's, not serving until Commit.
  // `make_front_end`: front_end::Make when not given (a test's fake).
  Resource(Services& services, const config::ResourceConfig& cfg, uint64_t id, size_t index,
           std::shared_ptr<ops::ResourceMetrics> metrics, bool staged = false,
           const FrontEndFactory& make_front_end = {});
  ~Resource() override;
  Resource(const Resource&) = delete;
  Resource& operator=(const Resource&) = delete;

  uint64_t id() const { return id_; }      // unique for the agent's life: how events find it
  size_t index() const { return index_; }  // its place in the configuration (for messages)
  const config::ResourceConfig& cfg() const { return cfg_; }
  // The configured socket's path: the resource's identity across reloads.
  const std::string& socket_path() const { return socket_path_; }
  // The socket it serves on: the configured one, or its second name while
  // another devplugd served the configured one (kubelet::SecondSocketName).
  const std::string& serving_name() const { return on_second_ ? second_name_ : cfg_.socket; }
  const std::string& serving_path() const { return on_second_ ? second_path_ : socket_path_; }
  // The other one: where a devplugd started beside this one serves.
  const std::string& peer_name() const { return on_second_ ? cfg_.socket : second_name_; }
  // Takes the time this devplugd's sockets carry now (at the agent's start).
  static void PinProcessStamp() { (void)ProcessStamp(); }
  bool staged() const { return staged_; }
  const std::shared_ptr<const modules::LoadedModule>& module() const { return module_; }
  // The running instance (null while starting, failed or left out).
  modules::ModuleInstance* instance() const { return instance_.get(); }
  bool starting() const { return starting_ != nullptr; }
  // Why it does not run ("" when it does, or has not tried yet).
  const Status& failure() const { return failure_; }
  kubelet::Registrar& registrar() { return *registrar_; }
  const kubelet::Registrar& registrar() const { return *registrar_; }
  const std::shared_ptr<ops::ResourceMetrics>& metrics() const { return metrics_; }
  const front_end::FrontEnd& front_end() const { return *front_; }
  front_end::FrontEnd& front_end() { return *front_; }
  // Release tracking is on (a module with on_release; pod_resources_poll
  // is not "0s").
  bool tracking() const { return front_->tracking(); }
  // The module's udev subsystems (none before it is loaded).
  std::vector<std::string> Subsystems() const;

  // ---- starting ----
  // dlopen()s its module and checks the resource's keys against it; the
  // front end hears of it (`predecessor`: the running resource a reload
  // re-creates).
  Status LoadModule(const Resource* predecessor = nullptr);
  // Creates the module instance under `cfg` (the running configuration, or
  // a reload's) on its own worker; kCreated tells the main loop how it
  // went. A reload's resource takes over `predecessor`'s hand-outs and
  // release tracker: no release state is lost.
  void Launch(const config::AgentConfig& cfg, const Resource* predecessor = nullptr);
  // kCreated for `launch`: false when it is stale (given up meanwhile).
  // Otherwise the instance runs, or the resource failed: a staged one keeps
  // its failure for the reload, the others are left out (and retried,
  // unless the module found a configuration mistake).
  bool Created(uint64_t launch, Status st);
  // Not running, for `why`; retried with backoff when `retry`.
  void LeaveOut(Status why, bool retry);
  // create() ran past its deadline: the instance is left to its stuck
  // thread, and the resource is not retried (another attempt would strand
  // another thread in the same call).
  void GiveUp();
  // When its next timer is due (a retry, a create() deadline, the
  // registrar's).
  std::optional<Clock::time_point> NextDeadline() const;
  // Runs what is due at `now`. True when a retry is due: the agent loads
  // the module if needed and launches it again.
  bool OnTimer(Clock::time_point now);

  // ---- a reload ----
  // A staged resource serves from now on (its CDI spec replaces the old
  // one's); its registration starts apart.
  void Commit();
  // Unchanged by a reload: only its place in the files changed.
  void Renumber(size_t index, const config::ResourceConfig& cfg);
  // `successor` replaces this resource. Release state it cannot carry on
  // (its module has no on_release, or opted out) is given up, and said so.
  void HandOver(const Resource& successor);
  // See front_end::FrontEnd::Withhold.
  void Withhold(const std::map<std::string, std::string>& held) { front_->Withhold(held); }
  // See front_end::FrontEnd::Drain and Claimed: a DRA resource a reload
  // moved to the device plugin API while claims held its devices stays,
  // registered, for their unprepares.
  void Drain(bool open) { front_->Drain(open); }
  bool draining() const { return front_->draining(); }
  std::map<std::string, std::string> Claimed() const { return front_->Claimed(); }
  // Its device plugin API keeps `claimed` from the kubelet (its draining
  // predecessor's claims hold them); its instance publishes again when
  // that changed.
  void SetClaimed(const std::map<std::string, std::string>& claimed);
  // The running configuration changed: call timeouts, release timings, and
  // tracking on or off. True when a first PodResources List is wanted.
  bool ApplyAgentKeys(const config::AgentConfig& cfg, lifecycle::ReleaseCoordinator& releases);

  // ---- serving ----
  // Stops the registration and the server: the streams end. `exiting`: the
  // process ends next (see StopServing), the server object is not destroyed.
  void StopServer(bool exiting = false);
  // StopServer, then removes the socket file if it is still the one this
  // server bound (never another process's socket at the same name).
  void Withdraw(bool exiting = false);
  // At exit, after Withdraw(true): waits for what its front end runs beside
  // the server (DRA's driver, whose last task deletes this node's slices)
  // until `deadline`; false when something still ran then (it is left to
  // the process's end).
  bool WaitFrontEndStopped(Clock::time_point deadline);
  // Asks its instances (running and starting) to stop; StopModule waits.
  void RequestStop();
  // Waits until `deadline` for its instances to stop; one still stuck in a
  // module call is abandoned (false). `keep`: a stopped instance is kept
  // until the process ends (a call on a connection still open then finds
  // a stopped instance, never a freed one).
  bool StopModule(Clock::time_point deadline, bool keep = false);
  // Where gRPC binds a socket before it is renamed into place.
  static std::string BindPath(const std::string& socket_path);

  // ---- releases ----
  // A PodResources List reaches this tracker (null: none, or it does not
  // take Lists now).
  lifecycle::ReleaseTracker* TrackerForList(bool list_ok) const;
  // The kubelet confirmed a registration (NotifyRegistrationStatus): a DRA
  // resource lists its slices again and writes back what the kubelet
  // wiped at its start.
  void RegistrationConfirmed() { front_->RegistrationConfirmed(); }
  // What the kubelet is told about releases may have changed: publishes
  // again when it did.
  void TrackerChanged(lifecycle::ReleaseCoordinator& releases, Clock::time_point now);
  // `ids` are held by no pod any more: on_release runs for them.
  void Release(const std::vector<std::string>& ids, const PodSnapshot& pods);

  // ---- status ----
  ops::ResourceView View(const std::string& module_dir) const;

 private:
  // kubelet::Registrar::Env
  Clock::time_point Now() const override { return Clock::now(); }
  std::optional<kubelet::KubeletId> Kubelet() const override;
  Status Serve() override;
  bool HasServer() const override { return server_ != nullptr; }
  bool SocketIsOurs() const override;
  bool KubeletAnswers() const override;
  bool PluginDirGone() const override { return services_.PluginDirGone(); }
  void ExpectStream(uint64_t n) override;
  std::function<void()> Register(uint64_t n) override;
  std::string Superseded() const override;
  bool Streamless() const override { return front_->Streamless(); }
  void SetSuperseded(bool superseded) override { front_->SetSuperseded(superseded); }

  // Keeps the socket it serves on, or moves to the other name when another
  // devplugd serves this one (a device plugin only).
  Status PickSocket();
  // When this devplugd started (CLOCK_REALTIME, taken at the first call):
  // the time its sockets carry.
  static timespec ProcessStamp();
  // Ends the streams and stops the server, if one runs.
  void StopServing(bool exiting = false);

  Services& services_;
  const uint64_t id_;
  size_t index_;
  config::ResourceConfig cfg_;
  const std::string socket_path_;
  // Device plugin API: the second name and whether it is the one served.
  const std::string second_name_;
  const std::string second_path_;
  bool on_second_ = false;
  bool staged_;
  std::shared_ptr<const modules::LoadedModule> module_;  // null: not loaded (yet)
  std::shared_ptr<ops::ResourceMetrics> metrics_;
  // The API it serves. It outlives every instance that publishes into it.
  std::unique_ptr<front_end::FrontEnd> front_;

  // ---- the module instance ----
  std::unique_ptr<modules::ModuleInstance> instance_;  // running
  std::unique_ptr<modules::ModuleInstance> starting_;  // create() and first scan under way
  uint64_t launch_ = 0;                                // numbers create attempts
  std::optional<Clock::time_point> start_deadline_;    // for starting_
  Status failure_;
  std::optional<Clock::time_point> start_at_;  // the next retry
  std::chrono::milliseconds start_backoff_{0};
  uint64_t attempts_ = 0;

  // ---- serving ----
  // Plugin watcher: Registration, on the same server.
  std::unique_ptr<kubelet::RegistrationService> registration_;
  // Plugin watcher: numbers the kubelet's probes (its gRPC threads count).
  std::shared_ptr<std::atomic<uint64_t>> probes_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::unique_ptr<grpc::Server> server_;
  std::optional<std::pair<dev_t, ino_t>> socket_file_;  // the file our server bound

  // Last: it cancels a Register in flight through this resource.
  std::unique_ptr<kubelet::Registrar> registrar_;
};

}  // namespace devplug
