// Handing devplugd over to a new process without a gap (`devplugctl
// handover`, the package's upgrade under systemd). Part of Agent; runs on
// the main loop.
//
// The old process starts its own command line again (util/handover.h). The
// new one serves beside it the way a rolling update's does (docs/design.md,
// "A new devplugd beside the old one"): second socket names, the newer
// registration, the old one standing by, DRA's pool left alone, the state
// folder's lock passed on. Once the new one says it serves, the old one
// makes it systemd's main process, answers the caller and exits; the new
// one sees its end of the socket pair close, takes the control socket and
// speaks to systemd from then on. If the new one exits first, or does not
// serve in time, the old one stops it and serves on: nothing changed.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "agent.h"
#include "util/handover.h"
#include "util/systemd.h"

namespace devplug {
namespace {

// What a new devplugd gets to serve, past its modules' start_timeout:
// registering with the kubelet, and the DRA plugin watcher's probe.
constexpr std::chrono::seconds kServeAfterStart{30};

std::string Answer(const nlohmann::json& body) { return nlohmann::json{{"handover", body}}.dump(); }

}  // namespace

void Agent::BeginHandover(const std::shared_ptr<ops::ControlCall>& call) {
  std::string refused;
  if (handover_)
    refused = StrCat("a handover to pid ", handover_->pid, " is under way");
  else if (handed_over_)
    refused = "this devplugd has handed over and is stopping";
  else if (getpid() == 1)
    refused =
        "devplugd is its container's first process, whose exit ends the container; a rolling "
        "update of the DaemonSet replaces it instead";
  else if (options_.argv.empty())
    refused = "this devplugd was not given a command line to start again";
  if (!refused.empty()) {
    call->reply.set_value(ops::ErrorJson("no handover: " + refused));
    return;
  }
  StatusOr<handover::Child> child = handover::Spawn(options_.argv);
  if (!child.ok()) {
    call->reply.set_value(ops::ErrorJson(StrCat("no handover: ", child.status().message())));
    return;
  }
  const auto now = Clock::now();
  handover_ = Handover{
      child->pid, child->fd, {}, now, now + config_.start_timeout + kServeAfterStart, call};
  spdlog::info("handover: started {} (pid {}); serving until it serves", options_.argv[0],
               child->pid);
}

void Agent::OnSuccessorReadable() {
  if (!handover_) return;
  const handover::Reading said = handover::Read(handover_->fd, &handover_->buffer);
  if (said.kind == handover::Reading::kReady) {
    CompleteHandover(said.version);
  } else if (said.kind == handover::Reading::kClosed) {
    // It ends without having served: how it ended says why (78: the
    // configuration, which its log names).
    const std::string how = handover::Reap(handover_->pid, /*wait=*/true);
    FailHandover(StrCat("the new devplugd (pid ", handover_->pid, ") ", how,
                        " before it served (its log says why)"));
  }
}

void Agent::FailHandover(const std::string& why) {
  if (!handover_) return;
  Handover h = std::move(*handover_);
  handover_.reset();
  // Still running (it did not serve in time, or we stop): it is stopped,
  // and its own SIGTERM path removes what it served. It is reaped off the
  // main loop.
  if (handover::Reap(h.pid, /*wait=*/false).empty()) {
    kill(h.pid, SIGTERM);
    std::thread([pid = h.pid] { handover::Reap(pid, /*wait=*/true); }).detach();
  }
  close(h.fd);
  spdlog::error("handover failed: {}; this devplugd serves on", why);
  h.call->reply.set_value(ops::ErrorJson(
      StrCat("handover failed: ", why, "; devplugd (pid ", getpid(), ") serves on")));
}

void Agent::CompleteHandover(const std::string& version) {
  Handover h = std::move(*handover_);
  handover_.reset();
  // systemd follows the new process from now on (with NotifyAccess=main
  // only the main process may say so); our exit is then not the service's.
  if (NotifiesManager() && next_watchdog_) sd::Notify("WATCHDOG=1");  // the new one's time starts
  const bool told_systemd =
      NotifiesManager() && sd::HandMainPid(h.pid, std::chrono::milliseconds(5000));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - h.started);
  spdlog::info("handed over to devplugd {} (pid {}) after {} ms{}; exiting", version, h.pid,
               ms.count(), told_systemd ? ", now systemd's main process" : "");
  h.call->reply.set_value(Answer({{"pid", h.pid},
                                  {"version", version},
                                  {"ms", ms.count()},
                                  {"systemd_main_pid", told_systemd},
                                  {"previous_pid", getpid()}}));
  // Our end stays open until the process ends: its closing tells the new
  // one that this one is gone.
  handed_over_ = true;
}

bool Agent::Serving() const {
  if (!started_) return false;
  if (!KubeletSocketIdentity()) return true;  // no kubelet to register with
  for (const auto& r : resources_)
    if (r->instance() && !r->registrar().registered()) return false;
  return true;
}

void Agent::TellPredecessorIfServing() {
  if (predecessor_fd_ < 0 || told_predecessor_ || !Serving()) return;
  told_predecessor_ = true;
  const std::string line = handover::ReadyLine(options_.version);
  if (send(predecessor_fd_, line.data(), line.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(line.size()))
    spdlog::warn("handover: could not tell the devplugd that started this one: {}",
                 std::strerror(errno));
  else
    spdlog::info("handover: serving; told the devplugd that started this one");
}

void Agent::OnPredecessorReadable() {
  if (predecessor_fd_ < 0) return;
  std::string ignored;
  if (handover::Read(predecessor_fd_, &ignored).kind != handover::Reading::kClosed) return;
  close(predecessor_fd_);
  predecessor_fd_ = -1;
  spdlog::info("handover: the devplugd that started this one has exited; this one takes over");
  StartControl();
  if (lock_retry_at_) lock_retry_at_ = Clock::now();  // its lock is free now
  // systemd made this process the service's main one before that exit; its
  // watchdog counts from the old one's last ping, sent just before.
  sd::Notify("READY=1\nSTATUS=" + last_status_ + (next_watchdog_ ? "\nWATCHDOG=1" : ""));
  if (next_watchdog_) next_watchdog_ = Clock::now() + watchdog_interval_;
}

}  // namespace devplug
