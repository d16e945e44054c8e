// What a ResourceClaim, as the API server sends it, allocates to one DRA
// driver on one node: pure reading and checking of the claim's JSON, apart
// from the driver that acts on it (and fuzzed alone: dra_json_fuzz.cc).
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace devplug::dra {

// A claim as the kubelet names it.
struct ClaimRef {
  std::string ns, uid, name;
};

// One allocation result: a device for one of the claim's requests.
struct ClaimResult {
  std::string request;
  std::string device;  // its DRA name
  // A shared device's (allowMultipleAllocations): the share the scheduler
  // made for this result, and how many of the device's "shares" it
  // consumes; "" and 1 for any other.
  std::string share_id;
  int64_t shares = 1;
  bool operator==(const ClaimResult&) const = default;
};

// The allocation results of `object` (claim `claim` as the API server sent
// it) for `driver`'s devices in `node`'s pool. FAILED_PRECONDITION, naming
// the claim, for one of another UID, not allocated, with no device of this
// driver, with one of another pool, asking adminAccess, consuming shares
// that are no whole number, or with a field of the wrong type. Never throws.
StatusOr<std::vector<ClaimResult>> ClaimResults(const ClaimRef& claim, const nlohmann::json& object,
                                                const std::string& driver, const std::string& node);

}  // namespace devplug::dra
