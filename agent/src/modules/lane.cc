#include "modules/lane.h"

#include <pthread.h>

namespace devplug::modules {

Lane::Lane(std::string name, Task on_start, Task on_wake)
    : name_(std::move(name)), on_start_(std::move(on_start)), on_wake_(std::move(on_wake)) {}

Lane::~Lane() {
  if (!thread_.joinable()) return;
  RequestStop({});
  (void)WaitStopped(Clock::now() + std::chrono::hours(24 * 365));
}

void Lane::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Lane::Post(Task task) {
  {
    MutexLock lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void Lane::WakeAt(std::optional<Clock::time_point> at) {
  MutexLock lock(mu_);
  wake_at_ = at;
}

std::optional<Lane::Clock::time_point> Lane::wake_at() const {
  MutexLock lock(mu_);
  return wake_at_;
}

void Lane::RequestStop(Task last) {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    if (last) queue_.push_back(std::move(last));
    stopping_ = true;
  }
  cv_.notify_one();
}

bool Lane::WaitStopped(Clock::time_point deadline) {
  if (!thread_.joinable()) return true;
  bool exited = false;
  {
    MutexLock lock(mu_);
    while (!exited_ && exited_cv_.wait_until(mu_, deadline) == std::cv_status::no_timeout) {
    }
    exited = exited_;
  }
  if (!exited) {
    thread_.detach();
    return false;
  }
  thread_.join();
  return true;
}

void Lane::Loop() {
  // "dp:<module>" in top -H, ps -L and gdb (15 characters at most).
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  if (on_start_) on_start_();
  for (;;) {
    Task task;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) {
        if (!wake_at_)
          cv_.wait(mu_);
        else if (cv_.wait_until(mu_, *wake_at_) == std::cv_status::timeout)
          break;
      }
      if (!queue_.empty()) {
        task = std::move(queue_.front());
        queue_.pop_front();
      } else if (stopping_) {  // stopping and drained
        exited_ = true;
        exited_cv_.notify_all();
        return;
      } else if (wake_at_ && Clock::now() >= *wake_at_) {
        wake_at_.reset();
        task = on_wake_;
      } else {
        continue;  // woken early
      }
    }
    if (task) task();
  }
}

}  // namespace devplug::modules
