// GetPreferredAllocation by locality: the choice the kubelet should make
// when a container asks for several devices.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace devplug::common {

// Where a device sits. `group` is a second, finer locality inside a NUMA
// node whose members should go to one container together (an IOMMU group,
// an HCA, a PCIe switch); -1 when it has none.
struct Placement {
  std::string id;
  int numa_node = -1;
  int group = -1;
};

// Chooses `size` devices: all of `must_include` first, then the rest from as
// few NUMA nodes as possible, starting with the nodes must_include already
// uses, then the node that can hold the whole remainder with the least left
// over (keeping larger nodes free for larger requests), lower node first on
// ties. Inside a node, groups already used come first, then whole groups
// that fit the remainder (largest first), then the smallest group that has
// to be split. Devices
// without a NUMA node form their own bucket, used after real nodes on ties.
// Ties break by ID, so the answer is deterministic.
//
// `available` lists the candidates (it normally includes must_include).
// Returns fewer than `size` IDs only if there are not enough; returns all of
// must_include even if that is more than `size`.
std::vector<std::string> PackByLocality(const std::vector<Placement>& available,
                                        const std::vector<std::string>& must_include, size_t size);

// The same for devices that only have a NUMA node (no groups), over the IDs
// as the agent hands them in; numa_of(id) is -1 when unknown.
std::vector<std::string> PackByNuma(const std::vector<std::string_view>& available,
                                    const std::vector<std::string_view>& must_include, size_t size,
                                    const std::function<int(std::string_view)>& numa_of);

}  // namespace devplug::common
