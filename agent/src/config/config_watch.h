// [agent] watch_config: devplugd notices its configuration files change on
// disk and reloads as SIGHUP does. Made for a ConfigMap mounted in a pod,
// which the kubelet updates by an atomic symlink swap (..data points at a
// new folder): only the folders are watched, never the files, since the
// files' targets are replaced wholesale.
//
// Any event in the main file's folder or in its conf.d/ arms a short
// settle; then the files' contents are compared with those of the last
// reload (or start), so that editors' temporary files, a touch, or a swap
// that brings the same contents cause nothing. A folder removed and made
// again (a package reinstall, configuration management) is watched again.
//
// Thread safety: not thread-safe; owned by the agent's main loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "util/status.h"

namespace devplug {

class ConfigWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // Events this close together are one change (a swap is several).
  static constexpr std::chrono::milliseconds kSettle{500};

  ConfigWatch() = default;
  ~ConfigWatch();
  ConfigWatch(const ConfigWatch&) = delete;
  ConfigWatch& operator=(const ConfigWatch&) = delete;

  // Watches the folder of `main_file` and its conf.d/ (when there is one,
  // or once it appears); what is on disk now is the baseline.
  Status Start(const std::string& main_file);
  void Stop();
  bool active() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  // Reads the pending events; arms the settle timer when any came.
  void Drain(Clock::time_point now);
  // The next time Changed() has something to do: the settle's end, or the
  // next try to watch a folder that was removed.
  std::optional<Clock::time_point> deadline() const;
  // At the deadline: true when the contents differ from the baseline. The
  // baseline moves only when the reload takes them (Taken()): an edit that
  // could not be applied yet (a reload was under way) stays a change.
  bool Changed(Clock::time_point now);
  // A reload is about to read the files: what is on disk now is the
  // baseline (a reload that fails is not tried again until the files change
  // again). Taken before the files are read, so an edit that lands while
  // they are read is a change still to come.
  void Taken();

  // While the folder is gone, it is looked for this often; once it is back
  // its contents are compared at once.
  static constexpr std::chrono::milliseconds kRewatch{1000};

 private:
  // The files the loader reads (main file, then conf.d/*.toml in order),
  // names and contents, hashed.
  uint64_t Fingerprint() const;
  void WatchDropIns();
  // Watches the main file's folder; false while it does not exist.
  bool WatchDir();

  std::string main_, dir_, dropins_;
  int fd_ = -1;
  int dir_wd_ = -1;
  int dropins_wd_ = -1;
  uint64_t baseline_ = 0;
  std::optional<Clock::time_point> settle_at_;
  std::optional<Clock::time_point> rewatch_at_;  // the folder is gone
};

}  // namespace devplug
