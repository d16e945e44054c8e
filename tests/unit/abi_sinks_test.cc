// What crosses the ABI into a device list: the sink members a module calls
// during list_devices(), checked directly.
#include "modules/abi_sinks.h"

#include <cerrno>
#include <cstddef>

#include <gtest/gtest.h>

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
}

}  // namespace
}  // namespace devplug::modules
