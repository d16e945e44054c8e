// The nvidia module end to end: devplugd with the fake libnvidia-ml on a
// fixture node, the kubelet simulator over real sockets: registration,
// Allocate, NVLink-aware preferred allocation, and a critical XID taking a
// GPU out of the allocatable count.
#include <gtest/gtest.h>

#include "agent_fixture.h"
#include "gpu_fixture.h"

namespace devplug {
namespace {

using testing::FakeGpu;
using testing::GpuFixture;

constexpr char kGpu[] = "nvidia.com/gpu";

class NvidiaAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    if (!testing::IsRoot()) GTEST_SKIP() << "GPU fixtures need mknod (root)";
    fx_ = std::make_unique<GpuFixture>(host_root(), dir_ / "nvml");
    for (int i = 0; i < 4; i++) {
      char pci[16];
      std::snprintf(pci, sizeof(pci), "0000:%02x:00.0", 0x3b + i);
      gpus_.push_back({"GPU-" + std::to_string(1000 + i) + "-aaaa-4000-8000-00000000000" +
                           std::to_string(i),
                       pci, static_cast<unsigned>(i), i / 2, "NVIDIA A100-SXM4-80GB"});
    }
    // GPUs 0-1 and 2-3 are NVLink pairs.
    ASSERT_TRUE(fx_->Build(gpus_, {"nvlink 0 1 4", "nvlink 2 3 4"}));
  }

  std::string Body(const std::string& extra = "") const {
    return "nvml_library = \"" + testing::FakeModuleDir() + "/fake_nvml.so\"\n" + extra;
  }

  std::unique_ptr<GpuFixture> fx_;
  std::vector<FakeGpu> gpus_;
};

TEST_F(NvidiaAgentTest, AllocatePreferredAllocationAndXid) {
  StartSim();
  StartAgent(Resource(kGpu, "nvidia", Body()));
  ASSERT_TRUE(Registered(kGpu));
  ASSERT_TRUE(HealthyIs(kGpu, 4, 4));
  const auto view = sim_->resource(kGpu);
  EXPECT_TRUE(view->options.get_preferred_allocation_available());
  ASSERT_EQ(view->devices.size(), 4u);
  EXPECT_EQ(view->devices[2].id(), gpus_[2].uuid);
  EXPECT_EQ(view->devices[2].topology().nodes(0).id(), 1);

  v1beta1::ContainerAllocateResponse resp;
  grpc::Status st = sim_->Allocate(kGpu, {gpus_[3].uuid, gpus_[1].uuid}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  std::vector<std::string> nodes;
  for (const auto& d : resp.devices()) nodes.push_back(d.host_path());
  EXPECT_EQ(nodes, (std::vector<std::string>{"/dev/nvidiactl", "/dev/nvidia-uvm",
                                             "/dev/nvidia-uvm-tools", "/dev/nvidia3",
                                             "/dev/nvidia1"}));
  EXPECT_EQ(resp.envs().at("NVIDIA_VISIBLE_DEVICES"), gpus_[3].uuid + "," + gpus_[1].uuid);

  std::vector<std::string> ids;
  st = sim_->GetPreferredAllocation(
      kGpu, {gpus_[0].uuid, gpus_[1].uuid, gpus_[2].uuid, gpus_[3].uuid}, {gpus_[2].uuid}, 2, &ids);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(ids, (std::vector<std::string>{gpus_[2].uuid, gpus_[3].uuid}));  // its NVLink peer

  fx_->Xid(2, 31);  // application fault: ignored
  fx_->Xid(2, 79);  // fell off the bus
  ASSERT_TRUE(HealthyIs(kGpu, 4, 3));
  st = sim_->Allocate(kGpu, {gpus_[2].uuid}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(agent_->WaitForLog("critical XID 79", kWait)) << agent_->Log();
}

}  // namespace
}  // namespace devplug
