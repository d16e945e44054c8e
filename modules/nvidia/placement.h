// Which devices GetPreferredAllocation offers first: pure functions over the
// devices' placement, tested without NVML.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "devplug/common/cxx_module.h"
#include "session.h"

namespace devplug::nvidia {

using common::Ids;

// Where a MIG device sits: its GPU (parent UUID) and that GPU's NUMA node
// (-1: unknown). An ID the module does not know is a parent of its own.
struct Place {
  std::string parent;
  int numa_node = -1;
};

// MIG devices from as few GPUs as possible: the GPUs must_include uses
// first, then the GPU that holds the whole remainder with the least left
// over, else the GPU with the most free devices; NUMA breaks ties (the node
// already used, then the lower one), then the GPU's UUID.
std::vector<std::string> PreferByParent(const Ids& available, const Ids& must_include, size_t size,
                                        const std::function<Place(std::string_view)>& place_of);

// The best set of `size` GPUs containing must_include: most NVLinks between
// its members, then the closest PCIe paths (`inv`'s links and levels).
// Exhaustive over the candidates when that is small (8 GPUs: at most 70
// sets), greedy beyond.
std::vector<std::string> PreferByTopology(const Inventory& inv, const Ids& available,
                                          const Ids& must_include, size_t size);

}  // namespace devplug::nvidia
