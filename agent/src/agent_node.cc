// The agent's hold on its node (part of Agent; runs on the main loop): one
// devplugd per node, and what an earlier devplugd left behind (sockets,
// CDI specs) swept at start and after a reload.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>

#include <spdlog/spdlog.h>

#include "agent.h"
#include "cdi/spec_dir.h"
#include "model/kubelet_names.h"
#include "util/unix_socket.h"

namespace devplug {
namespace {

// How long a start waits for the devplugd before it to let go of the
// state folder (a restart: an exit takes about a second at most) before it
// serves beside it.
constexpr std::chrono::milliseconds kInstanceLockWait{1000};
// How often one serving beside an older devplugd tries to take the lock.
constexpr std::chrono::milliseconds kInstanceLockRetry{1000};

}  // namespace

Status Agent::TakeInstanceLock() {
  // One that a handover started knows its predecessor keeps the lock until
  // this one serves.
  auto lock =
      InstanceLock::Take(config_.dra_state_dir,
                         predecessor_fd_ >= 0 ? std::chrono::milliseconds(0) : kInstanceLockWait);
  if (!lock.ok()) {
    spdlog::warn(
        "cannot lock the state folder: {}; a second devplugd on this node would go "
        "unnoticed",
        lock.status().message());
    return OkStatus();
  }
  lock_ = std::move(*lock);
  if (lock_.held()) return OkStatus();
  // A rolling update starts the new devplugd before it stops the old one.
  spdlog::info(
      "another devplugd ({}) holds {}: serving beside it as its successor (it stands by while "
      "this one serves; the CDI specs it may still use are not swept)",
      lock_.holder().empty() ? "its PID unknown" : lock_.holder(), lock_.path());
  lock_retry_at_ = Clock::now() + kInstanceLockRetry;
  return OkStatus();
}

void Agent::RetryInstanceLock(Clock::time_point now) {
  if (!lock_retry_at_ || *lock_retry_at_ > now) return;
  lock_retry_at_.reset();
  if (!lock_.TryTake()) {
    lock_retry_at_ = now + kInstanceLockRetry;
    return;
  }
  spdlog::info("the devplugd this one started beside is gone; this one holds {}", lock_.path());
}

void Agent::RemoveStaleSockets() {
  std::set<std::string> ours;
  for (const auto& r : resources_) ours.insert(r->serving_path());
  // Both folders, whatever the resources use now: an earlier devplugd may
  // have served through the plugin watcher (its dead socket there would be
  // probed by the kubelet for ever).
  const std::set<std::string> dirs{config_.plugin_dir, config_.plugins_registry_dir};
  for (const std::string& dir : dirs) {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      // Only names devplugd makes by default; a socket nobody answers on.
      const std::string name = e->d_name;
      const std::string path = StrCat(dir, "/", name);
      struct stat st;
      if (!kubelet::IsDefaultSocketName(name) || ours.count(path) ||
          lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || UnixSocketIsLive(path))
        continue;
      if (unlink(path.c_str()) == 0)
        spdlog::info(
            "removed {}, a socket an earlier devplugd left for a resource not configured now",
            path);
    }
    closedir(d);
  }
}

void Agent::RemoveStaleSpecs(const config::AgentConfig* also) {
  // An older devplugd serving beside this one still uses its specs.
  if (lock_retry_at_) return;
  std::set<std::string> dirs;
  std::vector<std::pair<std::string, cdi::Kind>> keep;
  for (const config::AgentConfig* c : {static_cast<const config::AgentConfig*>(&config_), also}) {
    if (c == nullptr) continue;
    dirs.insert(c->cdi_dir);
    for (const auto& r : c->resources) dirs.insert(r.cdi_dir);
  }
  // A DRA resource's claim specs too: its driver keeps them with the claims.
  // At start, before its draining DRA side is made, an earlier devplugd's
  // claims' specs too.
  for (const auto& r : resources_) {
    for (auto& spec : r->front_end().Specs()) keep.push_back(std::move(spec));
    if (const auto& dra = r->cfg().dra_form)
      if (auto kind = cdi::KindOf(dra->name); kind.ok()) keep.emplace_back(dra->cdi_dir, *kind);
  }
  for (const auto& r : draining_)
    for (auto& spec : r->front_end().Specs()) keep.push_back(std::move(spec));
  cdi::RemoveStale(config_.host_root, dirs, keep);
}

}  // namespace devplug
