// The fpga-opae module in the real devplugd against the kubelet simulator:
// a pod's container start programs its port (PreStartContainer over gRPC),
// a container restart does not program again, and after the pod ends the
// port is reset and scrubbed (PodResources-driven release) before anyone
// else gets it. The module is its test build, whose device operations act
// on the fixture tree (no DFL driver exists here).
#include <atomic>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "agent_fixture.h"
#include "fpga_fixture.h"

namespace devplug {
namespace {

using testing::FpgaCardSpec;
using testing::FpgaPortSpec;
using testing::kIdleAfu;
using testing::kInterface;
using testing::kNlb0;
using testing::kNlb3;

constexpr char kNlb3Res[] = "fpga.example.com/nlb3";
constexpr char kNlb0Res[] = "fpga.example.com/nlb0";

class FpgaAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    sim_pod_resources_ = dir_ / "pod-resources/kubelet.sock";
    if (!testing::IsRoot()) GTEST_SKIP() << "fixture device nodes need root (mknod)";
    FpgaCardSpec card;
    card.ports = {FpgaPortSpec{0, 0, kNlb0}, FpgaPortSpec{1, 1, kNlb0}};
    fx_.AddCard(card);
    fx_.AddGbs(kInterface, kNlb3);
    fx_.AddGbs(kInterface, kIdleAfu);
    fpgaconf_ = fx_.AddFpgaconf();
  }
  std::string Agent() const {
    return "pod_resources_socket = \"" + sim_pod_resources_ +
           "\"\npod_resources_poll = \"200ms\"\nrelease_grace = \"300ms\"\n"
           "kubelet_settle = \"0s\"\nunseen_timeout = \"3s\"";
  }
  std::string Resources() const {
    const std::string module = FakeModule("fpga-opae-fixture");
    return Resource(kNlb3Res, module,
                    "mode = \"region\"\nafu_id = \"" + std::string(kNlb3) +
                        "\"\ninterface_id = \"" + kInterface + "\"\nfpgaconf = \"" + fpgaconf_ +
                        "\"\nrelease_actions = [\"reset\", \"program-idle\"]\nidle_afu_id = \"" +
                        kIdleAfu + "\"") +
           // A preprogrammed resource beside it: it never sees the region's ports.
           Resource(kNlb0Res, module, "afu_id = \"" + std::string(kNlb0) + "\"");
  }

  testing::FpgaFixture fx_{host_root()};
  std::string fpgaconf_;
};

TEST_F(FpgaAgentTest, PodGetsItsPortProgrammedOnceAndScrubbedAfter) {
  StartSim();
  StartAgent(Resources(), "0s", Agent() + CdiOn());
  ASSERT_TRUE(Registered(kNlb3Res));
  ASSERT_TRUE(Registered(kNlb0Res));
  ASSERT_TRUE(HealthyIs(kNlb3Res, 2, 2));
  ASSERT_TRUE(HealthyIs(kNlb0Res, 0, 0));  // the region resource claimed both ports
  EXPECT_TRUE(sim_->resource(kNlb3Res)->options.pre_start_required());

  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kNlb3Res, {"dfl-port.0"}, &resp).ok());
  ASSERT_EQ(resp.devices_size(), 1);
  EXPECT_EQ(resp.devices(0).host_path(), "/dev/dfl-port.0");
  EXPECT_EQ(resp.envs().at("FPGA_RESOURCE_FPGA_EXAMPLE_COM_NLB3"), "0000:5e:00.0");
  // The module answers Allocate itself (allocate()): by CDI name through a
  // spec of this allocation, on the fixture, gone after the pod.
  const cdi::Kind kind = *cdi::KindOf(kNlb3Res);
  const std::string alloc = cdi::AllocationName({"dfl-port.0"});
  const std::string alloc_spec = host_root() + "/run/cdi/" + cdi::AllocationFileName(kind, alloc);
  ASSERT_EQ(resp.cdi_devices_size(), 1);
  EXPECT_EQ(resp.cdi_devices(0).name(), cdi::QualifiedName(kind, alloc));
  ASSERT_TRUE(testing::FileExists(alloc_spec));
  {
    const auto spec = nlohmann::json::parse(testing::ReadFile(alloc_spec));
    EXPECT_EQ(StrJoin(cdi::Validate(spec), "\n"), "") << spec.dump(1);
    EXPECT_EQ(SpecNodes(spec["devices"][0]), std::vector<std::string>{"/dev/dfl-port.0"});
    EXPECT_EQ(spec["devices"][0]["containerEdits"]["env"][0],
              "FPGA_RESOURCE_FPGA_EXAMPLE_COM_NLB3=0000:5e:00.0");
  }
  grpc::Status st = sim_->PreStartContainer(kNlb3Res, {"dfl-port.0"});
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(fx_.Afu("dfl-port.0"), kNlb3);
  sim_->BindPod("ns", "nlb", "main", kNlb3Res, {"dfl-port.0"});
  // The container restarts: no second programming.
  ASSERT_TRUE(sim_->PreStartContainer(kNlb3Res, {"dfl-port.0"}).ok());
  EXPECT_EQ(fx_.FpgaconfLog().size(), 1u);
  // Reprogrammed to nlb3, the port still belongs to the region resource.
  EXPECT_TRUE(HealthyIs(kNlb0Res, 0, 0));

  // The pod ends: the port is reset and loaded with the idle image.
  sim_->DeletePod("ns", "nlb");
  ASSERT_TRUE(Eventually([&] { return fx_.Afu("dfl-port.0") == kIdleAfu; })) << agent_->Log();
  ASSERT_TRUE(Eventually([&] { return fx_.OpsLog().size() >= 1; }));
  EXPECT_EQ(fx_.OpsLog()[0], "reset /dev/dfl-port.0");
  ASSERT_TRUE(HealthyIs(kNlb3Res, 2, 2));
  EXPECT_TRUE(agent_->WaitForLog("dfl-port.0 no longer held; releasing", kWait)) << agent_->Log();
  EXPECT_FALSE(testing::FileExists(alloc_spec));
  // The next pod gets it programmed again.
  ASSERT_TRUE(sim_->Allocate(kNlb3Res, {"dfl-port.0"}, &resp).ok());
  ASSERT_TRUE(sim_->PreStartContainer(kNlb3Res, {"dfl-port.0"}).ok());
  EXPECT_EQ(fx_.Afu("dfl-port.0"), kNlb3);
  EXPECT_EQ(fx_.FpgaconfLog().size(), 3u);  // nlb3, idle, nlb3
}

