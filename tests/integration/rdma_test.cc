// The rdma module end to end: devplugd on a fixture node with two adapters,
// the kubelet simulator over real sockets, and a port that goes down and
// comes back (seen by the module's port poll, with resync off).
#include <gtest/gtest.h>

#include "agent_fixture.h"
#include "sysfs_fixture.h"

namespace devplug {
namespace {

using testing::RdmaSpec;
using testing::SysfsFixture;

constexpr char kHca[] = "rdma.example/hca";
constexpr char kShared[] = "rdma.example/shared";

class RdmaAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    if (!testing::IsRoot()) GTEST_SKIP() << "RDMA fixtures need mknod (root)";
    fx_ = std::make_unique<SysfsFixture>(host_root());
    fx_->AddPci({.address = "0000:3b:00.0",
                 .vendor = 0x15b3,
                 .device = 0x101b,
                 .class_code = 0x020700,
                 .driver = "mlx5_core",
                 .numa_node = 0,
                 .iommu_group = 1,
                 .parent = {},
                 .net = {}});
    fx_->AddPci({.address = "0000:af:00.0",
                 .vendor = 0x15b3,
                 .device = 0x101b,
                 .class_code = 0x020700,
                 .driver = "mlx5_core",
                 .numa_node = 1,
                 .iommu_group = 2,
                 .parent = {},
                 .net = {}});
    ASSERT_TRUE(fx_->AddRdma({.ibdev = "mlx5_0",
                              .pci = "0000:3b:00.0",
                              .port_states = {4},
                              .link_layer = "InfiniBand",
                              .uverbs = 0,
                              .first_umad = 0}));
    ASSERT_TRUE(fx_->AddRdma({.ibdev = "mlx5_1",
                              .pci = "0000:af:00.0",
                              .port_states = {4},
                              .link_layer = "InfiniBand",
                              .uverbs = 1,
                              .first_umad = 1}));
    ASSERT_TRUE(fx_->AddRdmaCm());
  }

  std::unique_ptr<SysfsFixture> fx_;
};

TEST_F(RdmaAgentTest, ExclusiveAndSharedResourcesFollowPortState) {
  StartSim();
  StartAgent(Resource(kHca, "rdma", "mode = \"exclusive\"\nport_poll_ms = 50") +
                 Resource(kShared, "rdma", "shares = 4\nport_poll_ms = 50"),
             "0s", CdiOn());
  ASSERT_TRUE(Registered(kHca));
  ASSERT_TRUE(Registered(kShared));
  ASSERT_TRUE(HealthyIs(kHca, 2, 2));
  ASSERT_TRUE(HealthyIs(kShared, 4, 4));
  // The CDI specs on the fixture: an adapter's verbs node and rdma_cm; a
  // share, every adapter's.
  std::vector<std::string> names;
  auto spec = CheckedCdiSpec(kHca, &names);
  EXPECT_EQ(names, (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  if (names.size() == 2) {
    EXPECT_EQ(SpecNodes(spec["devices"][1]),
              (std::vector<std::string>{"/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"}));
  }
  spec = CheckedCdiSpec(kShared, &names);
  EXPECT_EQ(names.size(), 4u);
  const auto view = sim_->resource(kHca);
  EXPECT_TRUE(view->options.get_preferred_allocation_available());
  ASSERT_EQ(view->devices[1].id(), "mlx5_1");
  EXPECT_EQ(view->devices[1].topology().nodes(0).id(), 1);

  v1beta1::ContainerAllocateResponse resp;
  grpc::Status st = sim_->Allocate(kHca, {"mlx5_1"}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.devices_size(), 2);
  EXPECT_EQ(resp.devices(0).host_path(), "/dev/infiniband/uverbs1");
  EXPECT_EQ(resp.devices(0).container_path(), "/dev/infiniband/uverbs1");
  EXPECT_EQ(resp.devices(0).permissions(), "rw");
  EXPECT_EQ(resp.devices(1).host_path(), "/dev/infiniband/rdma_cm");
  st = sim_->Allocate(kShared, {"rdma-0"}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.devices_size(), 3);
  EXPECT_EQ(resp.devices(0).host_path(), "/dev/infiniband/uverbs0");
  EXPECT_EQ(resp.devices(1).host_path(), "/dev/infiniband/uverbs1");
  EXPECT_EQ(resp.devices(2).host_path(), "/dev/infiniband/rdma_cm");

  std::vector<std::string> ids;
  st = sim_->GetPreferredAllocation(kHca, {"mlx5_0", "mlx5_1"}, {"mlx5_1"}, 1, &ids);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(ids, std::vector<std::string>{"mlx5_1"});

  // The port goes down: the adapter leaves the allocatable count; the
  // shared resource stays usable through the other adapter.
  fx_->SetPortState("mlx5_1", 1, 1);
  ASSERT_TRUE(HealthyIs(kHca, 2, 1));
  st = sim_->Allocate(kHca, {"mlx5_1"}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  fx_->SetPortState("mlx5_0", 1, 1);
  ASSERT_TRUE(HealthyIs(kHca, 2, 0));
  ASSERT_TRUE(HealthyIs(kShared, 4, 0));
  // And back.
  fx_->SetPortState("mlx5_1", 1, 4);
  fx_->SetPortState("mlx5_0", 1, 4);
  ASSERT_TRUE(HealthyIs(kHca, 2, 2));
  ASSERT_TRUE(HealthyIs(kShared, 4, 4));
}

}  // namespace
}  // namespace devplug
