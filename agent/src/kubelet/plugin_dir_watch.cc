#include "kubelet/plugin_dir_watch.h"

#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "util/inotify.h"

namespace devplug::kubelet {

PluginDirWatch::~PluginDirWatch() {
  if (fd_ >= 0) close(fd_);
}

void PluginDirWatch::StopWatching() {
  if (fd_ >= 0 && wd_ >= 0) inotify_rm_watch(fd_, wd_);
  wd_ = -1;
}

Status PluginDirWatch::Start(const std::string& dir) {
  dir_ = dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return FailedPreconditionError(
        StrCat("cannot create plugin directory ", dir, ": ", ec.message()));
  if (fd_ < 0) {
    fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd_ < 0) return InternalError(StrCat("inotify_init1: ", std::strerror(errno)));
  }
  wd_ = inotify_add_watch(
      fd_, dir.c_str(),
      IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR);
  if (wd_ < 0)
    return FailedPreconditionError(
        StrCat("cannot watch plugin directory ", dir, ": ", std::strerror(errno)));
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
  return OkStatus();
}

bool PluginDirWatch::Gone() const {
  if (wd_ < 0) return false;
  struct stat st;
  if (stat(dir_.c_str(), &st) != 0) return errno == ENOENT || errno == ENOTDIR;
  return st.st_dev != dev_ || st.st_ino != ino_;
}

PluginDirWatch::Events PluginDirWatch::Drain() {
  Events out;
  DrainInotify(fd_, [&](const inotify_event& ev) {
    if (ev.wd != wd_) return;
    if (ev.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
      out.dir_gone = true;
      return;
    }
    if (ev.len == 0) return;
    const std::string_view name(ev.name);
    if ((ev.mask & (IN_CREATE | IN_MOVED_TO)) && name == kKubeletSocketName)
      out.kubelet_socket_created = true;
    else if ((ev.mask & (IN_CREATE | IN_MOVED_TO)) && name.front() != '.')
      out.created.emplace_back(name);
    else if (ev.mask & IN_DELETE)
      out.removed.emplace_back(name);
  });
  return out;
}

}  // namespace devplug::kubelet
