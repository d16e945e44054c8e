// The kubelet's calls (the device plugin API's, and DRA's), as the services
// report them and the metrics count them.
#pragma once

#include <cstddef>
#include <string_view>

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

}  // namespace devplug
