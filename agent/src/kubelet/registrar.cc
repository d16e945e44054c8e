#include "kubelet/registrar.h"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

namespace devplug::kubelet {

using std::chrono::milliseconds;

std::string_view Registrar::StateName(State s) {
  switch (s) {
    case State::kDown:
      return "down";
    case State::kWaitingKubelet:
      return "waiting for kubelet";
    case State::kRegistering:
      return "registering";
    case State::kRegistered:
      return "registered";
    case State::kRetryWait:
      return "retrying";
    case State::kStandby:
      return "standing by";
  }
  return "?";
}

Registrar::Registrar(Names names, Env* env, RegistrationMode mode)
    : names_(std::move(names)), env_(env), mode_(mode) {}

Registrar::~Registrar() { CancelPending(); }

void Registrar::Start() {
  backoff_ = milliseconds(0);
  ServeAndRegister();
}

void Registrar::StartAfter(milliseconds delay) {
  // The plugin watcher probes a fresh socket when it sees it: nothing to
  // wait for.
  if (Watched()) return Start();
  if (!Serve()) return;
  state_ = State::kRetryWait;
  retry_at_ = env_->Now() + delay;
}

void Registrar::SetSocket(std::string socket, std::string socket_path) {
  names_.socket = std::move(socket);
  names_.socket_path = std::move(socket_path);
}

void Registrar::OnPeerSocketCreated() {
  if (env_->Streamless()) return CheckPeer();
  if (!env_->Superseded().empty()) newer_seen_ = true;
}

void Registrar::CheckPeer() {
  const std::string newer = env_->Superseded();
  peer_check_at_.reset();
  if (!newer.empty()) peer_check_at_ = env_->Now() + kStandbyCheck;
  if (superseded_ == !newer.empty()) return;
  superseded_ = !newer.empty();
  if (superseded_)
    spdlog::info(
        "resource \"{}\": a newer devplugd serves it on {}; it has the kubelet's calls and "
        "the slices while it does",
        names_.resource, newer);
  else
    spdlog::info("resource \"{}\": the newer devplugd beside us is gone; serving alone again",
                 names_.resource);
  env_->SetSuperseded(superseded_);
}

bool Registrar::StandBy() {
  const std::string newer = env_->Superseded();
  if (!newer.empty()) {
    newer_seen_ = true;
    if (!std::exchange(newer_told_, true))
      spdlog::info(
          "resource \"{}\": a newer devplugd serves it on {}; standing by (not registering) "
          "while it does",
          names_.resource, newer);
  } else {
    newer_told_ = false;
    if (!std::exchange(newer_seen_, false)) return false;
    // Seen, and its socket gone now: a kubelet restart removed every
    // socket and it serves again in a moment, or it ended. One look later
    // tells.
    spdlog::info(
        "resource \"{}\": the newer devplugd that served it is not serving now; looking again in "
        "{} ms before registering",
        names_.resource, kStandbyCheck.count());
  }
  CancelPending();
  env_->ExpectStream(0);
  state_ = State::kStandby;
  if (Watched())
    reprobe_at_ = env_->Now() + kStandbyCheck;
  else
    retry_at_ = env_->Now() + kStandbyCheck;
  return true;
}

void Registrar::Stop() {
  CancelPending();
  env_->ExpectStream(0);
  state_ = State::kDown;
  retry_at_.reset();
  socket_check_at_.reset();
  reprobe_at_.reset();
  probe_due_.reset();
}

bool Registrar::Serve() {
  CancelPending();
  socket_check_at_.reset();
  if (Status st = env_->Serve(); !st.ok()) {
    spdlog::error("resource \"{}\": {}", names_.resource, st.message());
    // Status shows why it does not serve, not only the log.
    last_error_ = std::string(st.message());
    serve_failed_ = true;
    state_ = State::kDown;
    ScheduleRetry(milliseconds(0));
    return false;
  }
  if (serve_failed_) last_error_.clear();
  serve_failed_ = false;
  // A fresh socket: what the kubelet said about the previous one is past.
  if (Watched()) kubelet_status_.reset();
  candidate_probe_ = 0;
  return true;
}

void Registrar::CancelPending() {
  if (!cancel_) return;
  cancel_();
  cancel_ = nullptr;
}

// A fresh socket, then Register (or a retry later when serving failed).
void Registrar::ServeAndRegister() {
  if (!Serve()) return;
  Register();
}

void Registrar::Register() {
  if (Watched()) return AwaitProbe();
  retry_at_.reset();
  if (StandBy()) return;
  pending_kubelet_ = env_->Kubelet();
  if (!pending_kubelet_) {
    if (state_ != State::kWaitingKubelet)
      spdlog::info("resource \"{}\": waiting for {} to appear", names_.resource,
                   names_.kubelet_socket);
    state_ = State::kWaitingKubelet;
    return;
  }
  state_ = State::kRegistering;
  const uint64_t n = ++registration_;
  // Armed before the call: the kubelet may open its stream before Register
  // returns.
  env_->ExpectStream(n);
  cancel_ = env_->Register(n);
}

void Registrar::ScheduleRetry(milliseconds min_delay) {
  backoff_ = std::clamp(backoff_ * 2, kMinBackoff, kMaxBackoff);
  if (state_ != State::kDown) state_ = State::kRetryWait;
  retry_at_ = env_->Now() + std::max(min_delay, backoff_);
}

bool Registrar::WithKubelet(const std::optional<KubeletId>& kubelet) const {
  return kubelet && ((state_ == State::kRegistered && registered_kubelet_ == kubelet) ||
                     (state_ == State::kRegistering && pending_kubelet_ == kubelet));
}

void Registrar::OnKubeletRestart() {
  if (Watched()) {
    // plugins_registry is left alone: the new kubelet's watcher walks it
    // and probes our socket.
    if (state_ != State::kDown && !probe_due_) probe_due_ = env_->Now() + kProbeTimeout;
    return;
  }
  // The kubelet removed our socket and its old streams are gone.
  Start();
}

void Registrar::AwaitProbe() {
  retry_at_.reset();
  reprobe_at_.reset();
  if (state_ != State::kWaitingKubelet)
    spdlog::info("resource \"{}\": serving {}; waiting for the kubelet's plugin watcher",
                 names_.resource, names_.socket_path);
  state_ = State::kWaitingKubelet;
  probe_due_ = env_->Now() + kProbeTimeout;
}

void Registrar::OnProbed(uint64_t n) {
  if (!Watched() || state_ == State::kDown || n <= registration_) return;
  if (state_ == State::kRegistered) {
    // Anyone who can reach the socket may call GetInfo (an operator's
    // grpcurl, a socket checker). While the kubelet's stream runs, a probe
    // counts only once the kubelet confirms it (NotifyRegistrationStatus):
    // until then the registration, and the stream whose end matters, stay.
    candidate_probe_ = n;
    spdlog::debug("resource \"{}\": GetInfo while registered; waiting for the kubelet's word",
                  names_.resource);
    return;
  }
  registration_ = n;
  state_ = State::kRegistering;
  pending_kubelet_ = env_->Kubelet();
  reprobe_at_.reset();
  probe_due_.reset();
  spdlog::debug("resource \"{}\": probed by the kubelet's plugin watcher", names_.resource);
}

void Registrar::OnKubeletStatus(const Status& status) {
  if (!Watched()) return;
  kubelet_status_ = status;
  if (state_ == State::kDown) return;
  if (state_ == State::kRegistered && candidate_probe_ != 0) {
    // The kubelet probed again while we counted it registered: its new
    // stream is the one that counts from now on.
    registration_ = std::exchange(candidate_probe_, 0);
    pending_kubelet_ = env_->Kubelet();
    if (!status.ok()) state_ = State::kRegistering;  // handled as a refusal below
  }
  if (status.ok()) {
    if (state_ == State::kRegistered) {
      registered_kubelet_ = pending_kubelet_;
      return;
    }
    if (state_ == State::kWaitingKubelet && reprobe_at_) {
      // The kubelet opens ListAndWatch before it confirms the registration,
      // so the stream may end first: this word is about a registration
      // already lost. The re-probe check decides what comes next.
      spdlog::debug(
          "resource \"{}\": the kubelet confirms a registration whose ListAndWatch already "
          "ended",
          names_.resource);
      return;
    }
    state_ = State::kRegistered;
    registered_kubelet_ = pending_kubelet_;
    spdlog::info(
        "resource \"{}\": registered with the kubelet through its plugin watcher (socket {}{})",
        names_.resource, names_.socket_path,
        failures_ > 0 ? StrCat(", after ", failures_, " refusals") : std::string());
    failures_ = 0;
    registered_since_ = std::chrono::system_clock::now();
    last_error_.clear();
    return;
  }
  last_error_ = StrCat("the kubelet refused the registration: ", status.message());
  state_ = State::kWaitingKubelet;
  // The kubelet probes again by itself, with its own backoff, while the
  // socket is there. One warning, then debug until it works.
  const auto level = failures_++ == 0 ? spdlog::level::warn : spdlog::level::debug;
  spdlog::log(level, "resource \"{}\": {}", names_.resource, last_error_);
}

void Registrar::CheckReprobe() {
  // Probed again, or stopped.
  if (state_ != State::kWaitingKubelet && state_ != State::kStandby) return;
  if (StandBy()) return;
  if (state_ == State::kStandby) {
    // The newer devplugd is gone: serve anew, so the kubelet probes us.
    spdlog::info("resource \"{}\": the newer devplugd is gone; serving {} anew", names_.resource,
                 names_.socket_path);
    state_ = State::kWaitingKubelet;
    if (Serve()) AwaitProbe();
    return;
  }
  const auto kubelet = env_->Kubelet();
  if (kubelet && kubelet == lost_kubelet_ && env_->KubeletAnswers()) {
    // The kubelet that ended our stream still runs: its watcher probes only
    // a socket it sees appear.
    spdlog::warn(
        "resource \"{}\": the kubelet ended ListAndWatch and still runs; serving {} anew so "
        "that its plugin watcher probes it again",
        names_.resource, names_.socket_path);
    if (Serve()) AwaitProbe();
    return;
  }
  // Restarting: the new kubelet finds the socket by itself.
  spdlog::debug("resource \"{}\": the kubelet restarts; its plugin watcher will find {}",
                names_.resource, names_.socket_path);
  probe_due_ = env_->Now() + kProbeTimeout;
}

void Registrar::OnSocketRemoved() {
  if (!env_->HasServer()) return;
  // Events queue up while we work: say only what is true now.
  if (env_->SocketIsOurs()) {
    spdlog::trace("resource \"{}\": an earlier removal of {} (served again since)", names_.resource,
                  names_.socket);
    return;
  }
  if (socket_check_at_) return;
  spdlog::info(
      "resource \"{}\": socket {} was removed; serving it again in {} ms unless the "
      "kubelet restarts",
      names_.resource, names_.socket_path, kSocketSettle.count());
  socket_check_at_ = env_->Now() + kSocketSettle;
}

void Registrar::CheckSocket() {
  if (env_->PluginDirGone()) return;  // removed with its directory: the agent exits
  if (!env_->HasServer() || env_->SocketIsOurs()) return;
  const bool registered = state_ == State::kRegistered || state_ == State::kRegistering;
  if (Watched()) {
    // The kubelet saw the removal and let us go; it probes the new socket.
    if (Serve()) AwaitProbe();
    return;
  }
  // A kubelet restart is under way: its kubelet.sock creation serves us anew.
  if (registered && !WithKubelet(env_->Kubelet())) return;
  // Removed by someone else: the kubelet's stream still runs on the old
  // socket, and a kubelet that restarts later could not reach us. End that
  // stream (stop the server), serve a fresh socket, register once the
  // kubelet has seen the end.
  if (!Serve()) return;
  if (registered) {
    state_ = State::kRetryWait;
    retry_at_ = env_->Now() + kStreamLostDelay;
    spdlog::warn("resource \"{}\": serving {} again; registering again in {} ms", names_.resource,
                 names_.socket_path, kStreamLostDelay.count());
  }
}

bool Registrar::OnRegisterDone(uint64_t n, const Status& status) {
  if (n != registration_ || state_ != State::kRegistering) return false;  // stale
  cancel_ = nullptr;
  if (status.ok()) {
    state_ = State::kRegistered;
    registered_kubelet_ = pending_kubelet_;
    backoff_ = milliseconds(0);
    spdlog::info("resource \"{}\": registered with the kubelet (socket {}{})", names_.resource,
                 names_.socket,
                 failures_ > 0 ? StrCat(", after ", failures_, " failed attempts") : std::string());
    failures_ = 0;
    registered_since_ = std::chrono::system_clock::now();
    last_error_.clear();
    return true;
  }
  last_error_ = StrCat("Register failed: ", StatusCodeName(status.code()), ": ", status.message());
  env_->ExpectStream(0);
  ScheduleRetry(milliseconds(0));
  // The server stays up; only Register is retried. One warning, then the
  // retries at debug level until it works.
  const auto level = failures_++ == 0 ? spdlog::level::warn : spdlog::level::debug;
  spdlog::log(level, "resource \"{}\": Register failed ({}: {}); retrying in {} ms",
              names_.resource, StatusCodeName(status.code()), status.message(), backoff_.count());
  return false;
}

void Registrar::OnStreamEnded(uint64_t n) {
  // Only the end of the stream that belongs to the current registration: the
  // kubelet never reopens ListAndWatch, so without a new registration this
  // resource is gone from the node after its grace period.
  if (n != registration_) return;
  if (state_ != State::kRegistered && state_ != State::kRegistering) return;
  candidate_probe_ = 0;
  if (Watched()) {
    state_ = State::kWaitingKubelet;
    lost_kubelet_ = env_->Kubelet();
    reprobe_at_ = env_->Now() + kReprobeDelay;
    spdlog::warn(
        "resource \"{}\": the kubelet closed ListAndWatch; waiting {} ms for its plugin watcher "
        "to probe again",
        names_.resource, kReprobeDelay.count());
    return;
  }
  cancel_ = nullptr;
  state_ = State::kRetryWait;
  retry_at_ = env_->Now() + kStreamLostDelay;
  spdlog::warn("resource \"{}\": the kubelet closed ListAndWatch; registering again in {} ms",
               names_.resource, kStreamLostDelay.count());
}

void Registrar::OnTimer() {
  const auto now = env_->Now();
  if (peer_check_at_ && *peer_check_at_ <= now) CheckPeer();
  if (socket_check_at_ && *socket_check_at_ <= now) {
    socket_check_at_.reset();
    CheckSocket();
  }
  if (reprobe_at_ && *reprobe_at_ <= now) {
    reprobe_at_.reset();
    CheckReprobe();
  }
  if (probe_due_ && *probe_due_ <= now) {
    probe_due_.reset();
    if (state_ == State::kWaitingKubelet)
      spdlog::warn(
          "resource \"{}\": no probe from the kubelet's plugin watcher for {} s: is the folder of "
          "{} the kubelet's <root-dir>/plugins_registry, and does the kubelet (1.12 or later) "
          "run?",
          names_.resource, kProbeTimeout.count() / 1000, names_.socket_path);
  }
  if (retry_at_ && *retry_at_ <= now) {
    retry_at_.reset();
    // Register again on the same server, unless its socket is gone.
    if (env_->HasServer() && env_->SocketIsOurs())
      Register();
    else
      ServeAndRegister();
  }
}

std::optional<Registrar::Clock::time_point> Registrar::NextDeadline() const {
  std::optional<Clock::time_point> next;
  for (const auto& t : {retry_at_, socket_check_at_, reprobe_at_, probe_due_, peer_check_at_})
    if (t && (!next || *t < *next)) next = t;
  return next;
}

}  // namespace devplug::kubelet
