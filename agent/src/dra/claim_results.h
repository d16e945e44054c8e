// What a ResourceClaim, as the API server sends it, allocates to one DRA
// driver on one node: pure reading and checking of the claim's JSON, apart
// from the driver that acts on it (and fuzzed alone: dra_json_fuzz.cc).
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
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

// One module device a result is prepared as.
struct Pick {
  const ClaimResult* result;
  std::string id;
};

// The module devices `results` are prepared as, from `ids` (a DRA device's
// name -> its module devices: one, or a shared device's shares). `busy`
// says why another claim has a module device ("is prepared for claim ...",
// "is still being released for claim ..."), "" when it is free. An unshared
// device must be free; a share takes as many free shares of its device as
// it consumes, the first in `ids`' order. FAILED_PRECONDITION, naming the
// device, when a device is not there or not enough of it is free.
StatusOr<std::vector<Pick>> PickDevices(
    const std::vector<ClaimResult>& results,
    const std::map<std::string, std::vector<std::string>>& ids,
    const std::function<std::string(const std::string& id)>& busy);

}  // namespace devplug::dra
