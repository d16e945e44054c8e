// What crosses the ABI into a device list: the sink members a module calls
// during list_devices(), checked directly.
#include "modules/abi_sinks.h"

#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "model/dra_names.h"
#include "sysfs_fixture.h"
#include "test_util.h"

namespace devplug::modules {
namespace {

// ABI 1.6: a device on several NUMA nodes. Duplicates go, the list is sorted,
// numa_node becomes the lowest; one node is plain numa_node again; bad
// input leaves the device as it was.
TEST(AbiSinksTest, SetNumaNodesGivesADeviceEveryNode) {
  DeviceSink sink;
  devplug_device_sink* c = &sink.c;
  EXPECT_EQ(c->set_numa_nodes(c, nullptr, 0), -ENOENT);  // no device yet
  ASSERT_EQ(c->add_device(c, "a", DEVPLUG_HEALTHY, 3, nullptr), 0);
  const int32_t nodes[] = {1, 0, 1};
  ASSERT_EQ(c->set_numa_nodes(c, nodes, 3), 0);
  EXPECT_EQ(sink.list.back().Nodes(), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(sink.list.back().numa_node, 0);

  ASSERT_EQ(c->add_device(c, "b", DEVPLUG_HEALTHY, DEVPLUG_NO_NUMA_NODE, nullptr), 0);
  const int32_t one[] = {2, 2};
  ASSERT_EQ(c->set_numa_nodes(c, one, 2), 0);
  EXPECT_EQ(sink.list.back().numa_node, 2);
  EXPECT_TRUE(sink.list.back().numa_nodes.empty());
  EXPECT_EQ(sink.list.back().Nodes(), (std::vector<int32_t>{2}));

  ASSERT_EQ(c->add_device(c, "c", DEVPLUG_HEALTHY, 1, nullptr), 0);
  const int32_t bad[] = {0, -1};
  EXPECT_EQ(c->set_numa_nodes(c, bad, 2), -EINVAL);
  const int32_t huge[] = {0, 4096};
  EXPECT_EQ(c->set_numa_nodes(c, huge, 2), -EINVAL);
  EXPECT_EQ(c->set_numa_nodes(c, nullptr, 2), -EINVAL);
  EXPECT_EQ(sink.list.back().Nodes(), (std::vector<int32_t>{1}));
  EXPECT_EQ(c->set_numa_nodes(c, nullptr, 0), 0);  // none
  EXPECT_TRUE(sink.list.back().Nodes().empty());

  // After a refused add_device, there is nothing to set.
  EXPECT_EQ(c->add_device(c, "c", DEVPLUG_HEALTHY, 1, nullptr), -EEXIST);
  EXPECT_EQ(c->set_numa_nodes(c, nodes, 3), -ENOENT);
}

// ABI 1.9: a device's PCI function, normalised, and the root complex its
// sysfs folder hangs under, read from host_root as the kernel lays it out.
TEST(AbiSinksTest, APciAddressBringsItsRootComplex) {
  testing::TempDir root;
  testing::SysfsFixture fx(root.path());
  fx.AddPci({.address = "0000:3a:00.0", .class_code = 0x060400});  // the root port
  fx.AddPci(
      {.address = "0000:3b:00.0", .vendor = 0x10de, .device = 0x2330, .parent = "0000:3a:00.0"});
  DeviceSink sink(fx.root());
  devplug_device_sink* c = &sink.c;
  EXPECT_EQ(c->set_pci_address(c, "0000:3b:00.0"), -ENOENT);  // no device yet
  ASSERT_EQ(c->add_device(c, "gpu0", DEVPLUG_HEALTHY, 0, nullptr), 0);
  ASSERT_EQ(c->set_pci_address(c, "3B:00.0"), 0);
  EXPECT_EQ(sink.list.back().pci_address, "0000:3b:00.0");
  EXPECT_EQ(sink.list.back().pcie_root, "pci0000:3a");

  // A function sysfs does not show: the address, no root.
  ASSERT_EQ(c->add_device(c, "gpu1", DEVPLUG_HEALTHY, 0, nullptr), 0);
  ASSERT_EQ(c->set_pci_address(c, "0000:5e:00.0"), 0);
  EXPECT_EQ(sink.list.back().pci_address, "0000:5e:00.0");
  EXPECT_EQ(sink.list.back().pcie_root, "");

  ASSERT_EQ(c->add_device(c, "gpu2", DEVPLUG_HEALTHY, 0, nullptr), 0);
  EXPECT_EQ(c->set_pci_address(c, "0000:3b:20.0"), -EINVAL);  // device 0x20
  EXPECT_EQ(c->set_pci_address(c, nullptr), -EINVAL);
  EXPECT_EQ(sink.list.back().pci_address, "");
  ASSERT_EQ(sink.attribute_problems.size(), 2u);
  EXPECT_EQ(sink.attribute_problems[0], "device \"gpu2\": \"0000:3b:20.0\" is no PCI address");
}

// ABI 1.9: attributes and capacities, each checked as resource.k8s.io/v1
// checks them; a refused one leaves the device as it was and says why.
TEST(AbiSinksTest, AttributesAreCheckedAndKeptInOrder) {
  DeviceSink sink;
  devplug_device_sink* c = &sink.c;
  EXPECT_EQ(c->set_attribute_int(c, "n", 1), -ENOENT);
  ASSERT_EQ(c->add_device(c, "a", DEVPLUG_HEALTHY, 0, nullptr), 0);
  EXPECT_EQ(c->set_attribute_string(c, "model", "H100"), 0);
  EXPECT_EQ(c->set_attribute_int(c, "gpu.example.com/cores", -3), 0);
  EXPECT_EQ(c->set_attribute_bool(c, "mig", 1), 0);
  EXPECT_EQ(c->set_attribute_version(c, "firmware", "1.2.3-rc.1+build.5"), 0);
  EXPECT_EQ(c->set_capacity(c, "memory", 80ull << 30), 0);
  using T = DeviceAttribute::Type;
  const std::vector<DeviceAttribute> want = {{"model", T::kString, "H100", 0},
                                             {"gpu.example.com/cores", T::kInt, "", -3},
                                             {"mig", T::kBool, "", 1},
                                             {"firmware", T::kVersion, "1.2.3-rc.1+build.5", 0},
                                             {"memory", T::kCapacity, "", 80ll << 30}};
  EXPECT_EQ(sink.list.back().attributes, want);
  EXPECT_TRUE(sink.attribute_problems.empty());

  EXPECT_EQ(c->set_attribute_string(c, "model", "again"), -EEXIST);
  EXPECT_EQ(c->set_capacity(c, "mig", 1), -EEXIST) << "one set of names for both";
  EXPECT_EQ(c->set_attribute_string(c, "id", "x"), -EINVAL) << "the agent's own";
  EXPECT_EQ(c->set_attribute_int(c, "resource.kubernetes.io/numaNode", 1), -EINVAL);
  EXPECT_EQ(c->set_attribute_int(c, "9lives", 1), -EINVAL);
  EXPECT_EQ(c->set_attribute_int(c, "a-b", 1), -EINVAL);
  EXPECT_EQ(c->set_attribute_int(c, std::string(33, 'x').c_str(), 1), -EINVAL);
  EXPECT_EQ(c->set_attribute_int(c, "Example.com/x", 1), -EINVAL);
  EXPECT_EQ(c->set_attribute_int(c, nullptr, 1), -EINVAL);
  EXPECT_EQ(c->set_attribute_string(c, "long", std::string(65, 'v').c_str()), -EINVAL);
  EXPECT_EQ(c->set_attribute_string(c, "bytes", "\xff"), -EINVAL);
  EXPECT_EQ(c->set_attribute_bool(c, "flag", 2), -EINVAL);
  EXPECT_EQ(c->set_attribute_version(c, "driver", "580.65.06"), -EINVAL);
  EXPECT_EQ(c->set_capacity(c, "huge", ~0ull), -EINVAL);
  EXPECT_EQ(sink.list.back().attributes, want);
  ASSERT_FALSE(sink.attribute_problems.empty());
  EXPECT_EQ(sink.attribute_problems[0], "device \"a\": attribute \"model\" is set twice");
  EXPECT_EQ(sink.attribute_problems[2],
            "device \"a\": attribute \"id\" is one devplugd sets itself");
  EXPECT_EQ(sink.attribute_problems.size(), 14u) << "each refusal says why";

  // The budget: 32 names a device, 4 of them the agent's.
  ASSERT_EQ(c->add_device(c, "b", DEVPLUG_HEALTHY, 0, nullptr), 0);
  for (size_t i = 0; i < dra::kMaxAttributesPerDevice - DeviceSink::kAgentAttributes; ++i)
    ASSERT_EQ(c->set_attribute_int(c, ("a" + std::to_string(i)).c_str(), 1), 0) << i;
  EXPECT_EQ(c->set_capacity(c, "one_more", 1), -E2BIG);
  EXPECT_EQ(sink.list.back().attributes.size(), 28u);
}

TEST(DraNamesTest, VersionsAreSemanticVersions) {
  for (const char* v : {"0.0.0", "1.2.3", "10.20.30", "1.0.0-alpha.1", "1.0.0-0.3.7",
                        "1.0.0+20130313144700", "1.0.0-beta+exp.sha.5114f85"})
    EXPECT_EQ(dra::CheckVersion(v), "") << v;
  for (const char* v : {"", "1", "1.2", "1.2.3.4", "01.2.3", "1.02.3", "1.2.3-", "1.2.3-01",
                        "1.2.3-a..b", "1.2.3+", "1.2.3_x", "v1.2.3", "580.65.06"})
    EXPECT_NE(dra::CheckVersion(v), "") << v;
  EXPECT_NE(dra::CheckVersion("1.2.3-" + std::string(60, 'a')), "");
}

TEST(DraNamesTest, PcieRootsAreWhatSysfsNamesThem) {
  EXPECT_TRUE(dra::IsPcieRoot("pci0000:00"));
  EXPECT_TRUE(dra::IsPcieRoot("pci10000:e0"));
  EXPECT_FALSE(dra::IsPcieRoot("pci0000:0"));
  EXPECT_FALSE(dra::IsPcieRoot("pci000:00"));
  EXPECT_FALSE(dra::IsPcieRoot("platform"));
  EXPECT_FALSE(dra::IsPcieRoot("pciA000:00"));
}

// The header's call helpers: a member an older agent's struct stops before
// answers -ENOTSUP (or a neutral number) instead of being called.
TEST(AbiHelpersTest, MembersAnOlderAgentLacksAnswerENOTSUP) {
  devplug_host old_host{};
  old_host.struct_size = offsetof(devplug_host, config_int_array);  // a minor 0 agent
  devplug_pod pod{};
  pod.struct_size = sizeof(pod);
  EXPECT_EQ(devplug_host_pod_of(&old_host, "x", &pod), -ENOTSUP);
  EXPECT_EQ(devplug_host_track_releases(&old_host, 0), -ENOTSUP);
  EXPECT_EQ(devplug_host_watch_path(&old_host, "/dev/x"), -ENOTSUP);
  EXPECT_EQ(devplug_host_prestart_timeout_ms(&old_host), 28000);
  EXPECT_EQ(devplug_host_resource_index(&old_host), -1);

  DeviceSink sink;
  ASSERT_EQ(sink.c.add_device(&sink.c, "a", DEVPLUG_UNHEALTHY, 0, nullptr), 0);
  const int32_t nodes[] = {0, 1};
  EXPECT_EQ(devplug_sink_set_numa_nodes(&sink.c, nodes, 2), 0);  // this agent has it
  EXPECT_EQ(devplug_sink_set_health_reason(&sink.c, "gone"), 0);
  EXPECT_EQ(sink.list.back().health_reason, "gone");
  sink.c.struct_size = offsetof(devplug_device_sink, set_health_reason);  // as a minor 1 agent
  EXPECT_EQ(devplug_sink_set_health_reason(&sink.c, "x"), -ENOTSUP);
  EXPECT_EQ(devplug_sink_set_numa_nodes(&sink.c, nodes, 2), -ENOTSUP);
  EXPECT_EQ(sink.list.back().health_reason, "gone");
  EXPECT_EQ(devplug_sink_set_pci_address(&sink.c, "0000:00:01.0"), -ENOTSUP);
  EXPECT_EQ(devplug_sink_set_attribute_string(&sink.c, "a", "b"), -ENOTSUP);
  EXPECT_EQ(devplug_sink_set_attribute_int(&sink.c, "a", 1), -ENOTSUP);
  EXPECT_EQ(devplug_sink_set_attribute_bool(&sink.c, "a", 1), -ENOTSUP);
  EXPECT_EQ(devplug_sink_set_attribute_version(&sink.c, "a", "1.0.0"), -ENOTSUP);
  EXPECT_EQ(devplug_sink_set_capacity(&sink.c, "a", 1), -ENOTSUP);
  sink.c.struct_size = offsetof(devplug_device_sink, set_pci_address);  // as a minor 8 agent
  EXPECT_EQ(devplug_sink_set_numa_nodes(&sink.c, nodes, 2), 0);
  EXPECT_EQ(devplug_sink_set_capacity(&sink.c, "a", 1), -ENOTSUP);
  EXPECT_TRUE(sink.list.back().attributes.empty());
}

// ABI 1.11: a device's network interface, for DRA's claim status. What the
// API server would refuse is refused here; a second call for one device
// replaces the first; an agent before 1.11 answers -ENOTSUP.
TEST(AbiSinksTest, SetNetworkKeepsOneInterfacePerDevice) {
  Recipe recipe;
  RecipeSink sink(&recipe);
  EXPECT_EQ(devplug_recipe_set_network(&sink.c, "tap0", "tap0", "52:54:00:12:34:56"), 0);
  EXPECT_EQ(devplug_recipe_set_network(&sink.c, "tap1", nullptr, "52:54:00:00:00:01"), 0);
  EXPECT_EQ(devplug_recipe_set_network(&sink.c, "tap0", "dp0", ""), 0);
  ASSERT_EQ(recipe.networks.size(), 2u);
  EXPECT_EQ(*recipe.NetworkOf("tap0"), (NetworkData{"tap0", "dp0", ""}));
  EXPECT_EQ(*recipe.NetworkOf("tap1"), (NetworkData{"tap1", "", "52:54:00:00:00:01"}));
  EXPECT_EQ(recipe.NetworkOf("tap2"), nullptr);

  EXPECT_EQ(devplug_recipe_set_network(&sink.c, "tap2", "", nullptr), -EINVAL);  // says nothing
  EXPECT_EQ(devplug_recipe_set_network(&sink.c, "", "eth0", ""), -EINVAL);
  EXPECT_EQ(devplug_recipe_set_network(&sink.c, "a,b", "eth0", ""), -EINVAL);  // no device ID
  EXPECT_EQ(devplug_recipe_set_network(&sink.c, "tap2", std::string(257, 'x').c_str(), ""),
            -EINVAL);
  EXPECT_EQ(devplug_recipe_set_network(&sink.c, "tap2", std::string(256, 'x').c_str(), ""), 0);
  EXPECT_EQ(devplug_recipe_set_network(&sink.c, "tap3", "", std::string(129, '0').c_str()),
            -EINVAL);
  EXPECT_EQ(devplug_recipe_set_network(&sink.c, "tap3", "eth\n0", ""), -EINVAL);
  EXPECT_EQ(devplug_recipe_set_network(&sink.c, "tap3", "\xC0\xAE", ""), -EINVAL);
  EXPECT_EQ(recipe.networks.size(), 3u);

  // Merged recipes (one Allocate of several devices) keep each device's.
  Recipe other;
  other.networks.push_back({"tap1", "dp1", ""});
  recipe.Merge(other);
  EXPECT_EQ(recipe.networks.size(), 3u);
  EXPECT_EQ(recipe.NetworkOf("tap1")->interface_name, "dp1");

  sink.c.struct_size = offsetof(devplug_recipe, set_network);  // as a minor 10 agent
  EXPECT_EQ(devplug_recipe_set_network(&sink.c, "tap4", "eth0", ""), -ENOTSUP);
}

}  // namespace
}  // namespace devplug::modules
