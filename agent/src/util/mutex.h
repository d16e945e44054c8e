// A mutex the compiler can reason about: clang's -Wthread-safety checks
// that what a class marks DEVPLUG_GUARDED_BY(mu) is touched only with mu held, and
// that a method marked DEVPLUG_REQUIRES(mu) is called only so. gcc ignores the
// marks; clang builds (the fuzz build) turn them into errors.
//
// Thread safety: Mutex is a std::mutex; MutexLock holds one for a scope.
#pragma once

#include <mutex>

#if defined(__clang__)
#define DEVPLUG_TSA(x) __attribute__((x))
#else
#define DEVPLUG_TSA(x)
#endif

#define DEVPLUG_CAPABILITY(x) DEVPLUG_TSA(capability(x))
#define DEVPLUG_SCOPED_CAPABILITY DEVPLUG_TSA(scoped_lockable)
#define DEVPLUG_GUARDED_BY(x) DEVPLUG_TSA(guarded_by(x))
#define DEVPLUG_REQUIRES(...) DEVPLUG_TSA(requires_capability(__VA_ARGS__))
#define DEVPLUG_ACQUIRE(...) DEVPLUG_TSA(acquire_capability(__VA_ARGS__))
#define DEVPLUG_RELEASE(...) DEVPLUG_TSA(release_capability(__VA_ARGS__))
#define DEVPLUG_EXCLUDES(...) DEVPLUG_TSA(locks_excluded(__VA_ARGS__))

namespace devplug {

// Waited on with std::condition_variable_any (wait(mu) while a MutexLock
// holds it).
class DEVPLUG_CAPABILITY("mutex") Mutex {
 public:
  void lock() DEVPLUG_ACQUIRE() { mu_.lock(); }
  void unlock() DEVPLUG_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for a scope; Unlock and Lock let it go and take it again
// inside the scope (to call out without the lock).
class DEVPLUG_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) DEVPLUG_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() DEVPLUG_RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() DEVPLUG_RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void Lock() DEVPLUG_ACQUIRE() {
    mu_.lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

}  // namespace devplug
