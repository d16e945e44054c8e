// The pure parts of the hand-off before a move to DRA (api_handoff.h):
// which Node allocatable it sets to 0, which pods it waits for, and which
// PodResources says the kubelet admitted. The hand-off itself runs against
// the fake API server and the simulated kubelet in
// DraTest.AReloadToDraZeroesTheNodesAllocatableAndWaitsForThePodsSentThroughTheDevicePlugin.
#include "api_handoff.h"

#include <gtest/gtest.h>

namespace devplug {
namespace {

using Json = nlohmann::json;

TEST(DevicePluginHandoff, ZeroesOnlyTheNamesThatMoveAndReadAboveZero) {
  Json node = {{"status",
                {{"allocatable", {{"a.io/x", "4"}, {"a.io/y", "0"}, {"cpu", "2"}}},
                 {"capacity", {{"a.io/x", "4"}}}}}};
  EXPECT_EQ(ZeroAllocatable(node, {"a.io/x", "a.io/y", "a.io/absent"}),
            std::vector<std::string>{"a.io/x (was 4)"});
  EXPECT_EQ(node["status"]["allocatable"]["a.io/x"], "0");
  EXPECT_EQ(node["status"]["allocatable"]["cpu"], "2");
  EXPECT_FALSE(node["status"]["allocatable"].contains("a.io/absent"));
  // Capacity is the kubelet's: left as it is.
  EXPECT_EQ(node["status"]["capacity"]["a.io/x"], "4");
  // Done already: nothing to write.
  EXPECT_TRUE(ZeroAllocatable(node, {"a.io/x"}).empty());
  Json bare = Json::object();
  EXPECT_TRUE(ZeroAllocatable(bare, {"a.io/x"}).empty());
}

Json Pod(const std::string& name, const Json& containers, const std::string& phase = "Pending") {
  return {{"metadata", {{"name", name}, {"namespace", "ns"}}},
          {"spec", {{"containers", containers}}},
          {"status", {{"phase", phase}}}};
}

Json Container(const std::string& name, const Json& resources) {
  return {{"name", name}, {"resources", resources}};
}

TEST(DevicePluginHandoff, WaitsForUnfinishedPodsThatAskTheNameThroughTheDevicePlugin) {
  const Json limits = {{"limits", {{"a.io/x", "1"}}}};
  Json list = {{"items", Json::array()}};
  auto& items = list["items"];
  items.push_back(Pod("limits", Json::array({Container("c", limits)})));
  items.push_back(
      Pod("requests", Json::array({Container("c", {{"requests", {{"a.io/x", "1"}}}})}), "Running"));
  items.push_back(Pod("other", Json::array({Container("c", {{"limits", {{"a.io/z", "1"}}}})})));
  items.push_back(Pod("finished", Json::array({Container("c", limits)}), "Succeeded"));
  items.push_back(Pod("refused", Json::array({Container("c", limits)}), "Failed"));
  Json deleting = Pod("deleting", Json::array({Container("c", limits)}));
  deleting["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z";
  items.push_back(deleting);
  // Served through DRA: the scheduler mapped its container to a claim.
  Json claimed = Pod("claimed", Json::array({Container("c", limits)}));
  claimed["status"]["extendedResourceClaimStatus"] = {
      {"resourceClaimName", "claimed-1"},
      {"requestMappings", Json::array({{{"containerName", "c"}, {"resourceName", "a.io/x"}}})}};
  items.push_back(claimed);
  // Its other container is not mapped: that one goes through Allocate.
  Json half = Pod("half", Json::array({Container("c", limits), Container("d", limits)}));
  half["status"]["extendedResourceClaimStatus"] = claimed["status"]["extendedResourceClaimStatus"];
  items.push_back(half);
  Json init = Pod("init", Json::array());
  init["spec"]["initContainers"] = Json::array({Container("i", limits)});
  items.push_back(init);
  EXPECT_EQ(AskingDevicePlugin(list, {"a.io/x"}),
            (std::set<std::string>{"ns/half", "ns/init", "ns/limits", "ns/requests"}));
  EXPECT_EQ(AskingDevicePlugin(list, {"a.io/x", "a.io/z"}).count("ns/other"), 1u);
  EXPECT_TRUE(AskingDevicePlugin(Json::object(), {"a.io/x"}).empty());
}

TEST(DevicePluginHandoff, AdmittedMeansPodResourcesListsADeviceOfTheName) {
  PodSnapshot s;
  s.holders["a.io/x"]["d0"] = Holder{"ns", "p1", "c"};
  s.holders["a.io/x"]["d1"] = Holder{"ns", "p1", "c"};
  s.holders["a.io/z"]["d0"] = Holder{"ns", "p2", "c"};
  EXPECT_EQ(HoldingDevices(s, {"a.io/x"}), std::set<std::string>{"ns/p1"});
  EXPECT_EQ(HoldingDevices(s, {"a.io/x", "a.io/z"}), (std::set<std::string>{"ns/p1", "ns/p2"}));
  EXPECT_TRUE(HoldingDevices(s, {"a.io/y"}).empty());
}

TEST(DraHandoff, TheClaimsOfUnfinishedPodsNotPreparedYet) {
  Json list = {{"items", Json::array()}};
  auto& items = list["items"];
  Json tmpl = Pod("tmpl", Json::array());
  tmpl["status"]["resourceClaimStatuses"] =
      Json::array({{{"name", "gpu"}, {"resourceClaimName", "tmpl-gpu"}}, {{"name", "none"}}});
  items.push_back(tmpl);
  Json direct = Pod("direct", Json::array());
  direct["spec"]["resourceClaims"] =
      Json::array({{{"name", "x"}, {"resourceClaimName", "shared"}}});
  items.push_back(direct);
  Json ext = Pod("ext", Json::array());
  ext["status"]["extendedResourceClaimStatus"] = {{"resourceClaimName", "ext-claim"}};
  items.push_back(ext);
  Json done = Pod("done", Json::array(), "Succeeded");
  done["status"]["resourceClaimStatuses"] =
      Json::array({{{"name", "gpu"}, {"resourceClaimName", "done-gpu"}}});
  items.push_back(done);
  EXPECT_EQ(UnpreparedClaims(list, {"ns/shared"}),
            (std::set<std::string>{"ns/ext-claim", "ns/tmpl-gpu"}));
  EXPECT_TRUE(UnpreparedClaims(Json::object(), {}).empty());
}

TEST(DraHandoff, AllocatedFromTheDriversPoolOnThisNode) {
  auto claim = [](const std::string& driver, const std::string& pool) {
    return Json{{"status",
                 {{"allocation",
                   {{"devices",
                     {{"results",
                       Json::array({{{"driver", driver}, {"pool", pool}, {"device", "d"}}})}}}}}}}};
  };
  EXPECT_TRUE(AllocatedFrom(claim("a.io", "node-1"), "a.io", "node-1"));
  EXPECT_FALSE(AllocatedFrom(claim("b.io", "node-1"), "a.io", "node-1"));
  EXPECT_FALSE(AllocatedFrom(claim("a.io", "node-2"), "a.io", "node-1"));
  EXPECT_FALSE(AllocatedFrom(Json{{"status", Json::object()}}, "a.io", "node-1"));
}

}  // namespace
}  // namespace devplug
