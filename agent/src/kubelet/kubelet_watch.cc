#include "kubelet/kubelet_watch.h"

#include <sys/stat.h>

#include <algorithm>

namespace devplug::kubelet {

Status KubeletWatch::Start(const std::string& plugin_dir, const std::string& registry_dir) {
  plugin_dir_path_ = plugin_dir;
  registry_dir_path_ = registry_dir;
  return plugin_dir_.Start(plugin_dir);
}

void KubeletWatch::StopWatching() {
  plugin_dir_.StopWatching();
  registry_.StopWatching();
}

std::string KubeletWatch::SocketPath() const {
  return StrCat(plugin_dir_path_, "/", kKubeletSocketName);
}

std::optional<KubeletId> KubeletWatch::Identity() const {
  struct stat st;
  if (stat(SocketPath().c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
  return std::make_pair(
      static_cast<uint64_t>(st.st_ino),
      static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec);
}

bool KubeletWatch::Lost() {
  if (plugin_dir_.Gone()) lost_ = true;
  return lost_;
}

Status KubeletWatch::WatchRegistry() {
  if (registry_.fd() >= 0 && !registry_.Gone()) return OkStatus();
  return registry_.Start(registry_dir_path_);
}

void KubeletWatch::DrainPluginDir() {
  const PluginDirWatch::Events ev = plugin_dir_.Drain();
  if (ev.dir_gone) lost_ = true;
  if (lost_) return;
  if (ev.kubelet_socket_created) OnKubeletSocketCreated();
  if (!ev.created.empty())
    for (const Registration& r : targets_->Registrations())
      if (r.mode == RegistrationMode::kKubelet &&
          std::count(ev.created.begin(), ev.created.end(), r.peer) > 0)
        r.registrar->OnPeerSocketCreated();
  if (ev.removed.empty()) return;
  for (const Registration& r : targets_->Registrations())
    if (r.mode == RegistrationMode::kKubelet &&
        std::count(ev.removed.begin(), ev.removed.end(), r.socket) > 0)
      r.registrar->OnSocketRemoved();
}

void KubeletWatch::DrainRegistry() {
  // The folder itself gone: every socket in it is, and each is served
  // again (the next serve watches the folder anew, making it if needed).
  const PluginDirWatch::Events ev = registry_.Drain();
  if (!ev.created.empty())
    for (const Registration& r : targets_->Registrations())
      if (r.mode == RegistrationMode::kPluginWatcher &&
          std::count(ev.created.begin(), ev.created.end(), r.peer) > 0)
        r.registrar->OnPeerSocketCreated();
  if (!ev.dir_gone && ev.removed.empty()) return;
  for (const Registration& r : targets_->Registrations())
    if (r.mode == RegistrationMode::kPluginWatcher &&
        (ev.dir_gone || std::count(ev.removed.begin(), ev.removed.end(), r.socket) > 0))
      r.registrar->OnSocketRemoved();
}

void KubeletWatch::OnKubeletSocketCreated() {
  const std::optional<KubeletId> kubelet = Identity();
  if (!kubelet) return;  // already gone again; its successor will tell us
  bool told = false;
  for (const Registration& r : targets_->Registrations()) {
    if (!r.serving) continue;
    // Already registered, or registering, with this very kubelet: a
    // kubelet.sock that appeared during our own start, or a retry that got
    // there first. Once per kubelet.sock identity.
    if (r.registrar->WithKubelet(kubelet)) continue;
    if (!told) targets_->KubeletRestarted(r);
    told = true;
    r.registrar->OnKubeletRestart();
  }
}

}  // namespace devplug::kubelet
