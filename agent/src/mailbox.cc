// How other threads reach the agent's main loop.
#include <sys/eventfd.h>
#include <unistd.h>

#include "mailbox.h"

namespace devplug {

Mailbox::Mailbox() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

Mailbox::~Mailbox() {
  if (fd_ >= 0) close(fd_);
}

void Mailbox::Post(AgentEvent ev) {
  {
    MutexLock lock(mu_);
    if (closed_) return;
    events_.push_back(std::move(ev));
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof(one));
}

std::vector<AgentEvent> Mailbox::Drain() {
  uint64_t count;
  [[maybe_unused]] ssize_t rd = read(fd_, &count, sizeof(count));
  std::vector<AgentEvent> out;
  MutexLock lock(mu_);
  out.swap(events_);
  return out;
}

void Mailbox::Close() {
  MutexLock lock(mu_);
  closed_ = true;
  events_.clear();
}

}  // namespace devplug
