// The rdma module through the real ABI on fixture trees shaped like the
// kernel's infiniband, infiniband_verbs and infiniband_mad classes: two
// vendors on two NUMA nodes, one InfiniBand port down, one RoCE adapter with
// its net interface.
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "module_harness.h"
#include "sysfs_fixture.h"
#include "test_util.h"

namespace devplug::modules {
namespace {

using namespace std::chrono_literals;
using devplug::testing::RdmaSpec;
using devplug::testing::SysfsFixture;
using devplug::testing::TempDir;
using harness::Find;
using harness::Ids;
using Strings = std::vector<std::string>;

constexpr char kName[] = "rdma.example/hca";

std::vector<std::string> Nodes(const Recipe& r) {
  Strings out;
  for (const auto& n : r.device_nodes) out.push_back(n.host_path);
  return out;
}

class RdmaModuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!devplug::testing::IsRoot()) GTEST_SKIP() << "RDMA fixtures need mknod (root)";
    fx_.AddPci({.address = "0000:3b:00.0",
                .vendor = 0x15b3,
                .device = 0x1017,
                .driver = "mlx5_core",
                .numa_node = 0,
                .iommu_group = 10});
    fx_.AddPci({.address = "0000:af:00.0",
                .vendor = 0x8086,
                .device = 0x1592,
                .driver = "ice",
                .numa_node = 1,
                .iommu_group = 20,
                .net = {"ens2f0"}});
    fx_.AddPci({.address = "0000:d8:00.0",
                .vendor = 0x15b3,
                .device = 0x1017,
                .driver = "mlx5_core",
                .numa_node = 1,
                .iommu_group = 30});
    ASSERT_TRUE(fx_.AddRdma(mlx5_0_));
    ASSERT_TRUE(fx_.AddRdma(irdma0_));
    ASSERT_TRUE(fx_.AddRdma(mlx5_1_));
    ASSERT_TRUE(fx_.AddRdmaCm());
  }

  std::unique_ptr<ModuleInstance> Open(const std::string& body) {
    auto inst = harness::Open("rdma", kName, root_.path(), body + "port_poll_ms = 0\n");
    EXPECT_TRUE(inst.ok()) << inst.status().message();
    return inst.ok() ? std::move(inst).value() : nullptr;
  }

  TempDir root_;
  SysfsFixture fx_{root_.path()};
  RdmaSpec mlx5_0_{
      .ibdev = "mlx5_0", .pci = "0000:3b:00.0", .port_states = {4}, .uverbs = 0, .first_umad = 0};
  RdmaSpec irdma0_{.ibdev = "irdma0",
                   .pci = "0000:af:00.0",
                   .port_states = {4},
                   .link_layer = "Ethernet",
                   .uverbs = 1,
                   .first_umad = 1};
  RdmaSpec mlx5_1_{
      .ibdev = "mlx5_1", .pci = "0000:d8:00.0", .port_states = {1}, .uverbs = 2, .first_umad = 2};
};

