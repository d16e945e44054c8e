// What devplugd says of a claim it prepared: the kubelet's devices and the
// claim's status.devices entries.
#include "dra/claim_status.h"

#include <gtest/gtest.h>

namespace devplug::dra {
namespace {

using Json = nlohmann::json;

// A share that took two of the module's devices is one answer and one entry.
TEST(ClaimStatusTest, OneEntryPerDeviceOrShare) {
  const std::vector<PreparedDevice> devices = {{"r", "n", "gpu", "gpu::0", {"k=u-r"}, "s1", "", ""},
                                               {"r", "n", "gpu", "gpu::1", {"k=u-r"}, "s1", "", ""},
                                               {"r", "n", "nic0", "nic0", {"k=u-r"}, "", "", ""}};
  EXPECT_EQ(KubeletDevices(devices).size(), 2u);
  const auto entries = StatusEntries("d.example.com", "n", devices, "2026-11-28T08:00:00Z");
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0]["shareID"], "s1");
  EXPECT_EQ(entries[0]["data"]["moduleDevices"], (Json{"gpu::0", "gpu::1"}));
  EXPECT_EQ(entries[0]["conditions"][0]["lastTransitionTime"], "2026-11-28T08:00:00Z");
  EXPECT_FALSE(entries[1].contains("shareID"));
}

// A device whose module named its interface (macvtap's link) says so in
// networkData; one that did not has none.
TEST(ClaimStatusTest, TheModulesInterfaceIsTheEntrysNetworkData) {
  const std::vector<PreparedDevice> devices = {
      {"r", "n", "mvt0", "mvt0", {}, "", "mvt0", "52:54:00:12:34:56"},
      {"r", "n", "mvt1", "mvt1", {}, "", "", "52:54:00:12:34:57"},
      {"r", "n", "kvm", "kvm", {}, "", "", ""}};
  const auto entries = StatusEntries("d.example.com", "n", devices, "2026-11-28T08:00:00Z");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0]["networkData"],
            (Json{{"interfaceName", "mvt0"}, {"hardwareAddress", "52:54:00:12:34:56"}}));
  EXPECT_EQ(entries[1]["networkData"], (Json{{"hardwareAddress", "52:54:00:12:34:57"}}));
  EXPECT_FALSE(entries[2].contains("networkData"));
}

// Other drivers' and pools' entries stay; ours are replaced, or go.
TEST(ClaimStatusTest, OnlyThisDriversEntriesOfThisPoolAreReplaced) {
  Json status = {{"devices",
                  {{{"driver", "d.example.com"}, {"pool", "n"}, {"device", "old"}},
                   {{"driver", "other.example.com"}, {"pool", "n"}, {"device", "x"}},
                   {{"driver", "d.example.com"}, {"pool", "m"}, {"device", "y"}}}}};
  ReplaceStatusEntries(status, "d.example.com", "n",
                       {Json{{"driver", "d.example.com"}, {"pool", "n"}, {"device", "new"}}});
  ASSERT_EQ(status["devices"].size(), 3u);
  EXPECT_EQ(status["devices"][2]["device"], "new");
  Json only = {{"devices", {{{"driver", "d.example.com"}, {"pool", "n"}, {"device", "a"}}}}};
  ReplaceStatusEntries(only, "d.example.com", "n", {});
  EXPECT_FALSE(only.contains("devices"));
  Json none;  // a claim with no status yet
  ReplaceStatusEntries(none, "d.example.com", "n", {});
  EXPECT_FALSE(none.is_object() && none.contains("devices"));
}

}  // namespace
}  // namespace devplug::dra
