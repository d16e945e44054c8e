#include "util/timers.h"

#include <pthread.h>

namespace devplug {

Timers::Timers() : thread_([this] { Loop(); }) {}

Timers::~Timers() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

uint64_t Timers::Schedule(Clock::time_point when, std::function<void()> fn) {
  MutexLock lock(mu_);
  const uint64_t id = next_id_++;
  const bool earliest = queue_.empty() || when < queue_.begin()->first;
  by_id_[id] = queue_.emplace(when, std::make_pair(id, std::move(fn)));
  if (earliest) cv_.notify_one();
  return id;
}

void Timers::Cancel(uint64_t id) {
  MutexLock lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  queue_.erase(it->second);
  by_id_.erase(it);
}

size_t Timers::pending() const {
  MutexLock lock(mu_);
  return queue_.size();
}

void Timers::Loop() {
  pthread_setname_np(pthread_self(), "dp:timers");
  MutexLock lock(mu_);
  while (!stopping_) {
    if (queue_.empty()) {
      cv_.wait(mu_);
      continue;
    }
    const auto when = queue_.begin()->first;
    if (Clock::now() < when) {
      cv_.wait_until(mu_, when);
      continue;
    }
    auto node = queue_.extract(queue_.begin());
    by_id_.erase(node.mapped().first);
    lock.Unlock();
    node.mapped().second();
    lock.Lock();
  }
}

}  // namespace devplug
