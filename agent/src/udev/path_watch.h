// Paths modules asked to watch (host->watch_path, ABI 1.3), on one inotify
// instance for the whole agent.
//
// Each path is watched through its parent directory: creating, removing or
// renaming an entry of that name there reports the path's owner. The last
// component may be a pattern (fnmatch: "/dev/ttyUSB*"): every entry it
// matches counts. While the
// parent is missing, the nearest existing ancestor is watched instead and
// the watch moves down as the directories on the way appear (and back up
// when they go). This sees nodes made or removed without a uevent (rm, a
// hand mknod, a container runtime), which udev never reports.
//
// Thread safety: Add() and Remove() from any thread (module workers);
// fd() and Drain() from the agent's main loop.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "modules/hooks.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug::udev {

class PathWatch {
 public:
  // Opens the inotify instance.
  static StatusOr<std::unique_ptr<PathWatch>> Create();
  ~PathWatch();
  PathWatch(const PathWatch&) = delete;
  PathWatch& operator=(const PathWatch&) = delete;

  int fd() const { return fd_; }

  // A new owner key (one per module instance); Drain() reports it as `tag`
  // (the agent's resource id).
  uint64_t NewOwner(uint64_t tag);
  // Watches `path` (absolute, host_root applied) for `owner`: 0, or -errno
  // when no directory on the way could be watched (-ENOSPC: the watch limit).
  int Add(uint64_t owner, const std::string& path);
  // Ends every watch of `owner`, and the owner.
  void Remove(uint64_t owner);
  // Reads the pending events; returns the tags of the owners whose paths
  // may have changed (every owner after a queue overflow).
  std::set<uint64_t> Drain();

  // Watched directories now (tests).
  size_t watched_dirs() const;

 private:
  explicit PathWatch(int fd) : fd_(fd) {}
  struct Target {
    uint64_t owner = 0;
    std::string path;  // what the module named
    int wd = -1;       // the directory watched for it
    std::string dir;   // that directory's path
    std::string name;  // the entry of `dir` on the way to `path`
  };
  // Watches the deepest existing directory on the way to t.path.
  int Arm(Target& t) DEVPLUG_REQUIRES(mu_);
  void Release(int wd) DEVPLUG_REQUIRES(mu_);  // one target less on wd

  const int fd_;
  mutable Mutex mu_;
  uint64_t next_owner_ DEVPLUG_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, uint64_t> tags_ DEVPLUG_GUARDED_BY(mu_);  // owner -> tag
  std::vector<Target> targets_ DEVPLUG_GUARDED_BY(mu_);
  std::map<int, int> refs_ DEVPLUG_GUARDED_BY(mu_);  // wd -> targets on it
};

// One module instance's watches (its PathWatches): an owner of a shared
// PathWatch.
class PathWatchSet final : public modules::PathWatches {
 public:
  PathWatchSet(std::shared_ptr<PathWatch> watch, uint64_t tag)
      : watch_(std::move(watch)), owner_(watch_->NewOwner(tag)) {}
  int Add(const std::string& path) override { return watch_->Add(owner_, path); }
  void EndAll() override { watch_->Remove(owner_); }

 private:
  const std::shared_ptr<PathWatch> watch_;
  const uint64_t owner_;
};

}  // namespace devplug::udev
