#include "modules/device_lanes.h"

#include <pthread.h>

#include <algorithm>

namespace devplug::modules {

LaneWait::Clock::duration LaneWait::Waited(Clock::time_point now) const {
  MutexLock lock(mu_);
  return total_ + (since_ ? now - *since_ : Clock::duration::zero());
}

void LaneWait::Update(bool waiting, Clock::time_point now) {
  MutexLock lock(mu_);
  if (waiting && !since_) {
    since_ = now;
  } else if (!waiting && since_) {
    total_ += now - *since_;
    since_.reset();
  }
}

DeviceLanes::DeviceLanes(std::string name, size_t lanes, std::function<void()> on_thread_start)
    : name_(std::move(name).substr(0, 15)),
      lanes_(std::max<size_t>(1, lanes)),
      on_thread_start_(std::move(on_thread_start)) {}

DeviceLanes::~DeviceLanes() { Stop(); }

size_t DeviceLanes::threads() const {
  MutexLock lock(mu_);
  return threads_.size();
}

bool DeviceLanes::Busy(const std::vector<std::string>& devices,
                       const std::vector<const std::vector<std::string>*>& holders) const {
  for (const std::vector<std::string>* held : holders)
    for (const std::string& d : devices)
      if (std::find(held->begin(), held->end(), d) != held->end()) return true;
  return false;
}

std::deque<DeviceLanes::Queued>::iterator DeviceLanes::Runnable() {
  std::vector<const std::vector<std::string>*> holders;
  for (const auto& r : running_) holders.push_back(&r);
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (!Busy(it->devices, holders)) return it;
    // Order per device: a later task never overtakes an earlier one that
    // shares a device with it.
    holders.push_back(&it->devices);
  }
  return queue_.end();
}

void DeviceLanes::Account(Clock::time_point now) {
  std::vector<const std::vector<std::string>*> holders;
  for (const auto& r : running_) holders.push_back(&r);
  const bool lanes_full = running_.size() >= lanes_;
  for (Queued& q : queue_) {
    q.wait->Update(lanes_full && !Busy(q.devices, holders), now);
    holders.push_back(&q.devices);
  }
}

std::shared_ptr<const LaneWait> DeviceLanes::Post(std::vector<std::string> devices, Task task) {
  auto wait = std::make_shared<LaneWait>();
  {
    MutexLock lock(mu_);
    if (stopping_) return wait;
    queue_.push_back({std::move(devices), std::move(task), wait});
    Account(Clock::now());
    // A new lane only for a task that could run now and finds none free.
    if (idle_ == 0 && threads_.size() < lanes_ && Runnable() != queue_.end())
      threads_.emplace_back([this] { Loop(); });
  }
  cv_.notify_all();
  return wait;
}

void DeviceLanes::Loop() {
  pthread_setname_np(pthread_self(), name_.c_str());
  if (on_thread_start_) on_thread_start_();
  mu_.lock();
  for (;;) {
    auto it = Runnable();
    if (it == queue_.end()) {
      if (stopping_ && queue_.empty()) break;
      ++idle_;
      cv_.wait(mu_);
      --idle_;
      continue;
    }
    Queued q = std::move(*it);
    queue_.erase(it);
    const auto started = Clock::now();
    q.wait->Update(false, started);
    const auto mine = running_.insert(running_.end(), q.devices);
    Account(started);
    mu_.unlock();
    q.task();
    q.task = nullptr;  // what it holds goes before the next task
    mu_.lock();
    running_.erase(mine);
    Account(Clock::now());
    cv_.notify_all();
  }
  mu_.unlock();
}

void DeviceLanes::Stop() {
  std::vector<std::thread> threads;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    // Tasks still queued run first; they need a thread.
    if (threads_.empty() && !queue_.empty()) threads_.emplace_back([this] { Loop(); });
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

}  // namespace devplug::modules
