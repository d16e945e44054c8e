#include "util/instance_lock.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace devplug {

StatusOr<InstanceLock> InstanceLock::Take(const std::string& dir, std::chrono::milliseconds wait) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return UnavailableError(StrCat(dir, ": ", ec.message()));
  auto file = FileLock::Open(StrCat(dir, "/devplugd.lock"));
  if (!file.ok()) return file.status();
  InstanceLock lock;
  lock.lock_ = std::move(*file);
  const Status st = lock.lock_.Lock(FileLock::Clock::now() + wait);
  if (st.code() == StatusCode::kDeadlineExceeded) {
    char buf[32] = {};
    const ssize_t n = pread(lock.lock_.fd(), buf, sizeof(buf) - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (!pid.empty()) lock.holder_ = StrCat("pid ", pid);
    return lock;
  }
  if (!st.ok()) return st;
  if (Status written = lock.WritePid(); !written.ok()) return written;
  return lock;
}

bool InstanceLock::TryTake() {
  if (held() || !lock_.is_open()) return held();
  if (!lock_.Lock(FileLock::Clock::now()).ok()) return false;
  holder_.clear();
  (void)WritePid();  // the lock is what counts; the PID is for people
  return true;
}

Status InstanceLock::WritePid() {
  const std::string mine = StrCat(getpid(), "\n");
  const int fd = lock_.fd();
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, mine.data(), mine.size(), 0) != static_cast<ssize_t>(mine.size()))
    return UnavailableError(StrCat(path(), ": ", std::strerror(errno)));
  return OkStatus();
}

}  // namespace devplug
