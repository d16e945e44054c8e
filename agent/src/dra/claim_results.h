// What a ResourceClaim, as the API server sends it, allocates to one DRA
// driver on one node: pure reading and checking of the claim's JSON, apart
// from the driver that acts on it (and fuzzed alone: dra_json_fuzz.cc).
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace devplug::dra {

// A claim as the kubelet names it.
struct ClaimRef {
  std::string ns, uid, name;
};

// The allocation results of `object` (claim `claim` as the API server sent
// it) for `driver`'s devices in `node`'s pool, as (request, device).
// FAILED_PRECONDITION, naming the claim, for one of another UID, not
// allocated, with no device of this driver, with one of another pool, asking
// adminAccess, or with a field of the wrong type. Never throws.
StatusOr<std::vector<std::pair<std::string, std::string>>> ClaimResults(
    const ClaimRef& claim, const nlohmann::json& object, const std::string& driver,
    const std::string& node);

}  // namespace devplug::dra
