#include "udev/path_watch.h"

#include <fnmatch.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "util/inotify.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace devplug::udev {
namespace {

constexpr uint32_t kMask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |
                           IN_MOVE_SELF | IN_ONLYDIR;

std::string Dirname(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return p.substr(0, slash);
}

std::string Basename(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// "/a//b/" -> "/a/b"
std::string Clean(const std::string& p) {
  std::string out;
  for (char c : p) {
    if (c == '/' && !out.empty() && out.back() == '/') continue;
    out += c;
  }
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

bool HasGlob(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

}  // namespace

StatusOr<std::unique_ptr<PathWatch>> PathWatch::Create() {
  const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return InternalError(StrCat("inotify_init1: ", std::strerror(errno)));
  return std::unique_ptr<PathWatch>(new PathWatch(fd));
}

PathWatch::~PathWatch() { close(fd_); }

uint64_t PathWatch::NewOwner(uint64_t tag) {
  MutexLock lock(mu_);
  tags_[next_owner_] = tag;
  return next_owner_++;
}

int PathWatch::Arm(Target& t) {
  std::string dir = Dirname(t.path);
  std::string name = Basename(t.path);
  for (;;) {
    const int wd = inotify_add_watch(fd_, dir.c_str(), kMask);
    if (wd >= 0) {
      t.wd = wd;
      t.dir = dir;
      t.name = name;
      ++refs_[wd];
      return 0;
    }
    const int err = errno;
    if ((err != ENOENT && err != ENOTDIR) || dir == "/") {
      t.wd = -1;
      return -err;
    }
    name = Basename(dir);
    dir = Dirname(dir);
  }
}

void PathWatch::Release(int wd) {
  if (wd < 0) return;
  auto it = refs_.find(wd);
  if (it == refs_.end()) return;
  if (--it->second == 0) {
    inotify_rm_watch(fd_, wd);
    refs_.erase(it);
  }
}

int PathWatch::Add(uint64_t owner, const std::string& path) {
  const std::string clean = Clean(path);
  if (clean.empty() || clean[0] != '/' || clean == "/") return -EINVAL;
  MutexLock lock(mu_);
  if (!tags_.contains(owner)) return -EINVAL;
  for (const Target& t : targets_)
    if (t.owner == owner && t.path == clean) return 0;
  Target t;
  t.owner = owner;
  t.path = clean;
  const int rc = Arm(t);
  if (rc < 0) return rc;
  targets_.push_back(std::move(t));
  return 0;
}

void PathWatch::Remove(uint64_t owner) {
  MutexLock lock(mu_);
  tags_.erase(owner);
  for (auto it = targets_.begin(); it != targets_.end();) {
    if (it->owner == owner) {
      Release(it->wd);
      it = targets_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t PathWatch::watched_dirs() const {
  MutexLock lock(mu_);
  return refs_.size();
}

std::set<uint64_t> PathWatch::Drain() {
  std::set<int> gone;                          // directories that went away
  std::map<int, std::set<std::string>> names;  // wd -> entries that changed
  bool overflow = false;
  DrainInotify(fd_, [&](const inotify_event& ev) {
    if (ev.mask & IN_Q_OVERFLOW) overflow = true;
    if (ev.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) gone.insert(ev.wd);
    if (ev.len > 0) names[ev.wd].insert(ev.name);
  });
  std::set<uint64_t> owners;
  MutexLock lock(mu_);
  for (Target& t : targets_) {
    bool rearm = overflow || t.wd < 0 || gone.contains(t.wd);
    bool changed = rearm;
    const bool at_parent = t.dir == Dirname(t.path);
    if (auto it = names.find(t.wd); it != names.end()) {
      // At the parent the last component may be a pattern; an ancestor
      // waits for one exact directory name on the way.
      const bool hit =
          at_parent && HasGlob(t.name)
              ? std::any_of(it->second.begin(), it->second.end(),
                            [&](const std::string& n) {
                              return fnmatch(t.name.c_str(), n.c_str(), FNM_PERIOD) == 0;
                            })
              : it->second.contains(t.name);
      if (hit) {
        changed = true;
        if (!at_parent) rearm = true;  // a directory on the way may have appeared
      }
    }
    if (rearm) {
      // (For a watch the kernel already dropped, inotify_rm_watch only
      // fails with EINVAL.)
      Release(t.wd);
      (void)Arm(t);
    }
    if (changed)
      if (auto tag = tags_.find(t.owner); tag != tags_.end()) owners.insert(tag->second);
  }
  return owners;
}

}  // namespace devplug::udev