// A refusal reaches the kubelet with the file and the reason, and the port
// turns Unhealthy for failure_hold so the kubelet picks another.
TEST_F(FpgaAgentTest, RefusedProgrammingReachesTheKubeletWithItsReason) {
  std::filesystem::remove(host_root() + "/srv/intel.com/fpga/" + kInterface + "/" + kNlb3 + ".gbs");
  StartSim();
  StartAgent(Resources(), "0s", Agent());
  ASSERT_TRUE(Registered(kNlb3Res));
  ASSERT_TRUE(HealthyIs(kNlb3Res, 2, 2));
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kNlb3Res, {"dfl-port.1"}, &resp).ok());
  grpc::Status st = sim_->PreStartContainer(kNlb3Res, {"dfl-port.1"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find(std::string(kNlb3) + ".gbs: No such file or directory"),
            std::string::npos)
      << st.error_message();
  ASSERT_TRUE(HealthyIs(kNlb3Res, 2, 1));
}

// PreStartContainer has its own deadline, prestart_timeout, not call_timeout;
// a module's program_timeout must fit inside it.
TEST_F(FpgaAgentTest, PrestartTimeoutBoundsProgramming) {
  StartSim();
  StartAgent(Resource(kNlb3Res, FakeModule("fpga-opae-fixture"),
                      "mode = \"region\"\nafu_id = \"" + std::string(kNlb3) +
                          "\"\nprogram_timeout = \"20s\""),
             "0s", "prestart_timeout = \"15s\"");
  // A configuration error: devplugd exits with EX_CONFIG, naming file, line and key.
  EXPECT_EQ(agent_->Wait(kWait), std::optional<int>(78)) << agent_->Log();
  EXPECT_NE(agent_->Log().find("devplug.toml:15: resource[0].program_timeout: \"20s\" must be "
                               "shorter than the agent's prestart_timeout (15s)"),
            std::string::npos)
      << agent_->Log();
  agent_.reset();
}

// Two pods' ports on two cards are programmed at the same time (per-device
// lanes, ABI 1.8): fpgaconf takes 3 s here, and when the first
// PreStartContainer returns, the second port's fpgaconf has already started.
// With one lane the second would start only after the first had ended.
TEST_F(FpgaAgentTest, TwoPortsAreProgrammedAtTheSameTime) {
  FpgaCardSpec other;
  other.pf = "0000:af:00.0";
  other.bridge = "0000:ae:00.0";
  other.region = 3;
  other.fme = 1;
  other.ports = {FpgaPortSpec{3, 0, kNlb0}};
  fx_.AddCard(other);
  fpgaconf_ = fx_.AddFpgaconf(0, 3);
  StartSim();
  StartAgent(Resource(kNlb3Res, FakeModule("fpga-opae-fixture"),
                      "mode = \"region\"\nafu_id = \"" + std::string(kNlb3) +
                          "\"\ninterface_id = \"" + kInterface + "\"\nfpgaconf = \"" + fpgaconf_ +
                          "\"\nprogram_with = \"fpgaconf\""),
             "0s", Agent());
  ASSERT_TRUE(Registered(kNlb3Res));
  ASSERT_TRUE(HealthyIs(kNlb3Res, 3, 3));
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kNlb3Res, {"dfl-port.0"}, &resp).ok());
  ASSERT_TRUE(sim_->Allocate(kNlb3Res, {"dfl-port.3"}, &resp).ok());
  std::atomic<int> done{0};
  size_t started_when_first_done = 0;
  std::mutex mu;
  auto start = [&](const char* id) {
    grpc::Status st = sim_->PreStartContainer(kNlb3Res, {id});
    EXPECT_TRUE(st.ok()) << id << ": " << st.error_message();
    std::lock_guard lock(mu);
    if (done++ == 0) started_when_first_done = fx_.FpgaconfLog().size();
  };
  std::thread a(start, "dfl-port.0"), b(start, "dfl-port.3");
  a.join();
  b.join();
  EXPECT_EQ(started_when_first_done, 2u) << "the second port waited for the first";
  EXPECT_EQ(fx_.Afu("dfl-port.0"), kNlb3);
  EXPECT_EQ(fx_.Afu("dfl-port.3"), kNlb3);
}

}  // namespace
}  // namespace devplug
