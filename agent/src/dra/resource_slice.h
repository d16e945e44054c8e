// A resource's devices as DRA publishes them: the ResourceSlices of one
// pool on this node (resource.k8s.io/v1), and the name DRA knows each
// device by.
//
// An Unhealthy device stays in the pool with a taint (devplug.io/unhealthy,
// the resource's effect, the module's reason as its value where it can be
// one): new claims avoid it (NoSchedule), pods that hold it see why, and
// the taint goes when the module says it is Healthy again. A device held
// back while its release runs leaves the pool until the release ends.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/device.h"

namespace devplug::dra {

// The most devices one ResourceSlice may list (the API server refuses
// more), and when any of them carries a taint.
inline constexpr size_t kMaxDevicesPerSlice = 128;
inline constexpr size_t kMaxTaintedDevicesPerSlice = 64;

// The taint an Unhealthy device carries.
inline constexpr char kUnhealthyTaintKey[] = "devplug.io/unhealthy";
struct UnhealthyTaint {
  std::string effect = "NoSchedule";  // "NoSchedule", "NoExecute" or "None"
  // When the device (by DRA name) was first seen Unhealthy, RFC 3339;
  // none: no timeAdded.
  std::function<std::string(const std::string& device)> time_added;
};

// A device ID as a DRA device name: a DNS label (at most 63 characters of
// [a-z0-9-], starting and ending alphanumeric). An ID that is a label
// already keeps its spelling. Any other is lower-cased, every other
// character becomes '-', and a hash of the whole ID is appended ("-" and 8
// hex digits), so that IDs that spell alike ("0000:3b:00.0", "0000-3b-00-0")
// stay apart and a device keeps its name whatever else the list holds.
std::string DeviceName(std::string_view id);

// The DRA name of module device `d`: DeviceName of its ID or, for one share
// of a shared device, of that device.
std::string DraName(const Device& d);

// A device as DRA knows it: one module device, or the shares of a shared
// one (ABI 1.10), in list order (where its first share is).
struct DraDevice {
  const Device* device;  // the module device, or the first share
  size_t shares = 0;     // 0: not shared
  // Why it is Unhealthy: the device, or its first Unhealthy share that is
  // not held back for a release; null: Healthy.
  const Device* unhealthy = nullptr;
  // Offered in the pool: not held back, or one share at least not.
  bool offered = true;
};
std::vector<DraDevice> DraDevices(const DeviceList& devices);

// The capacity a shared device has of claims (ABI 1.10's set_share_of): its
// number of shares, one taken by a claim unless it asks more.
inline constexpr char kSharesCapacity[] = "shares";

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
// where known, "numaNode"; the module's own. The shares of a shared device
// are one device, allowMultipleAllocations, with a capacity "shares".
std::vector<nlohmann::json> PoolDevices(const DeviceList& devices,
                                        const UnhealthyTaint& taint = {});
// The attributes of module device `d` as its slice publishes them (one
// share of a shared device: that device's).
nlohmann::json DeviceAttributes(const Device& d);
// How many devices each slice of a pool of `devices` may list.
size_t MaxDevicesPerSlice(const std::vector<nlohmann::json>& devices);

// The `count` slices of the pool (at least one, which may list no device:
// an empty pool is still published), device i in slice slice_of[i].
std::vector<nlohmann::json> Slices(const Pool& pool, std::vector<nlohmann::json> devices,
                                   const std::vector<size_t>& slice_of, size_t count);

// Every slice of the pool for `devices`, filled in list order.
std::vector<nlohmann::json> Slices(const Pool& pool, const DeviceList& devices,
                                   const UnhealthyTaint& taint = {});

}  // namespace devplug::dra
