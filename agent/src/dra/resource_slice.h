// A resource's devices as DRA publishes them: the ResourceSlices of one
// pool on this node (resource.k8s.io/v1), and the name DRA knows each
// device by.
//
// Only devices the kubelet would be told are Healthy go in: an Unhealthy
// device, or one held back while its release runs, leaves the pool (the
// scheduler cannot allocate it) and comes back with the next list.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/device.h"

namespace devplug::dra {

// The most devices one ResourceSlice may list (the API server refuses more).
inline constexpr size_t kMaxDevicesPerSlice = 128;

// A device ID as a DRA device name: a DNS label (at most 63 characters of
// [a-z0-9-], starting and ending alphanumeric). An ID that is a label
// already keeps its spelling. Any other is lower-cased, every other
// character becomes '-', and a hash of the whole ID is appended ("-" and 8
// hex digits), so that IDs that spell alike ("0000:3b:00.0", "0000-3b-00-0")
// stay apart and a device keeps its name whatever else the list holds.
std::string DeviceName(std::string_view id);

// A name as a Kubernetes object name (a DNS subdomain: at most 253
// characters of [a-z0-9.-], alphanumeric at both ends), with the same rules.
std::string ObjectName(std::string_view text);

struct Pool {
  std::string driver;  // the DRA driver's name (a DNS subdomain)
  std::string node;    // spec.nodeName, and the pool's name
  // Raised whenever the pool's set of slices changes, or a device moves
  // from one slice to another (slice_publisher.h).
  int64_t generation = 1;
};

// The name of slice `index` of `pool`: "<node>-<driver>-<hash>-<index>",
// the hash of the (node, driver) pair, so that pairs that spell alike once
// joined by '-' ("a-b" and "c", "a" and "b-c") name different slices.
std::string SliceName(const Pool& pool, size_t index);

// The devices the pool lists, as its slices list them, in list order.
// Attributes, in the driver's domain: "id" (the module's device ID) and,
// where known, "numaNode"; the module's own.
std::vector<nlohmann::json> PoolDevices(const DeviceList& devices);

// The `count` slices of the pool (at least one, which may list no device:
// an empty pool is still published), device i in slice slice_of[i].
std::vector<nlohmann::json> Slices(const Pool& pool, std::vector<nlohmann::json> devices,
                                   const std::vector<size_t>& slice_of, size_t count);

// Every slice of the pool for `devices`, filled in list order.
std::vector<nlohmann::json> Slices(const Pool& pool, const DeviceList& devices);

}  // namespace devplug::dra
