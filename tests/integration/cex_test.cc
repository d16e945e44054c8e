// The cex module in the real devplugd against the kubelet simulator, with
// PodResources: a pod of an allowed namespace starts with its own zcrypt
// node (PreStartContainer over gRPC), a pod of another namespace is refused
// before it starts, and once the pod is gone its node is destroyed. The
// module is its test build, whose zcrypt writes are acted out on the
// fixture tree (modules/cex/emulator.h): there is no s390x here.
#include <gtest/gtest.h>

#include "agent_fixture.h"
#include "cex_fixture.h"

namespace devplug {
namespace {

using testing::CexCardSpec;
using testing::CexQueueSpec;

constexpr char kRes[] = "cex.example.com/cca";

class CexAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    sim_pod_resources_ = dir_ / "pod-resources/kubelet.sock";
    if (!testing::IsRoot()) GTEST_SKIP() << "zcrypt device nodes need root (mknod)";
    fx_.AddCard({.adapter = 3});
    fx_.AddCard({.adapter = 4});
  }
  std::string Agent() const {
    return "pod_resources_socket = \"" + sim_pod_resources_ +
           "\"\npod_resources_poll = \"200ms\"\nrelease_grace = \"300ms\"\n"
           "kubelet_settle = \"0s\"\nunseen_timeout = \"3s\"";
  }
  bool NodeExists(const std::string& name) const {
    return testing::FileExists(fx_.NodeDir(name)) &&
           testing::FileExists(host_root() + "/dev/" + name);
  }

  testing::CexFixture fx_{host_root()};
};

TEST_F(CexAgentTest, OnlyAnAllowedPodGetsItsOwnNodeAndNothingIsLeftAfterIt) {
  StartSim();
  StartAgent(Resource(kRes, FakeModule("cex-fixture"), "namespaces = [\"team-a\"]"), "0s",
             Agent() + CdiOn());
  ASSERT_TRUE(Registered(kRes));
  ASSERT_TRUE(HealthyIs(kRes, 2, 2));
  EXPECT_TRUE(sim_->resource(kRes)->options.pre_start_required());
  EXPECT_TRUE(sim_->resource(kRes)->options.get_preferred_allocation_available());

  // team-a's pod: its own node, as /dev/z90crypt.
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kRes, {"03.0006"}, &resp).ok());
  ASSERT_EQ(resp.devices_size(), 1);
  EXPECT_EQ(resp.devices(0).host_path(), "/dev/devplug-cex-03.0006-0");
  EXPECT_EQ(resp.devices(0).container_path(), "/dev/z90crypt");
  EXPECT_EQ(resp.envs().at("CEX_APQNS_CEX_EXAMPLE_COM_CCA"), "03.0006");
  EXPECT_EQ(resp.envs().at("CSU_DEFAULT_DOMAIN"), "6");
  EXPECT_FALSE(NodeExists("devplug-cex-03.0006-0")) << "Allocate made the node";
  // By CDI name too: the node the pod gets is in the device's recipe, so
  // the resource's spec holds it; made at PreStartContainer, it has no
  // numbers in the spec (the runtime looks them up when the container is
  // made).
  ASSERT_EQ(resp.cdi_devices_size(), 1);
  EXPECT_EQ(resp.cdi_devices(0).name(), cdi::QualifiedName(*cdi::KindOf(kRes), "03.0006"));
  {
    std::vector<std::string> names;
    const auto spec = CheckedCdiSpec(kRes, &names);
    EXPECT_EQ(names, (std::vector<std::string>{"03.0006", "04.0006"}));
    if (names.size() == 2) {
      const auto& node = spec["devices"][0]["containerEdits"]["deviceNodes"][0];
      EXPECT_EQ(node["hostPath"], "/dev/devplug-cex-03.0006-0");
      EXPECT_EQ(node["path"], "/dev/z90crypt");
      EXPECT_FALSE(node.contains("major"));
    }
  }
  sim_->BindPod("team-a", "hsm-client", "main", kRes, {"03.0006"});
  grpc::Status st = sim_->PreStartContainer(kRes, {"03.0006"});
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << agent_->Log();
  ASSERT_TRUE(NodeExists("devplug-cex-03.0006-0"));
  EXPECT_EQ(testing::ReadFile(fx_.NodeDir("devplug-cex-03.0006-0") + "/apmask"),
            "0x1" + std::string(63, '0') + "\n");
  // The container restarts: the same node.
  ASSERT_TRUE(sim_->PreStartContainer(kRes, {"03.0006"}).ok());

  // team-b's pod is refused before it starts, and gets no node.
  ASSERT_TRUE(sim_->Allocate(kRes, {"04.0006"}, &resp).ok());
  sim_->BindPod("team-b", "intruder", "main", kRes, {"04.0006"});
  st = sim_->PreStartContainer(kRes, {"04.0006"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("pod team-b/intruder is not allowed to use " +
                                    std::string(kRes) + " (namespaces: team-a)"),
            std::string::npos)
      << st.error_message();
  EXPECT_FALSE(NodeExists("devplug-cex-04.0006-0"));

  // team-a's pod ends: its node is destroyed.
  // (The emulated kernel removes the device, its class link and its node one
  // after another: wait for all three.)
  sim_->DeletePod("team-a", "hsm-client");
  ASSERT_TRUE(Eventually([&] {
    return !testing::FileExists(fx_.NodeDir("devplug-cex-03.0006-0")) &&
           !testing::FileExists(host_root() + "/sys/class/zcrypt/devplug-cex-03.0006-0") &&
           !testing::FileExists(host_root() + "/dev/devplug-cex-03.0006-0");
  })) << agent_->Log();
  ASSERT_TRUE(HealthyIs(kRes, 2, 2));
}

// A node devplugd made before it was restarted, whose pod is gone, is
// destroyed at start; a held one stays for its container.
TEST_F(CexAgentTest, ARestartedAgentDestroysTheNodesNoPodHolds) {
  fx_.ForeignNode("devplug-cex-03.0006-0");
  fx_.ForeignNode("devplug-cex-04.0006-0");
  fx_.ForeignNode("zcrypt-apqn-3-6-0");
  StartSim();
  sim_->BindPod("default", "holder", "main", kRes, {"04.0006"});
  StartAgent(Resource(kRes, FakeModule("cex-fixture"), ""), "0s", Agent());
  ASSERT_TRUE(Registered(kRes));
  ASSERT_TRUE(Eventually([&] {
    return !testing::FileExists(fx_.NodeDir("devplug-cex-03.0006-0"));
  })) << agent_->Log();
  EXPECT_TRUE(testing::FileExists(fx_.NodeDir("devplug-cex-04.0006-0")));
  EXPECT_TRUE(testing::FileExists(fx_.NodeDir("zcrypt-apqn-3-6-0")));
}

}  // namespace
}  // namespace devplug
