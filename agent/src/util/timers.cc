#include "util/timers.h"

#include <pthread.h>

namespace devplug {

Timers::Timers() : thread_([this] { Loop(); }) {}

Timers::~Timers() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

uint64_t Timers::Schedule(Clock::time_point when, std::function<void()> fn) {
  std::lock_guard lock(mu_);
  const uint64_t id = next_id_++;
  const bool earliest = queue_.empty() || when < queue_.begin()->first;
  by_id_[id] = queue_.emplace(when, std::make_pair(id, std::move(fn)));
  if (earliest) cv_.notify_one();
  return id;
}

void Timers::Cancel(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  queue_.erase(it->second);
  by_id_.erase(it);
}

size_t Timers::pending() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void Timers::Loop() {
  pthread_setname_np(pthread_self(), "dp:timers");
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const auto when = queue_.begin()->first;
    if (Clock::now() < when) {
      cv_.wait_until(lock, when);
      continue;
    }
    auto node = queue_.extract(queue_.begin());
    by_id_.erase(node.mapped().first);
    lock.unlock();
    node.mapped().second();
    lock.lock();
  }
}

}  // namespace devplug
