// MIG naming and capability files: pure functions, shared by the module and
// its tests.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace devplug::nvidia {

// The profile name NVIDIA's tools give a MIG device: "<g>g.<GB>gb", or
// "<c>c.<g>g.<GB>gb" when its compute instance has fewer slices (c) than its
// GPU instance (g). GB = round(F * ceil(parent total / 1 GiB)), F = the MIG
// memory's share of the parent's total rounded up to eighths. "" when the
// inputs cannot name a profile (no slices, no memory, more memory than the
// parent has).
std::string MigProfileName(unsigned gi_slices, unsigned ci_slices, unsigned long long memory_mib,
                           unsigned long long parent_total_bytes);

// Whether `name` is shaped like a profile name ("1g.10gb", "1c.3g.40gb").
bool IsMigProfileName(std::string_view name);

// N of the "DeviceFileMinor: N" line of a capability's access file
// (/proc/driver/nvidia/capabilities/.../access); nullopt without one.
std::optional<unsigned> ParseCapabilityMinor(std::string_view text);

}  // namespace devplug::nvidia
