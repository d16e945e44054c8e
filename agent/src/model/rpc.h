// The kubelet's calls (the device plugin API's, and DRA's), as the services
// report them and the metrics count them.
#pragma once

#include <chrono>
#include <cstddef>
#include <string_view>

#include "util/status.h"

namespace devplug {

enum class Rpc : size_t {
  kGetDevicePluginOptions,
  kListAndWatch,
  kGetPreferredAllocation,
  kAllocate,
  kPreStartContainer,
  kNodePrepareResources,
  kNodeUnprepareResources,
  kCount
};

inline std::string_view RpcName(Rpc rpc) {
  static constexpr std::string_view kNames[] = {
      "GetDevicePluginOptions", "ListAndWatch",         "GetPreferredAllocation", "Allocate",
      "PreStartContainer",      "NodePrepareResources", "NodeUnprepareResources"};
  return kNames[static_cast<size_t>(rpc)];
}

// Told about every call a front end answers: the agent's metrics count
// them (both APIs report through it).
class RpcObserver {
 public:
  virtual ~RpcObserver() = default;
  virtual void Rpc(devplug::Rpc rpc, StatusCode code, std::chrono::nanoseconds took) = 0;
};

}  // namespace devplug
