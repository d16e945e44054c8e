#include "util/instance_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

namespace devplug {

InstanceLock::~InstanceLock() {
  if (fd_ >= 0) close(fd_);
}

InstanceLock::InstanceLock(InstanceLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

InstanceLock& InstanceLock::operator=(InstanceLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

StatusOr<InstanceLock> InstanceLock::Take(const std::string& dir, std::chrono::milliseconds wait) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return UnavailableError(StrCat(dir, ": ", ec.message()));
  InstanceLock lock;
  lock.path_ = StrCat(dir, "/devplugd.lock");
  lock.fd_ = open(lock.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (lock.fd_ < 0) return UnavailableError(StrCat(lock.path_, ": ", std::strerror(errno)));
  const auto until = std::chrono::steady_clock::now() + wait;
  int rc;
  while ((rc = flock(lock.fd_, LOCK_EX | LOCK_NB)) != 0 && errno == EWOULDBLOCK &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (rc != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK)
      return UnavailableError(StrCat(lock.path_, ": flock: ", std::strerror(err)));
    char buf[32] = {};
    const ssize_t n = pread(lock.fd_, buf, sizeof(buf) - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    return FailedPreconditionError(StrCat(
        "another devplugd", pid.empty() ? "" : StrCat(" (pid ", pid, ")"), " holds ", lock.path_,
        ": one devplugd serves a node (a second one would take the first one's sockets, CDI "
        "specs and ResourceSlices)"));
  }
  const std::string mine = StrCat(getpid(), "\n");
  if (ftruncate(lock.fd_, 0) != 0 ||
      pwrite(lock.fd_, mine.data(), mine.size(), 0) != static_cast<ssize_t>(mine.size()))
    return UnavailableError(StrCat(lock.path_, ": ", std::strerror(errno)));
  return lock;
}

}  // namespace devplug
