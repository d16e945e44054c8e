// The resources devplugd serves, in the running configuration's order, and
// the ones it retired whose modules are still stopping.
//
// A retired resource stops on a thread of its own, so that a module that
// takes a while to destroy() (a release, a programming) never holds the
// main loop; past its deadline it is left to that thread (leaked, with
// whatever it may still touch). Shutdown waits for the rest under one
// deadline.
//
// Thread safety: not thread-safe; the agent's main thread owns it. The
// retiring threads touch only the resource each was given.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "resource.h"

namespace devplug {

class ResourceSet {
 public:
  using Clock = std::chrono::steady_clock;
  using List = std::vector<std::unique_ptr<Resource>>;

  ResourceSet() = default;
  ~ResourceSet();
  ResourceSet(const ResourceSet&) = delete;
  ResourceSet& operator=(const ResourceSet&) = delete;

  List::iterator begin() { return list_.begin(); }
  List::iterator end() { return list_.end(); }
  List::const_iterator begin() const { return list_.begin(); }
  List::const_iterator end() const { return list_.end(); }
  bool empty() const { return list_.empty(); }

  void Add(std::unique_ptr<Resource> r) { list_.push_back(std::move(r)); }
  Resource* ById(uint64_t id) const;
  const Resource* ByName(const std::string& name) const;
  Resource* ByName(const std::string& name) {
    return const_cast<Resource*>(std::as_const(*this).ByName(name));
  }
  // Takes the resource named `name` out (nullptr when there is none); of
  // the set, or of `list`.
  std::unique_ptr<Resource> Take(const std::string& name) { return Take(list_, name); }
  static std::unique_ptr<Resource> Take(List& list, const std::string& name);
  // Takes them all out, in order.
  List TakeAll() { return std::move(list_); }

  // Stops `r` for good without waiting for its module (module_instance.h:
  // RequestStop, then StopModule on a thread of its own, until `deadline`).
  void Retire(std::unique_ptr<Resource> r, Clock::time_point deadline);
  // Waits for the retired resources until `deadline`; those still stopping
  // are left to run out with the process.
  void WaitRetired(Clock::time_point deadline);
  size_t retiring() const { return retiring_.size(); }

 private:
  struct Retiring {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  List list_;
  std::vector<Retiring> retiring_;
};

}  // namespace devplug
