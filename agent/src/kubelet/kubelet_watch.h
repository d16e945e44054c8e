// The kubelet as devplugd sees it on the node, and what it tells each
// registration.
//
// Two folders are watched:
// - the device-plugins folder (plugin_dir). kubelet.sock made anew means the
//   kubelet (re)started: every registration not yet with that very
//   kubelet.sock serves and registers again. A resource's socket removed
//   (the kubelet wipes the folder at start) is served again. The folder
//   itself removed means devplugd must exit (lost()).
// - plugins_registry, once a resource serves there: a socket of ours
//   removed, or the folder, is served again (the kubelet never removes
//   them itself); a socket appearing at the name another devplugd would
//   serve one of ours on (a rolling update) is told to its registrar.
// kubelet.sock's identity (inode and change time) tells one kubelet from
// the next.
//
// Thread safety: not thread-safe; the agent's main thread owns it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kubelet/plugin_dir_watch.h"
#include "kubelet/registrar.h"
#include "model/registration_mode.h"
#include "util/status.h"

namespace devplug::kubelet {

class KubeletWatch {
 public:
  // A registration the watch speaks to.
  struct Registration {
    RegistrationMode mode = RegistrationMode::kKubelet;
    std::string socket;  // its socket's name, in plugin_dir or plugins_registry
    std::string peer;    // the name another devplugd would serve it on beside us
    Registrar* registrar = nullptr;
    bool serving = false;  // its module instance runs: a kubelet restart concerns it
  };
  class Targets {
   public:
    virtual ~Targets() = default;
    // Every registration, now.
    virtual std::vector<Registration> Registrations() = 0;
    // The kubelet (re)started and `first` is the first registration that
    // was not with it yet; called once per new kubelet.sock, before the
    // registrations hear it.
    virtual void KubeletRestarted(const Registration& first) = 0;
  };

  explicit KubeletWatch(Targets* targets) : targets_(targets) {}
  KubeletWatch(const KubeletWatch&) = delete;
  KubeletWatch& operator=(const KubeletWatch&) = delete;

  // Watches plugin_dir (made if missing); plugins_registry is watched from
  // the first WatchRegistry().
  Status Start(const std::string& plugin_dir, const std::string& registry_dir);
  // Stops both watches (the exit).
  void StopWatching();
  int plugin_dir_fd() const { return plugin_dir_.fd(); }
  int registry_fd() const { return registry_.fd(); }
  // Reads what happened in each folder and tells the registrations.
  void DrainPluginDir();
  void DrainRegistry();

  std::string SocketPath() const;
  // kubelet.sock's identity; none while there is no socket there.
  std::optional<KubeletId> Identity() const;
  // The device-plugins folder was removed (or replaced): only a fresh
  // process sees the new one. Checks the folder itself too, since the
  // kernel holds back its removal event while a socket in it is open.
  bool Lost();
  bool lost() const { return lost_; }
  // Watches plugins_registry, unless it already does (a folder removed and
  // made again is another folder: watched anew).
  Status WatchRegistry();

 private:
  void OnKubeletSocketCreated();

  Targets* const targets_;
  std::string plugin_dir_path_, registry_dir_path_;
  PluginDirWatch plugin_dir_;
  PluginDirWatch registry_;
  bool lost_ = false;
};

}  // namespace devplug::kubelet
