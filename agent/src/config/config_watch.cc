#include "config/config_watch.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace devplug {
namespace {

constexpr uint32_t kDirEvents =
    IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE | IN_ATTRIB;

// FNV-1a, 64 bits: enough to tell one set of configuration files from the
// next; never a security boundary.
void Mix(uint64_t* h, std::string_view bytes) {
  for (unsigned char c : bytes) {
    *h ^= c;
    *h *= 1099511628211ull;
  }
}

}  // namespace

ConfigWatch::~ConfigWatch() { Stop(); }

Status ConfigWatch::Start(const std::string& main_file) {
  Stop();
  main_ = main_file;
  dir_ = std::filesystem::path(main_file).parent_path().string();
  if (dir_.empty()) dir_ = ".";
  dropins_ = dir_ + "/conf.d";
  fd_ = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd_ < 0) return InternalError(StrCat("inotify: ", std::strerror(errno)));
  if (!WatchDir()) {
    const int e = errno;
    Stop();
    return UnavailableError(StrCat("cannot watch ", dir_, ": ", std::strerror(e)));
  }
  WatchDropIns();
  baseline_ = Fingerprint();
  return OkStatus();
}

void ConfigWatch::Stop() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  dir_wd_ = -1;
  dropins_wd_ = -1;
  settle_at_.reset();
  rewatch_at_.reset();
}

bool ConfigWatch::WatchDir() {
  dir_wd_ = inotify_add_watch(fd_, dir_.c_str(), kDirEvents | IN_ONLYDIR);
  return dir_wd_ >= 0;
}

void ConfigWatch::WatchDropIns() {
  if (dropins_wd_ >= 0) return;
  // conf.d may itself be a mount that is swapped: watched the same way.
  dropins_wd_ = inotify_add_watch(fd_, dropins_.c_str(), kDirEvents | IN_ONLYDIR);
}

void ConfigWatch::Drain(Clock::time_point now) {
  if (fd_ < 0) return;
  alignas(inotify_event) char buf[4096];
  bool any = false;
  for (ssize_t len; (len = read(fd_, buf, sizeof(buf))) > 0;) {
    for (char* p = buf; p < buf + len;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(p);
      p += sizeof(inotify_event) + ev->len;
      if (ev->mask & IN_IGNORED) {
        if (ev->wd == dropins_wd_) dropins_wd_ = -1;  // conf.d gone
        if (ev->wd == dir_wd_) dir_wd_ = -1;          // the folder itself gone
      }
      any = true;
    }
  }
  if (!any) return;
  if (dir_wd_ < 0 && !rewatch_at_) rewatch_at_ = now;  // made again already, perhaps
  WatchDropIns();                                      // conf.d made (or made anew) meanwhile
  settle_at_ = now + kSettle;
}

std::optional<ConfigWatch::Clock::time_point> ConfigWatch::deadline() const {
  if (settle_at_ && rewatch_at_) return std::min(*settle_at_, *rewatch_at_);
  return settle_at_ ? settle_at_ : rewatch_at_;
}

bool ConfigWatch::Changed(Clock::time_point now) {
  if (fd_ < 0) return false;
  if (rewatch_at_ && now >= *rewatch_at_) {
    if (WatchDir()) {
      // Back: whatever it holds now is compared with the baseline.
      rewatch_at_.reset();
      WatchDropIns();
      settle_at_ = now;
    } else {
      rewatch_at_ = now + kRewatch;
    }
  }
  if (!settle_at_ || now < *settle_at_) return false;
  settle_at_.reset();
  return Fingerprint() != baseline_;
}

void ConfigWatch::Taken() {
  if (fd_ >= 0) baseline_ = Fingerprint();
}

uint64_t ConfigWatch::Fingerprint() const {
  uint64_t h = 14695981039346656037ull;
  auto file = [&](const std::string& path) {
    Mix(&h, path);
    Mix(&h, std::string_view("\0", 1));
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      Mix(&h, "(unreadable)");
      return;
    }
    std::ostringstream body;
    body << in.rdbuf();
    Mix(&h, body.str());
    Mix(&h, std::string_view("\0", 1));
  };
  file(main_);
  std::vector<std::string> dropins;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dropins_, ec))
    if (e.path().extension() == ".toml") dropins.push_back(e.path().string());
  std::sort(dropins.begin(), dropins.end());
  for (const std::string& d : dropins) file(d);
  return h;
}

}  // namespace devplug
