// Module-instance hooks for tests: the interfaces of modules/hooks.h made
// from a function each, so that a test states in one lambda what the agent
// would do.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "modules/hooks.h"

namespace devplug::testing {

// Accepts every list and hands each published one to `fn`.
inline std::shared_ptr<modules::ListSink> ListsTo(std::function<void(DeviceListPtr)> fn) {
  struct Sink final : modules::ListSink {
    std::function<void(DeviceListPtr)> fn;
    std::string Accept(const DeviceList&) override { return ""; }
    void Publish(const DeviceListPtr& list) override { fn(list); }
  };
  auto s = std::make_shared<Sink>();
  s->fn = std::move(fn);
  return s;
}

// host->pod_of() answered by `fn`.
using PodOfFn = std::function<int(const std::string& id,
                                  std::optional<std::chrono::steady_clock::time_point> not_before,
                                  modules::PodHolder* holder)>;
inline std::shared_ptr<modules::PodLookup> PodsFrom(PodOfFn fn) {
  struct Lookup final : modules::PodLookup {
    PodOfFn fn;
    int PodOf(const std::string& id, std::optional<std::chrono::steady_clock::time_point> nb,
              modules::PodHolder* holder) override {
      return fn(id, nb, holder);
    }
  };
  auto l = std::make_shared<Lookup>();
  l->fn = std::move(fn);
  return l;
}

}  // namespace devplug::testing
