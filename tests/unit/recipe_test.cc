#include <gtest/gtest.h>

#include "model/device.h"
#include "modules/module_instance.h"

namespace devplug::modules {
namespace {

Device Dev(const std::string& id, Recipe r) {
  Device d;
  d.id = id;
  d.healthy = true;
  d.recipe = std::move(r);
  return d;
}

TEST(RecipeTest, MergeDeduplicatesAndJoins) {
  Recipe a;
  a.device_nodes = {{"/dev/vfio/vfio", "/dev/vfio/vfio", "rw"},
                    {"/dev/vfio/12", "/dev/vfio/12", "rw"}};
  a.mounts = {{"/opt/lib", "/lib/x", true}};
  a.envs = {{"PCI_RESOURCE_X", "0000:3b:00.0"}};
  a.annotations = {{"k", "1"}};
  a.cdi_devices = {"v.example/c=a"};
  Recipe b;
  b.device_nodes = {{"/dev/vfio/vfio", "/dev/vfio/vfio", "rw"},
                    {"/dev/vfio/13", "/dev/vfio/13", "rw"}};
  b.mounts = {{"/other", "/lib/x", false}};
  b.envs = {{"PCI_RESOURCE_X", "0000:3b:00.1"}, {"PCI_RESOURCE_X", "0000:3b:00.0"}};
  b.annotations = {{"k", "2"}};
  b.cdi_devices = {"v.example/c=a", "v.example/c=b"};

  Recipe out;
  out.Merge(a);
  out.Merge(b);
  ASSERT_EQ(out.device_nodes.size(), 3u);
  EXPECT_EQ(out.device_nodes[2].host_path, "/dev/vfio/13");
  ASSERT_EQ(out.mounts.size(), 1u);  // same container path: first wins
  EXPECT_EQ(out.mounts[0].host_path, "/opt/lib");
  ASSERT_EQ(out.envs.size(), 1u);
  EXPECT_EQ(out.envs[0].second, "0000:3b:00.0,0000:3b:00.1");
  ASSERT_EQ(out.annotations.size(), 1u);
  EXPECT_EQ(out.annotations[0].second, "2");
  EXPECT_EQ(out.cdi_devices, (std::vector<std::string>{"v.example/c=a", "v.example/c=b"}));
}

TEST(RecipeTest, EnvJoinDoesNotConfusePrefixes) {
  Recipe out;
  Recipe a, b;
  a.envs = {{"IDS", "gpu-10"}};
  b.envs = {{"IDS", "gpu-1"}};
  out.Merge(a);
  out.Merge(b);
  EXPECT_EQ(out.envs[0].second, "gpu-10,gpu-1");
}

// A static value with commas, the same on every device (nvidia's, generic's
// and solarflare's `envs`), is not doubled when two devices go to one
// container; ID lists still combine.
TEST(RecipeTest, EnvValuesWithCommasAreMergedItemByItem) {
  Recipe a, b, c;
  a.envs = {{"NVIDIA_DRIVER_CAPABILITIES", "compute,utility"}, {"IDS", "gpu-0"}};
  b.envs = {{"NVIDIA_DRIVER_CAPABILITIES", "compute,utility"}, {"IDS", "gpu-1"}};
  c.envs = {{"NVIDIA_DRIVER_CAPABILITIES", "utility,video"}, {"IDS", "gpu-1,gpu-2"}};
  Recipe out;
  out.Merge(a);
  out.Merge(b);
  ASSERT_EQ(out.envs.size(), 2u);
  EXPECT_EQ(out.envs[0].second, "compute,utility");
  EXPECT_EQ(out.envs[1].second, "gpu-0,gpu-1");
  out.Merge(c);
  EXPECT_EQ(out.envs[0].second, "compute,utility,video");
  EXPECT_EQ(out.envs[1].second, "gpu-0,gpu-1,gpu-2");
}

TEST(RecipeTest, DefaultRecipeCombinesRequestedDevicesOnly) {
  Recipe r0, r1, r2;
  r0.device_nodes = {{"/dev/kvm", "/dev/kvm", "rw"}};
  r1.device_nodes = {{"/dev/kvm", "/dev/kvm", "rw"}};
  r2.device_nodes = {{"/dev/other", "/dev/other", "rw"}};
  DeviceList list{Dev("a", r0), Dev("b", r1), Dev("c", r2)};
  Recipe out = DefaultRecipe(list, {"a", "b"});
  ASSERT_EQ(out.device_nodes.size(), 1u);
  EXPECT_EQ(out.device_nodes[0].host_path, "/dev/kvm");
}

}  // namespace
}  // namespace devplug::modules
