#include "dra/claim_results.h"

#include <algorithm>

#include "dra/resource_slice.h"

namespace devplug::dra {

using Json = nlohmann::json;

namespace {

StatusOr<std::vector<ClaimResult>> ResultsOf(const ClaimRef& c, const Json& claim,
                                             const std::string& driver, const std::string& node) {
  if (!claim.is_object())
    return FailedPreconditionError(StrCat("claim ", c.ns, "/", c.name, " is not an object"));
  const std::string uid = claim.value("metadata", Json::object()).value("uid", "");
  if (uid != c.uid)
    return FailedPreconditionError(StrCat("claim ", c.ns, "/", c.name, " has UID ", uid, ", not ",
                                          c.uid, " (it was deleted and made again)"));
  std::vector<ClaimResult> out;
  const Json::json_pointer at("/status/allocation/devices/results");
  const Json results = claim.contains(at) ? claim.at(at) : Json();
  if (!results.is_array())
    return FailedPreconditionError(StrCat("claim ", c.ns, "/", c.name, " is not allocated"));
  for (const Json& r : results) {
    if (r.value("driver", "") != driver) continue;
    if (r.value("adminAccess", false))
      return FailedPreconditionError(StrCat(
          "claim ", c.ns, "/", c.name, " asks adminAccess to device \"", r.value("device", ""),
          "\": this driver gives a device to one claim at a time (its set-up and release would "
          "run under the workload's pod); use a claim of its own"));
    const std::string pool = r.value("pool", "");
    if (pool != node)
      return FailedPreconditionError(StrCat("claim ", c.ns, "/", c.name, ": device \"",
                                            r.value("device", ""), "\" is in pool \"", pool,
                                            "\", not this node's (\"", node, "\")"));
    ClaimResult result{r.value("request", ""), r.value("device", ""), r.value("shareID", ""), 1};
    const Json::json_pointer shares(StrCat("/consumedCapacity/", kSharesCapacity));
    if (r.contains(shares)) {
      const std::string n = r.at(shares).get<std::string>();
      result.shares = 0;
      for (char ch : n) {
        if (ch < '0' || ch > '9' || result.shares > 1'000'000) {
          result.shares = 0;
          break;
        }
        result.shares = result.shares * 10 + (ch - '0');
      }
      if (result.shares < 1)
        return FailedPreconditionError(StrCat("claim ", c.ns, "/", c.name, ": device \"",
                                              result.device, "\" is given \"", n,
                                              "\" shares, not a whole number of them"));
    }
    out.push_back(std::move(result));
  }
  if (out.empty())
    return FailedPreconditionError(
        StrCat("claim ", c.ns, "/", c.name, " has no device of driver ", driver));
  return out;
}

}  // namespace

StatusOr<std::vector<ClaimResult>> ClaimResults(const ClaimRef& c, const Json& claim,
                                                const std::string& driver,
                                                const std::string& node) {
  try {
    return ResultsOf(c, claim, driver, node);
  } catch (const Json::exception& e) {
    // A field of the wrong type fails this claim only.
    return FailedPreconditionError(
        StrCat("claim ", c.ns, "/", c.name, " is malformed: ", e.what()));
  }
}

StatusOr<std::vector<Pick>> PickDevices(
    const std::vector<ClaimResult>& results,
    const std::map<std::string, std::vector<std::string>>& ids,
    const std::function<std::string(const std::string& id)>& busy) {
  std::vector<Pick> picks;
  for (const ClaimResult& r : results) {
    auto it = ids.find(r.device);
    if (it == ids.end())
      return FailedPreconditionError(StrCat("device \"", r.device, "\" is not on this node now"));
    if (r.share_id.empty() && it->second.size() == 1) {
      if (std::string why = busy(it->second.front()); !why.empty())
        return FailedPreconditionError(StrCat("device \"", r.device, "\" ", why));
      picks.push_back({&r, it->second.front()});
      continue;
    }
    int64_t wanted = r.shares;
    for (const std::string& id : it->second) {
      if (wanted == 0) break;
      if (std::any_of(picks.begin(), picks.end(), [&](const Pick& p) { return p.id == id; }) ||
          !busy(id).empty())
        continue;
      picks.push_back({&r, id});
      --wanted;
    }
    if (wanted > 0)
      return FailedPreconditionError(
          StrCat("device \"", r.device, "\" has ", r.shares - wanted, " free share(s) of ",
                 it->second.size(), " now, and the claim's result",
                 r.share_id.empty() ? "" : StrCat(" (share ", r.share_id, ")"), " takes ", r.shares,
                 ": the others are prepared for other claims or still being released"));
  }
  return picks;
}

}  // namespace devplug::dra
