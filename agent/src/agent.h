// devplugd's orchestrator: loads modules, runs one module instance, one gRPC
// server and one kubelet registration per [[resource]], and follows the
// kubelet through restarts.
//
// Thread safety: Start(), Run() and the destructor are called from the main
// thread. Other threads (gRPC, module workers) only reach the agent through
// its event queue.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "config/config.h"
#include "util/status.h"
#include "kubelet/device_plugin_service.h"
#include "kubelet/plugin_dir_watch.h"
#include "kubelet/registration.h"
#include "kubelet/stream_hub.h"
#include "modules/module_instance.h"
#include "udev/udev_monitor.h"
#include "util/timers.h"

namespace devplug {

class Agent {
 public:
  explicit Agent(config::AgentConfig config);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Loads modules, creates instances, starts every resource's server and
  // the first registrations. Fails with INVALID_ARGUMENT for a configuration
  // mistake in a resource's module keys, and otherwise only when a
  // `required` resource fails or the plugin directory cannot be watched;
  // other resource failures (a module that cannot be loaded or created) are
  // logged and that resource is left out.
  Status Start();

  // Runs until a SIGTERM/SIGINT arrives on `signal_fd` (a signalfd), then
  // stops serving and removes the sockets.
  void Run(int signal_fd);

  // Stops every resource (idempotent; also done by the destructor).
  void Shutdown();

 private:
  using Clock = std::chrono::steady_clock;

  enum class State {
    kIdle,            // not serving (failed, or stopped)
    kWaitingKubelet,  // serving; kubelet.sock absent
    kRegistering,     // Register in flight
    kRegistered,      // kubelet accepted us
    kRetryWait,       // waiting for retry_at
  };

  struct Resource {
    config::ResourceConfig cfg;
    std::string socket_path;
    std::shared_ptr<const modules::LoadedModule> module;  // null: failed to load
    // The hub outlives the instance that publishes into it.
    std::unique_ptr<kubelet::StreamHub> hub;
    std::unique_ptr<modules::ModuleInstance> instance;
    std::unique_ptr<kubelet::DevicePluginService> service;
    std::unique_ptr<grpc::Server> server;
    std::shared_ptr<kubelet::PendingRegister> pending;
    uint64_t generation = 0;  // bumped on every server start
    State state = State::kIdle;
    std::optional<Clock::time_point> retry_at;
    std::chrono::milliseconds backoff{0};
    uint64_t registrations = 0;
    // Which kubelet.sock (inode and change time) the pending and the
    // accepted registration went to: a kubelet.sock creation event for the
    // instance we are already registered with changes nothing.
    std::optional<std::pair<uint64_t, int64_t>> pending_kubelet;
    std::optional<std::pair<uint64_t, int64_t>> registered_kubelet;
  };

  struct Event {
    enum Kind { kRegisterDone, kStreamEnded } kind;
    size_t resource;
    uint64_t generation;
    grpc::Status status;
  };

  Status LoadResource(size_t index);
  Status StartResource(size_t index);
  void StartUdevMonitor();
  void DispatchUdevEvents();
  Status StartServer(Resource& r);
  void StopServer(Resource& r);
  void Register(size_t index);
  // A fresh server (socket) and a Register; on failure a retry later.
  void RestartAndRegister(size_t index);
  void ScheduleRetry(Resource& r, std::chrono::milliseconds min_delay);
  void OnKubeletRestart();
  void HandleEvent(const Event& ev);
  void Post(Event ev);
  void FireTimers();
  // Milliseconds until the nearest timer, or -1 for none.
  int NextTimeoutMs() const;
  void UpdateStatus();
  bool KubeletSocketExists() const;
  // (inode, ctime in ns) of the current kubelet.sock, if it is a socket.
  std::optional<std::pair<uint64_t, int64_t>> KubeletSocketIdentity() const;
  std::string KubeletSocketPath() const;

  const config::AgentConfig config_;
  // Call deadlines; declared before the resources so it outlives them.
  Timers timers_;
  std::vector<std::unique_ptr<Resource>> resources_;
  kubelet::PluginDirWatch watch_;
  std::unique_ptr<udev::Monitor> udev_;
  // Subsystem -> indices of the resources whose module declared it.
  std::map<std::string, std::vector<size_t>, std::less<>> udev_subscribers_;
  int event_fd_ = -1;
  std::mutex events_mu_;
  std::vector<Event> events_;  // guarded by events_mu_
  // Register calls whose callback has not run yet; Shutdown waits for them.
  std::mutex register_mu_;
  std::condition_variable register_cv_;
  int registers_in_flight_ = 0;  // guarded by register_mu_
  bool shut_down_ = false;
  std::string last_status_;
  // Next safety rescan of every resource (resync_interval); unset if 0.
  std::optional<Clock::time_point> next_resync_;
  // systemd's watchdog: pinged from the main loop at half its interval.
  std::optional<Clock::time_point> next_watchdog_;
  std::chrono::microseconds watchdog_interval_{0};
};

}  // namespace devplug
