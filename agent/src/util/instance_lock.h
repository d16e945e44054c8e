// One devplugd per node: an exclusive lock (flock) on a file in its state
// folder, held for the process's life and let go by the kernel however the
// process ends. A second devplugd would take the first one's sockets, sweep
// its CDI specs as stale and delete its ResourceSlices at its exit.
//
// Thread safety: not thread-safe; taken once, at start.
#pragma once

#include <chrono>
#include <string>

#include "util/status.h"

namespace devplug {

class InstanceLock {
 public:
  InstanceLock() = default;
  ~InstanceLock();
  InstanceLock(InstanceLock&& other) noexcept;
  InstanceLock& operator=(InstanceLock&& other) noexcept;
  InstanceLock(const InstanceLock&) = delete;
  InstanceLock& operator=(const InstanceLock&) = delete;

  // Locks "<dir>/devplugd.lock" (making `dir`), and writes this process's
  // PID into it. Another holder is waited for up to `wait` (one that is on
  // its way out: a pod replaced, a restart); then FAILED_PRECONDITION,
  // naming its PID. UNAVAILABLE when the folder or file cannot be had (a
  // read-only file system).
  static StatusOr<InstanceLock> Take(const std::string& dir, std::chrono::milliseconds wait);

  const std::string& path() const { return path_; }
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace devplug
