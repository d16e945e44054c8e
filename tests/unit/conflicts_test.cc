#include "modules/conflicts.h"

#include <gtest/gtest.h>

namespace devplug {
namespace {

DeviceListPtr List(std::vector<Recipe> recipes) {
  DeviceList l;
  for (size_t i = 0; i < recipes.size(); ++i) {
    Device d;
    d.id = "d" + std::to_string(i);
    d.healthy = true;
    d.recipe = std::move(recipes[i]);
    l.push_back(std::move(d));
  }
  return std::make_shared<const DeviceList>(std::move(l));
}

Recipe Env(const std::string& k, const std::string& v) {
  Recipe r;
  r.envs = {{k, v}};
  return r;
}
Recipe Node(const std::string& host, const std::string& container) {
  Recipe r;
  r.device_nodes = {{host, container, "rw"}};
  return r;
}

TEST(ConflictsTest, SameEnvKeyInTwoResourcesIsReported) {
  auto w = FindRecipeConflicts(
      {{"nvidia.com/gpu", List({Env("NVIDIA_VISIBLE_DEVICES", "GPU-a")})},
       {"example.com/gpu-shared", List({Env("NVIDIA_VISIBLE_DEVICES", "GPU-b")})}});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("resources \"nvidia.com/gpu\" and \"example.com/gpu-shared\" can both set "
                      "env NVIDIA_VISIBLE_DEVICES"),
            std::string::npos)
      << w[0];
}

TEST(ConflictsTest, IdenticalSharedNodesAreFineDifferentOnesAreNot) {
  // Both hand out the same control node: no conflict.
  EXPECT_TRUE(FindRecipeConflicts({{"a.example/x", List({Node("/dev/ctl", "/dev/ctl")})},
                                   {"a.example/y", List({Node("/dev/ctl", "/dev/ctl")})}})
                  .empty());
  // Same container path, different host nodes: conflict.
  auto w = FindRecipeConflicts({{"a.example/x", List({Node("/dev/acc0", "/dev/acc")})},
                                {"a.example/y", List({Node("/dev/acc1", "/dev/acc")})}});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("container path /dev/acc"), std::string::npos) << w[0];
}

TEST(ConflictsTest, PerDeviceValuesOfOneKeyConflictEvenIfOneValueMatches) {
  auto w = FindRecipeConflicts({{"a.example/x", List({Env("IDS", "1"), Env("IDS", "2")})},
                                {"a.example/y", List({Env("IDS", "1")})}});
  EXPECT_EQ(w.size(), 1u);
}

TEST(ConflictsTest, DisjointResourcesAreQuiet) {
  EXPECT_TRUE(
      FindRecipeConflicts({{"a.example/x", List({Env("X_IDS", "1"), Node("/dev/x", "/dev/x")})},
                           {"a.example/y", List({Env("Y_IDS", "1"), Node("/dev/y", "/dev/y")})},
                           {"a.example/z", nullptr}})
          .empty());
}

}  // namespace
}  // namespace devplug