TEST_F(RdmaModuleTest, ExclusiveOneIdPerAdapterWithHealthAndNuma) {
  auto inst = Open("mode = \"exclusive\"\n");
  ASSERT_TRUE(inst);
  DeviceListPtr list = inst->devices();
  EXPECT_EQ(Ids(*list), (Strings{"irdma0", "mlx5_0", "mlx5_1"}));
  EXPECT_TRUE(Find(*list, "mlx5_0")->healthy);
  EXPECT_TRUE(Find(*list, "irdma0")->healthy);
  EXPECT_FALSE(Find(*list, "mlx5_1")->healthy);  // its only port is DOWN
  EXPECT_EQ(Find(*list, "mlx5_0")->numa_node, 0);
  EXPECT_EQ(Find(*list, "irdma0")->numa_node, 1);
  EXPECT_EQ(Find(*list, "mlx5_0")->pci_address, "0000:3b:00.0");  // for DRA (ABI 1.9)

  auto r = harness::Allocate(*inst, {"mlx5_0"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Nodes(*r), (Strings{"/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"}));
  EXPECT_EQ(r->device_nodes[0].container_path, "/dev/infiniband/uverbs0");
  EXPECT_EQ(r->device_nodes[0].permissions, "rw");
  EXPECT_TRUE(r->envs.empty());
  auto two = harness::Allocate(*inst, {"irdma0", "mlx5_0"});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(Nodes(*two), (Strings{"/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm",
                                  "/dev/infiniband/uverbs0"}));
  EXPECT_EQ(harness::Allocate(*inst, {"mlx5_1"}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(RdmaModuleTest, UmadAddsTheManagementNodes) {
  auto inst = Open("mode = \"exclusive\"\numad = true\n");
  ASSERT_TRUE(inst);
  auto r = harness::Allocate(*inst, {"mlx5_0"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Nodes(*r), (Strings{"/dev/infiniband/uverbs0", "/dev/infiniband/issm0",
                                "/dev/infiniband/umad0", "/dev/infiniband/rdma_cm"}));
}

TEST_F(RdmaModuleTest, SharedGivesEveryContainerAllSelectedAdapters) {
  auto inst = Open("");
  ASSERT_TRUE(inst);
  DeviceListPtr list = inst->devices();
  ASSERT_EQ(list->size(), 100u);  // the default shares
  EXPECT_EQ(Ids(*list, true).size(), 100u);
  // Adapters on nodes 0 and 1: the kubelet hears both (ABI 1.6).
  EXPECT_EQ(list->front().Nodes(), (std::vector<int32_t>{0, 1}));
  auto r = harness::Allocate(*inst, {"rdma-7", "rdma-42"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  // Every selected adapter present, the one whose port is down included.
  EXPECT_EQ(Nodes(*r), (Strings{"/dev/infiniband/uverbs1", "/dev/infiniband/uverbs0",
                                "/dev/infiniband/uverbs2", "/dev/infiniband/rdma_cm"}));

  auto one = Open("shares = 3\ndevices = [\"mlx5_0\"]\n");
  ASSERT_TRUE(one);
  EXPECT_EQ(Ids(*one->devices()), (Strings{"rdma-0", "rdma-1", "rdma-2"}));
  EXPECT_EQ(one->devices()->back().share_of, "rdma");  // one device for DRA (ABI 1.10)
  EXPECT_EQ(one->devices()->front().numa_node, 0);     // one adapter: its node
  EXPECT_EQ(Nodes(*harness::Allocate(*one, {"rdma-1"})),
            (Strings{"/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"}));
}

TEST_F(RdmaModuleTest, Selectors) {
  auto by_vendor = Open("mode = \"exclusive\"\nvendors = [\"0x15B3\"]\n");
  ASSERT_TRUE(by_vendor);
  EXPECT_EQ(Ids(*by_vendor->devices()), (Strings{"mlx5_0", "mlx5_1"}));
  auto by_name = Open("mode = \"exclusive\"\ndevices = [\"mlx5_1\", \"mlx5_9\"]\n");
  ASSERT_TRUE(by_name);
  EXPECT_EQ(Ids(*by_name->devices()), Strings{"mlx5_1"});
  auto by_if = Open("mode = \"exclusive\"\nifnames = [\"ens2f0\"]\n");
  ASSERT_TRUE(by_if);
  EXPECT_EQ(Ids(*by_if->devices()), Strings{"irdma0"});
  auto none = Open("mode = \"exclusive\"\nvendors = [\"10de\"]\n");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->devices()->empty());
  // Shared with nothing selected: the shares exist, all Unhealthy.
  auto shared_none = Open("shares = 2\nvendors = [\"10de\"]\n");
  ASSERT_TRUE(shared_none);
  EXPECT_EQ(Ids(*shared_none->devices(), true), Strings{});
  EXPECT_EQ(shared_none->devices()->size(), 2u);
}

TEST_F(RdmaModuleTest, PortDownTakesTheAdapterOutUntilItComesBack) {
  auto excl = Open("mode = \"exclusive\"\n");
  auto shared = Open("shares = 2\ndevices = [\"mlx5_0\", \"mlx5_1\"]\n");
  ASSERT_TRUE(excl && shared);
  fx_.SetPortState("mlx5_0", 1, 1);
  harness::Rescan(*excl);
  harness::Rescan(*shared);
  EXPECT_FALSE(Find(*excl->devices(), "mlx5_0")->healthy);
  EXPECT_EQ(Find(*excl->devices(), "mlx5_0")->health_reason, "port 1 DOWN");
  EXPECT_EQ(Find(*shared->devices(), "rdma-0")->health_reason,
            "no usable adapter: mlx5_0 port 1 DOWN; mlx5_1 port 1 DOWN");
  EXPECT_EQ(Ids(*excl->devices(), true), Strings{"irdma0"});
  EXPECT_EQ(Ids(*shared->devices(), true), Strings{});  // no selected adapter is up

  fx_.SetPortState("mlx5_1", 1, 4);
  harness::Rescan(*shared);
  EXPECT_EQ(Ids(*shared->devices(), true).size(), 2u);  // one is enough for shared
  fx_.SetPortState("mlx5_0", 1, 4);
  harness::Rescan(*excl);
  EXPECT_EQ(Ids(*excl->devices(), true), (Strings{"irdma0", "mlx5_0", "mlx5_1"}));
}

TEST_F(RdmaModuleTest, AdaptersLeaveAndReturnAndNodesAreChecked) {
  auto inst = Open("mode = \"exclusive\"\n");
  ASSERT_TRUE(inst);
  fx_.RemoveRdma(irdma0_);
  harness::Rescan(*inst);
  EXPECT_EQ(Ids(*inst->devices()), (Strings{"mlx5_0", "mlx5_1"}));
  ASSERT_TRUE(fx_.AddRdma(irdma0_));
  harness::Rescan(*inst);
  EXPECT_TRUE(Find(*inst->devices(), "irdma0")->healthy);

  // No uverbs node: not usable. No rdma_cm: verbs only.
  std::filesystem::remove(root_ / "dev/infiniband/uverbs1");
  std::filesystem::remove(root_ / "dev/infiniband/rdma_cm");
  harness::Rescan(*inst);
  EXPECT_FALSE(Find(*inst->devices(), "irdma0")->healthy);
  EXPECT_EQ(Find(*inst->devices(), "irdma0")->health_reason, "/dev/infiniband/uverbs1 missing");
  auto r = harness::Allocate(*inst, {"mlx5_0"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Nodes(*r), Strings{"/dev/infiniband/uverbs0"});
}

TEST_F(RdmaModuleTest, PreferredAllocationPacksByNuma) {
  fx_.SetPortState("mlx5_1", 1, 4);
  auto inst = Open("mode = \"exclusive\"\n");
  ASSERT_TRUE(inst);
  auto two = harness::Prefer(*inst, {"irdma0", "mlx5_0", "mlx5_1"}, {}, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, (Strings{"irdma0", "mlx5_1"}));  // both on node 1
  auto with = harness::Prefer(*inst, {"irdma0", "mlx5_0", "mlx5_1"}, {"mlx5_0"}, 2);
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(with->front(), "mlx5_0");
  EXPECT_EQ(with->size(), 2u);
}

TEST_F(RdmaModuleTest, PortPollNoticesAChangeWithoutAnyEvent) {
  auto inst =
      harness::Open("rdma", kName, root_.path(), "mode = \"exclusive\"\nport_poll_ms = 20\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  const uint64_t scans = (*inst)->scans();
  fx_.SetPortState("mlx5_0", 1, 1);
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (Find(*(*inst)->devices(), "mlx5_0")->healthy &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(Find(*(*inst)->devices(), "mlx5_0")->healthy);
  EXPECT_GT((*inst)->scans(), scans);
  fx_.SetPortState("mlx5_0", 1, 4);
  while (!Find(*(*inst)->devices(), "mlx5_0")->healthy &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(Find(*(*inst)->devices(), "mlx5_0")->healthy);
}

TEST_F(RdmaModuleTest, BadKeysNameFileLineAndKey) {
  struct Case {
    std::string body;
    std::string error;
  } cases[] = {
      {"mode = \"private\"\n",
       "module.toml:4: resource[0].mode: must be \"shared\" or \"exclusive\""},
      {"mode = \"exclusive\"\nshares = 4\n",
       "module.toml:5: resource[0].shares: applies to mode = \"shared\" only"},
      {"shares = 0\n", "module.toml:4: resource[0].shares: must be between 1 and 10000"},
      {"vendors = [\"mellanox\"]\n",
       "module.toml:4: resource[0].vendors: \"mellanox\" is not a 16-bit PCI vendor ID"},
      {"devices = []\n", "module.toml:4: resource[0].devices: is empty"},
      {"ifnames = [\"../eth0\"]\n",
       "module.toml:4: resource[0].ifnames: \"../eth0\" is not a device or interface name"},
      {"port_poll_ms = -5\n", "module.toml:4: resource[0].port_poll_ms: must be between 0 (off)"},
      {"umad = \"yes\"\n", "module.toml:4: resource[0].umad: must be a boolean"},
  };
  for (const Case& c : cases) {
    auto inst = harness::Open("rdma", kName, root_.path(), c.body);
    ASSERT_FALSE(inst.ok()) << c.body;
    EXPECT_NE(inst.status().message().find(c.error), std::string::npos) << c.body << "\n"
                                                                        << inst.status().message();
  }
}

TEST(RdmaModuleRealTest, NoRdmaStackMeansNoAdapters) {
  if (std::filesystem::exists("/sys/class/infiniband")) GTEST_SKIP() << "this machine has RDMA";
  auto inst = harness::Open("rdma", kName, "/", "mode = \"exclusive\"\nport_poll_ms = 0\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_TRUE((*inst)->devices()->empty());
}

}  // namespace
}  // namespace devplug::modules
