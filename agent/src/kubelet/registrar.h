// One resource's registration with the kubelet: serves its socket, sends
// Register, and follows the kubelet through restarts, ended streams, failed
// Registers and a socket someone else removed.
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
// A newer devplugd serving the same resource on the second socket name (a
// rolling update: the new one starts before the old one stops) has the
// kubelet's calls once it registers, since the kubelet sends them to its
// latest registration. The older one then never registers again while the
// newer one serves (standby); it does when the newer one is gone.
//
// With the plugin watcher (RegistrationMode::kPluginWatcher) there is no
// Register: the socket in plugins_registry serves Registration beside
// DevicePlugin, the kubelet probes it (GetInfo, OnProbed) whenever it sees
// the socket appear, at its own start too, and says how that went
// (NotifyRegistrationStatus, OnKubeletStatus). A kubelet restart costs
// nothing. What the kubelet does not do is probe again after it ended our
// stream while it kept running: then the socket is served anew, which it
// sees as a new plugin.
//
// The registrar acts only through its Env: the agent gives it the gRPC
// server, kubelet.sock and the steady clock; unit tests give fakes.
//
// Thread safety: not thread-safe; the agent's main thread owns it. Register
// answers and stream ends reach it as calls from that thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "model/registration_mode.h"
#include "util/status.h"

namespace devplug::kubelet {

// One kubelet.sock: its inode and change time (ns). A kubelet that starts
// again makes a new one.
using KubeletId = std::pair<uint64_t, int64_t>;

class Registrar {
 public:
  using Clock = std::chrono::steady_clock;

  enum class State {
    kDown,            // not serving (not started, failed, or stopped)
    kWaitingKubelet,  // serving; kubelet.sock absent
    kRegistering,     // Register in flight
    kRegistered,      // kubelet accepted us
    kRetryWait,       // serving or not; Register (and serve) again at the retry time
    kStandby,         // serving; a newer devplugd serves this resource beside us
  };
  static std::string_view StateName(State s);

