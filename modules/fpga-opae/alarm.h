// fpga-opae's own thread: the end of failure holds, and the state poll of
// what raises no uevent.
//
// Thread safety: At() from any thread; the callbacks run on its thread.
#pragma once

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "devplug/common/cxx_module.h"

namespace devplug::fpga {

// The module's own thread. Calls DevicesChanged() when the earliest of some
// deadlines passes (the end of a failure hold), and every `poll` (0: never)
// when `changed` says what a scan reads has changed: reprogramming and power
// state changes raise no uevent (dfl-fme-pr.c and dfl-afu-main.c signal
// nothing), and a change made outside devplug (fpgaconf by hand) raises
// none at all.
class Alarm {
 public:
  Alarm(const common::Host& host, std::chrono::milliseconds poll, std::function<bool()> changed)
      : host_(host), poll_(poll), changed_(std::move(changed)), thread_([this] { Run(); }) {}
  ~Alarm() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void At(std::chrono::steady_clock::time_point t) {
    {
      std::lock_guard lock(mu_);
      due_.insert(t);
    }
    cv_.notify_all();
  }

 private:
  void Run() {
    pthread_setname_np(pthread_self(), "dp:fpga-poll");
    std::unique_lock lock(mu_);
    auto next_poll = std::chrono::steady_clock::now() + poll_;
    while (!stop_) {
      std::optional<std::chrono::steady_clock::time_point> next;
      if (!due_.empty()) next = *due_.begin();
      if (poll_.count() > 0 && (!next || next_poll < *next)) next = next_poll;
      if (!next) {
        cv_.wait(lock);
        continue;
      }
      cv_.wait_until(lock, *next);
      if (stop_) break;
      const auto now = std::chrono::steady_clock::now();
      bool tell = false;
      if (!due_.empty() && *due_.begin() <= now) {
        while (!due_.empty() && *due_.begin() <= now) due_.erase(due_.begin());
        tell = true;
      }
      if (poll_.count() > 0 && now >= next_poll) {
        next_poll = now + poll_;
        lock.unlock();  // reads sysfs; At() must not wait for it
        tell = changed_() || tell;
        lock.lock();
      }
      if (tell) host_.DevicesChanged();
    }
  }
  const common::Host host_;
  const std::chrono::milliseconds poll_;
  const std::function<bool()> changed_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::multiset<std::chrono::steady_clock::time_point> due_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace devplug::fpga
