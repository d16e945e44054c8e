// What crosses the ABI into a device list: the sink members a module calls
// during list_devices(), checked directly.
#include "modules/abi_sinks.h"

#include <cerrno>

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

}  // namespace
}  // namespace devplug::modules