  // After the kubelet ends our stream without restarting, or after we ended
  // it ourselves to serve on a new socket, wait this long before registering
  // again: a restart's kubelet.sock creation usually arrives first, and a
  // kubelet that is still closing the old connection must not see the new
  // registration before the old stream's end (it would drop the new one).
  static constexpr std::chrono::milliseconds kStreamLostDelay{1000};
  // How long a removed socket may stay removed before we serve it again: a
  // kubelet restart removes it first and creates kubelet.sock next.
  static constexpr std::chrono::milliseconds kSocketSettle{1000};
  // Plugin watcher: how long after our stream ended without a new probe we
  // look whether the same kubelet still runs (then it will not probe again
  // by itself, and the socket is served anew).
  static constexpr std::chrono::milliseconds kReprobeDelay{3000};
  // Plugin watcher: a probe expected this long after serving (or after a
  // kubelet restart) and not come is worth a warning: the kubelet's
  // plugins_registry is likely another folder.
  static constexpr std::chrono::milliseconds kProbeTimeout{30'000};
  // Backoff of Register retries (and of serving again when that failed).
  static constexpr std::chrono::milliseconds kMinBackoff{500};
  static constexpr std::chrono::milliseconds kMaxBackoff{30'000};
  // Standby: how often we look whether the newer devplugd still serves.
  static constexpr std::chrono::milliseconds kStandbyCheck{1000};

  class Env {
   public:
    virtual ~Env() = default;
    virtual Clock::time_point Now() const = 0;
    // The kubelet.sock there now; nullopt when there is none.
    virtual std::optional<KubeletId> Kubelet() const = 0;
    // Stops the server, if one runs, and serves on a fresh socket.
    virtual Status Serve() = 0;
    // A server runs.
    virtual bool HasServer() const = 0;
    // The socket file is the one the running server bound.
    virtual bool SocketIsOurs() const = 0;
    // A process answers on kubelet.sock (the kubelet runs).
    virtual bool KubeletAnswers() const = 0;
    // The plugin directory is gone (the agent exits; nothing to do here).
    virtual bool PluginDirGone() const = 0;
    // Only the kubelet stream of registration `n` counts (0: none).
    virtual void ExpectStream(uint64_t n) = 0;
    // Sends Register number `n`; its answer comes back as OnRegisterDone(n,
    // ...). Returns what cancels it (its answer still comes).
    virtual std::function<void()> Register(uint64_t n) = 0;
    // The socket of a newer devplugd serving this resource; "" when none.
    virtual std::string Superseded() const = 0;
    // The kubelet opens no stream to this resource (DRA): its registration
    // stays as it is beside a newer devplugd's, and SetSuperseded(true)
    // says while the newer one serves (false once it went).
    virtual bool Streamless() const { return false; }
    virtual void SetSuperseded(bool) {}
  };

  // For messages: the resource's name, its socket's name and path, and
  // kubelet.sock's path.
  struct Names {
    std::string resource, socket, socket_path, kubelet_socket;
  };
  // `env` outlives the registrar.
  Registrar(Names names, Env* env, RegistrationMode mode = RegistrationMode::kKubelet);
  ~Registrar();
  Registrar(const Registrar&) = delete;
  Registrar& operator=(const Registrar&) = delete;

  // Serves on a fresh socket and registers (or waits for the kubelet).
  void Start();
  // Serves on a fresh socket now and registers after `delay`: a reload's
  // changed resource, whose predecessor's stream just ended.
  void StartAfter(std::chrono::milliseconds delay);
  // Cancels a Register in flight; the state is down. The agent stops the
  // server itself.
  void Stop();
  // The socket the resource serves now (its second name beside an older
  // devplugd), for messages.
  void SetSocket(std::string socket, std::string socket_path);

  // Registered, or registering, with this very kubelet.sock.
  bool WithKubelet(const std::optional<KubeletId>& kubelet) const;
  // kubelet.sock was created anew: the kubelet removed our socket and ended
  // its streams. Serves again and registers at once.
  void OnKubeletRestart();
  // Our socket's name was removed from the plugin directory.
  void OnSocketRemoved();
  // A socket appeared at the name another devplugd serves this resource on
  // beside us. Remembered when it is newer: after a kubelet restart removed
  // every socket, we then give it a moment to serve again before we
  // register. A streamless resource is superseded at once, and looks every
  // kStandbyCheck whether the newer one still serves.
  void OnPeerSocketCreated();
  // Streamless: a newer devplugd serves the resource beside us.
  bool superseded() const { return superseded_; }
  // The answer to Register number `n`. True when it made us registered.
  bool OnRegisterDone(uint64_t n, const Status& status);
  // The kubelet's ListAndWatch stream of registration `n` ended.
  void OnStreamEnded(uint64_t n);
  // Plugin watcher: someone called GetInfo; its stream will be
  // registration `n` (the service armed the hub already). While registered,
  // only the kubelet's NotifyRegistrationStatus that follows makes it count:
  // a GetInfo from another client changes nothing.
  void OnProbed(uint64_t n);
  // Plugin watcher: the kubelet's NotifyRegistrationStatus for the latest
  // probe: OK, or why it refused us.
  void OnKubeletStatus(const Status& status);
  // Runs what is due at Env::Now().
  void OnTimer();
  // When OnTimer has something to do next; nullopt: nothing.
  std::optional<Clock::time_point> NextDeadline() const;

  State state() const { return state_; }
  bool registered() const { return state_ == State::kRegistered; }
  // The latest Register sent (0: none yet).
  uint64_t registration() const { return registration_; }
  // Since when the kubelet has accepted us (nullopt when not registered).
  std::optional<std::chrono::system_clock::time_point> registered_since() const {
    return registered() ? registered_since_ : std::nullopt;
  }
  // The latest Register failure ("" since one worked).
  const std::string& last_error() const { return last_error_; }
  // Register failures in a row.
  uint64_t failures() const { return failures_; }
  RegistrationMode mode() const { return mode_; }
  // Plugin watcher: what the kubelet said last (nullopt: nothing yet).
  const std::optional<Status>& kubelet_status() const { return kubelet_status_; }

 private:
  // A fresh socket (the Register in flight cancelled); false after a
  // failure, which is retried with backoff.
  bool Serve();
  void ServeAndRegister();
  void Register();
  void CancelPending();
  // Retry with backoff, at `min_delay` at the earliest.
  void ScheduleRetry(std::chrono::milliseconds min_delay);
  void CheckSocket();
  bool Watched() const { return mode_ == RegistrationMode::kPluginWatcher; }
  // Plugin watcher: after our stream ended, whether to serve anew.
  void CheckReprobe();
  // Plugin watcher: serving, waiting for a probe (with its deadline).
  void AwaitProbe();
  // A newer devplugd serves the resource: true, and we stand by.
  bool StandBy();
  // Streamless: whether a newer devplugd serves, told to the Env when that
  // changed; looked at again every kStandbyCheck while it does.
  void CheckPeer();

  // A newer devplugd was seen serving this resource (its socket may be
  // gone for a moment: a kubelet restart), and the log said we stand by.
  bool newer_seen_ = false;
  bool newer_told_ = false;
  Names names_;
  Env* const env_;
  const RegistrationMode mode_;
  State state_ = State::kDown;
  std::function<void()> cancel_;  // the Register in flight
  uint64_t registration_ = 0;
  std::optional<Clock::time_point> retry_at_;
  std::optional<Clock::time_point> socket_check_at_;  // our socket was removed
  std::optional<Clock::time_point> reprobe_at_;       // plugin watcher: stream ended
  std::optional<Clock::time_point> probe_due_;        // plugin watcher: probe expected
  std::optional<Clock::time_point> peer_check_at_;    // streamless and superseded
  bool superseded_ = false;
  std::optional<KubeletId> lost_kubelet_;  // kubelet.sock when the stream ended
  std::optional<Status> kubelet_status_;
  std::chrono::milliseconds backoff_{0};
  uint64_t failures_ = 0;
  std::optional<KubeletId> pending_kubelet_;     // kubelet.sock the pending Register went to
  std::optional<KubeletId> registered_kubelet_;  // ... and the accepted one
  std::optional<std::chrono::system_clock::time_point> registered_since_;
  std::string last_error_;
  bool serve_failed_ = false;  // last_error_ says why serving failed
  // Plugin watcher: a GetInfo that came while registered, counted only
  // once the kubelet's NotifyRegistrationStatus follows (0: none).
  uint64_t candidate_probe_ = 0;
};

}  // namespace devplug::kubelet
