// Which devplugd holds a node's state folder: an exclusive lock (flock) on
// a file in it, held for the process's life and let go by the kernel
// however the process ends. A devplugd started while another holds it (a
// rolling update starts the new one first) serves beside that one as its
// successor, leaves alone what the older one may still use (the start's
// sweep of CDI specs), and takes the lock once the older one is gone
// (TryTake), so that a third one knows about it.
//
// Thread safety: not thread-safe; the agent's main thread owns it.
#pragma once

#include <chrono>
#include <string>

#include "util/file_lock.h"
#include "util/status.h"

namespace devplug {

class InstanceLock {
 public:
  // Locks "<dir>/devplugd.lock" (making `dir`), and writes this process's
  // PID into it. Another holder is waited for up to `wait` (one that is on
  // its way out: a restart); then the lock is returned open and not held,
  // holder() naming the other one's PID. UNAVAILABLE when the folder or
  // file cannot be had (a read-only file system).
  static StatusOr<InstanceLock> Take(const std::string& dir, std::chrono::milliseconds wait);
  // Not held: takes it now if nobody holds it any more (true: held).
  bool TryTake();

  const std::string& path() const { return lock_.path(); }
  bool held() const { return lock_.held(); }
  // Who held it when Take gave up waiting: "pid 123", or "" when unknown.
  const std::string& holder() const { return holder_; }

 private:
  // Writes this process's PID into the file.
  Status WritePid();
  FileLock lock_;
  std::string holder_;
};

}  // namespace devplug
