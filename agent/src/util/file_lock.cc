#include "util/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

namespace devplug {

FileLock::~FileLock() {
  if (fd_ >= 0) close(fd_);
}

FileLock::FileLock(FileLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      held_(std::exchange(other.held_, false)),
      path_(std::move(other.path_)) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    held_ = std::exchange(other.held_, false);
    path_ = std::move(other.path_);
  }
  return *this;
}

StatusOr<FileLock> FileLock::Open(const std::string& path) {
  FileLock lock;
  lock.path_ = path;
  lock.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (lock.fd_ < 0) return UnavailableError(StrCat(path, ": ", std::strerror(errno)));
  return lock;
}

Status FileLock::Lock(Clock::time_point until) {
  if (fd_ < 0) return FailedPreconditionError("the lock file is not open");
  if (held_) return OkStatus();
  // Non-blocking tries: a blocked flock() could not keep the deadline.
  auto pause = std::chrono::milliseconds(1);
  while (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK)
      return UnavailableError(StrCat(path_, ": flock: ", std::strerror(errno)));
    if (Clock::now() >= until)
      return Status(StatusCode::kDeadlineExceeded, StrCat("another process holds ", path_));
    std::this_thread::sleep_for(std::min(
        pause, std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()) +
                   std::chrono::milliseconds(1)));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  held_ = true;
  return OkStatus();
}

void FileLock::Unlock() {
  if (!held_) return;
  (void)flock(fd_, LOCK_UN);
  held_ = false;
}

}  // namespace devplug
