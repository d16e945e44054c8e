#include "modules/lane.h"

#include <pthread.h>

namespace devplug::modules {

Lane::Lane(std::string name, Task on_start, Task on_wake)
    : name_(std::move(name)), on_start_(std::move(on_start)), on_wake_(std::move(on_wake)) {}

Lane::~Lane() {
  if (!thread_.joinable()) return;
  RequestStop({});
  (void)WaitStopped(Clock::time_point::max());
}

void Lane::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Lane::Post(Task task) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void Lane::WakeAt(std::optional<Clock::time_point> at) {
  std::lock_guard lock(mu_);
  wake_at_ = at;
}

std::optional<Lane::Clock::time_point> Lane::wake_at() const {
  std::lock_guard lock(mu_);
  return wake_at_;
}

void Lane::RequestStop(Task last) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    if (last) queue_.push_back(std::move(last));
    stopping_ = true;
  }
  cv_.notify_one();
}

bool Lane::WaitStopped(Clock::time_point deadline) {
  if (!thread_.joinable()) return true;
  std::unique_lock lock(mu_);
  if (!exited_cv_.wait_until(lock, deadline, [&] { return exited_; })) {
    lock.unlock();
    thread_.detach();
    return false;
  }
  lock.unlock();
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
      std::unique_lock lock(mu_);
      auto ready = [&] { return stopping_ || !queue_.empty(); };
      if (wake_at_)
        cv_.wait_until(lock, *wake_at_, ready);
      else
        cv_.wait(lock, ready);
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
