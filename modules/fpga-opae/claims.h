// Every fpga-opae instance in the process, for deciding which one serves a
// port that several select: region resources first, then af ones, each in
// configuration order, so that a port never moves between resources when
// it is reprogrammed.
//
// Thread safety: thread-safe.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "devplug/common/cxx_module.h"
#include "settings.h"

namespace devplug::fpga {

class Claims {
 public:
  struct Entry {
    const void* owner;
    std::string resource;
    int32_t index;
    const Settings* settings;
    const common::Host* host;
  };

  // Destroyed when the module is unloaded, after its last instance.
  static Claims& Get() {
    static Claims claims;
    return claims;
  }

  void Add(const Entry& e) {
    std::lock_guard lock(mu_);
    entries_.push_back(e);
    NotifyOthers(e.owner);
  }
  void Remove(const void* owner) {
    std::lock_guard lock(mu_);
    std::erase_if(entries_, [&](const Entry& e) { return e.owner == owner; });
    NotifyOthers(owner);
  }
  // Tells every other instance that ports may have changed hands (after
  // programming changes an afu_id, say).
  void Changed(const void* owner) {
    std::lock_guard lock(mu_);
    NotifyOthers(owner);
  }
  // The resource that serves the port instead of `owner`, or "" when
  // `owner` does (no instance before it selects the port). Instances of the
  // same resource (one replacing the other in a reload) never exclude each
  // other.
  std::string TakenBy(const void* owner, const PortFacts& f) const {
    std::lock_guard lock(mu_);
    const Entry* self = nullptr;
    for (const Entry& e : entries_)
      if (e.owner == owner) self = &e;
    if (self == nullptr) return "";
    for (const Entry& e : entries_) {
      if (e.owner == owner || e.resource == self->resource) continue;
      if (Before(e, *self) && Selects(*e.settings, f)) return e.resource;
    }
    return "";
  }

 private:
  // Region resources before af ones, then configuration order.
  static bool Before(const Entry& a, const Entry& b) {
    if (a.settings->region() != b.settings->region()) return a.settings->region();
    if (a.index != b.index) return a.index < b.index;
    return a.resource < b.resource;
  }
  void NotifyOthers(const void* owner) {
    for (const Entry& e : entries_)
      if (e.owner != owner) e.host->DevicesChanged();  // never blocks
  }
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
};

}  // namespace devplug::fpga
