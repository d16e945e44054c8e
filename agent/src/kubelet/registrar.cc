#include "kubelet/registrar.h"

#include <algorithm>

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
  }
  return "?";
}

Registrar::Registrar(Names names, Env* env) : names_(std::move(names)), env_(env) {}

Registrar::~Registrar() { CancelPending(); }

void Registrar::Start() {
  backoff_ = milliseconds(0);
  ServeAndRegister();
}

void Registrar::StartAfter(milliseconds delay) {
  if (!Serve()) return;
  state_ = State::kRetryWait;
  retry_at_ = env_->Now() + delay;
}

void Registrar::Stop() {
  CancelPending();
  env_->ExpectStream(0);
  state_ = State::kDown;
  retry_at_.reset();
  socket_check_at_.reset();
}

bool Registrar::Serve() {
  CancelPending();
  socket_check_at_.reset();
  if (Status st = env_->Serve(); !st.ok()) {
    spdlog::error("resource \"{}\": {}", names_.resource, st.message());
    state_ = State::kDown;
    ScheduleRetry(milliseconds(0));
    return false;
  }
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
  retry_at_.reset();
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
  // The kubelet removed our socket and its old streams are gone.
  Start();
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
  cancel_ = nullptr;
  state_ = State::kRetryWait;
  retry_at_ = env_->Now() + kStreamLostDelay;
  spdlog::warn("resource \"{}\": the kubelet closed ListAndWatch; registering again in {} ms",
               names_.resource, kStreamLostDelay.count());
}

void Registrar::OnTimer() {
  const auto now = env_->Now();
  if (socket_check_at_ && *socket_check_at_ <= now) {
    socket_check_at_.reset();
    CheckSocket();
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
  if (retry_at_ && socket_check_at_) return std::min(*retry_at_, *socket_check_at_);
  return retry_at_ ? retry_at_ : socket_check_at_;
}

}  // namespace devplug::kubelet
