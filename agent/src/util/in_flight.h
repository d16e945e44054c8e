// Counts calls whose completion callback has not run yet, so that their
// owner can wait for every one before it goes away (the kubelet Register
// calls: their answers run on gRPC's threads).
//
// Thread safety: thread-safe.
#pragma once

#include <condition_variable>

#include "util/mutex.h"

namespace devplug {

class InFlight {
 public:
  void Add() {
    MutexLock lock(mu_);
    ++count_;
  }
  void Done() {
    MutexLock lock(mu_);
    if (--count_ == 0) cv_.notify_all();
  }
  // Returns once every call added has called Done().
  void WaitNone() {
    MutexLock lock(mu_);
    while (count_ != 0) cv_.wait(mu_);
  }

 private:
  Mutex mu_;
  std::condition_variable_any cv_;
  int count_ DEVPLUG_GUARDED_BY(mu_) = 0;
};

}  // namespace devplug
