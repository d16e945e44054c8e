// inotify watch on the kubelet's device-plugins directory.
//
// The only signal that matters is the creation of kubelet.sock by its exact
// name: the kubelet creates it after wiping the directory on start, so it
// means "serve again and register again". The kubelet's checkpoint file is
// written through a dot-prefixed temp file and a rename; those events are
// ignored. Other names that appear matter to a devplugd that another one
// starts beside (a socket's second name).
//
// Thread safety: not thread-safe; owned by the agent's main loop.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "util/status.h"

namespace devplug::kubelet {

inline constexpr char kKubeletSocketName[] = "kubelet.sock";

class PluginDirWatch {
 public:
  struct Events {
    bool kubelet_socket_created = false;
    bool dir_gone = false;             // the directory was removed or moved
    std::vector<std::string> removed;  // names of removed entries
    std::vector<std::string> created;  // names made or moved in (not kubelet.sock, no dot files)
  };

  PluginDirWatch() = default;
  ~PluginDirWatch();
  PluginDirWatch(const PluginDirWatch&) = delete;
  PluginDirWatch& operator=(const PluginDirWatch&) = delete;

  // Creates the directory if missing and starts watching it.
  Status Start(const std::string& dir);
  int fd() const { return fd_; }
  // Removes the watch (shutdown): the kernel then retires it while the agent
  // stops its servers, instead of in close(), which would wait for that.
  void StopWatching();
  // Reads every pending event (non-blocking).
  Events Drain();
  // Whether the watched directory is no longer at its path (removed, or
  // replaced by another). Needed besides Drain's dir_gone: while any
  // process still has a socket bound in the removed directory (a kubelet not
  // yet stopped), the kernel holds back IN_DELETE_SELF until it closes.
  bool Gone() const;

 private:
  std::string dir_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  int fd_ = -1;
  int wd_ = -1;
};

}  // namespace devplug::kubelet
