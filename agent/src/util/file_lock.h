// A lock that processes share through a file (flock), taken around one
// piece of work rather than for a process's life: two devplugd that serve
// one node during a rolling update take turns on what they both write
// (a DRA resource's checkpoint). The kernel lets go of it however the
// holder ends.
//
// flock() locks an open file description: two FileLocks on one path
// exclude each other in one process too (what the tests use).
//
// Thread safety: not thread-safe; one owner thread at a time.
#pragma once

#include <chrono>
#include <string>

#include "util/status.h"

namespace devplug {

class FileLock {
 public:
  using Clock = std::chrono::steady_clock;

  FileLock() = default;
  ~FileLock();
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  // Opens (makes) `path`; unlocked. UNAVAILABLE names the file when it
  // cannot be had.
  static StatusOr<FileLock> Open(const std::string& path);

  // Takes the lock, waiting for another holder until `until`
  // (DEADLINE_EXCEEDED then). Taking it while holding it is a no-op.
  Status Lock(Clock::time_point until);
  void Unlock();

  const std::string& path() const { return path_; }
  bool is_open() const { return fd_ >= 0; }
  // The file, for what its holder writes in it (-1: not open).
  int fd() const { return fd_; }
  bool held() const { return held_; }

 private:
  int fd_ = -1;
  bool held_ = false;
  std::string path_;
};

// Holds a FileLock for a scope; does nothing for a lock that is not open.
class FileLockHold {
 public:
  FileLockHold(FileLock& lock, FileLock::Clock::time_point until)
      : lock_(lock.is_open() ? &lock : nullptr), status_(lock_ ? lock_->Lock(until) : OkStatus()) {}
  ~FileLockHold() {
    if (lock_ && status_.ok()) lock_->Unlock();
  }
  FileLockHold(const FileLockHold&) = delete;
  FileLockHold& operator=(const FileLockHold&) = delete;
  const Status& status() const { return status_; }

 private:
  FileLock* lock_;
  Status status_;
};

}  // namespace devplug
