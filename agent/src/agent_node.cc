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
// state folder (an exit takes about a second at most).
constexpr std::chrono::milliseconds kInstanceLockWait{3000};

}  // namespace

Status Agent::TakeInstanceLock() {
  auto lock = InstanceLock::Take(config_.dra_state_dir, kInstanceLockWait);
  if (lock.ok()) {
    lock_ = std::move(*lock);
    return OkStatus();
  }
  if (lock.status().code() == StatusCode::kFailedPrecondition) return lock.status();
  spdlog::warn(
      "cannot lock the state folder: {}; a second devplugd on this node would go "
      "unnoticed",
      lock.status().message());
  return OkStatus();
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
  std::set<std::string> dirs;
  std::vector<std::pair<std::string, cdi::Kind>> keep;
  for (const config::AgentConfig* c : {static_cast<const config::AgentConfig*>(&config_), also}) {
    if (c == nullptr) continue;
    dirs.insert(c->cdi_dir);
    for (const auto& r : c->resources) dirs.insert(r.cdi_dir);
  }
  // A DRA resource's claim specs too: its driver keeps them with the claims.
  for (const auto& r : resources_)
    for (auto& spec : r->front_end().Specs()) keep.push_back(std::move(spec));
  cdi::RemoveStale(config_.host_root, dirs, keep);
}

}  // namespace devplug
