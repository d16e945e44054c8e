// What a ResourceClaim allocates to this driver on this node, read from
// the claim as the API server sends it.
#include "dra/claim_results.h"

#include <gtest/gtest.h>

namespace devplug::dra {
namespace {

using Json = nlohmann::json;

Json ClaimWith(Json results) {
  return {{"metadata", {{"uid", "u1"}}},
          {"status", {{"allocation", {{"devices", {{"results", std::move(results)}}}}}}}};
}

const ClaimRef kRef{"ns", "u1", "c"};

TEST(ClaimResultsTest, ADevicesResultsOfThisDriverAndPool) {
  auto r = ClaimResults(
      kRef,
      ClaimWith({{{"request", "a"}, {"driver", "d"}, {"pool", "n"}, {"device", "x"}},
                 {{"request", "b"}, {"driver", "other"}, {"pool", "m"}, {"device", "y"}}}),
      "d", "n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, (std::vector<ClaimResult>{{"a", "x", "", 1}}));
}

// Consumable capacity: the scheduler's share ID and the shares consumed.
TEST(ClaimResultsTest, AShareOfASharedDeviceCarriesItsIdAndTheSharesItTakes) {
  auto r = ClaimResults(kRef,
                        ClaimWith({{{"request", "a"},
                                    {"driver", "d"},
                                    {"pool", "n"},
                                    {"device", "gpu-0"},
                                    {"shareID", "9f2c"},
                                    {"consumedCapacity", {{"shares", "2"}, {"memory", "1Gi"}}}}}),
                        "d", "n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, (std::vector<ClaimResult>{{"a", "gpu-0", "9f2c", 2}}));
  for (const char* bad : {"0", "1500m", "", "99999999999"}) {
    auto refused = ClaimResults(kRef,
                                ClaimWith({{{"request", "a"},
                                            {"driver", "d"},
                                            {"pool", "n"},
                                            {"device", "gpu-0"},
                                            {"consumedCapacity", {{"shares", bad}}}}}),
                                "d", "n");
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("not a whole number"), std::string::npos)
        << refused.status().message();
  }
}

}  // namespace
}  // namespace devplug::dra
