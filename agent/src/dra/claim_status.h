// What a DRA driver says of a claim it prepared: the devices the kubelet is
// told, and its entries of the claim's status.devices (resource.k8s.io/v1
// AllocatedDeviceStatus), one per device, or share of a shared device, that
// it gave the claim. Pure functions, apart from the driver that sends them;
// thread-safe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dra/checkpoint.h"

namespace devplug::dra {

// A claim's prepared devices as the kubelet is told them: one per
// allocation result (a share that took several of the module's devices is
// one).
std::vector<PreparedDevice> KubeletDevices(const std::vector<PreparedDevice>& devices);

// The entries for a claim's prepared `devices` of `driver` on `node`: the
// device's key (driver, pool, device, shareID), condition Ready (reason
// Prepared, since `now`, RFC 3339), `data` with the module's devices and
// the CDI devices, and `networkData` where the module named the device's
// network interface (a share of several module devices: the first's).
std::vector<nlohmann::json> StatusEntries(const std::string& driver, const std::string& node,
                                          const std::vector<PreparedDevice>& devices,
                                          const std::string& now);

// `status` (a claim's) with `entries` in place of `driver`'s entries of
// `node`'s pool; other drivers' and pools' are kept. No entry left: no
// `devices`.
void ReplaceStatusEntries(nlohmann::json& status, const std::string& driver,
                          const std::string& node, std::vector<nlohmann::json> entries);

}  // namespace devplug::dra
