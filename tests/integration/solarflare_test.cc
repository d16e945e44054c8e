// The solarflare module in the real devplugd against the kubelet simulator,
// on a fixture node shaped like an Onload host: a pod asking for
// amd.com/onload gets the Onload nodes, the libraries read-only and
// LD_PRELOAD; unloading the onload driver turns the resource Unhealthy and
// loading it again brings it back, with no restart; in nic mode the attach
// command learns which pod got the NIC from the PodResources API.
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "agent_fixture.h"
#include "onload_fixture.h"

namespace devplug {
namespace {

using testing::OnloadFixture;

constexpr char kOnload[] = "amd.com/onload";
constexpr char kNic[] = "amd.com/onload-nic";
constexpr char kA[] = "0000:3b:00.0", kB[] = "0000:d8:00.0";

class SolarflareAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    sim_pod_resources_ = dir_ / "pod-resources/kubelet.sock";
    if (!testing::IsRoot()) GTEST_SKIP() << "Onload fixtures need mknod (root)";
    ASSERT_TRUE(fx_.Install());
    fx_.AddNic({.address = kA, .ifname = "ens1f0np0", .numa_node = 0, .onload_index = 0});
    fx_.AddNic({.address = kB, .ifname = "ens5f0np0", .numa_node = 1, .onload_index = 1});
    fx_.AddNic({.address = "0000:af:00.0",
                .ifname = "eno1",
                .driver = "ice",
                .vendor = 0x8086,
                .device = 0x1592,
                .numa_node = 1,
                .onload_index = -1});
    attach_ = dir_ / "attach.sh";
    seen_ = dir_ / "attach.env";
    testing::WriteFile(attach_,
                       "#!/bin/sh\nenv | grep ^DEVPLUG_ | sort > " + seen_ +
                           "\n[ \"$DEVPLUG_POD_NAME\" = blocked ] && "
                           "{ echo 'ip: cannot move ens5f0np0 into the pod' >&2; exit 1; }\n"
                           "exit 0\n");
    chmod(attach_.c_str(), 0755);
  }
  std::string Agent() const { return "pod_resources_socket = \"" + sim_pod_resources_ + "\""; }
  // nic mode with the attach command, both NICs Healthy.
  void StartNicMode() {
    StartSim();
    StartAgent(
        Resource(kNic, "solarflare",
                 "mode = \"nic\"\nattach_command = \"" + attach_ + "\"\nattach_timeout = \"5s\""),
        "0s", Agent());
    ASSERT_TRUE(Registered(kNic));
    ASSERT_TRUE(HealthyIs(kNic, 2, 2));
  }

  OnloadFixture fx_{host_root()};
  std::string attach_, seen_;
};

TEST_F(SolarflareAgentTest, APodGetsOnloadAndTheDriverComesAndGoes) {
  StartSim();
  StartAgent(Resource(kOnload, "solarflare", "shares = 4"), "100ms", CdiOn());
  ASSERT_TRUE(Registered(kOnload));
  ASSERT_TRUE(HealthyIs(kOnload, 4, 4));
  // The CDI spec on the fixture: each share the driver's nodes and the
  // library mounts.
  std::vector<std::string> names;
  const auto spec = CheckedCdiSpec(kOnload, &names);
  EXPECT_EQ(names, (std::vector<std::string>{"onload-0", "onload-1", "onload-2", "onload-3"}));
  if (names.size() == 4) {
    EXPECT_EQ(SpecNodes(spec["devices"][1]),
              (std::vector<std::string>{"/dev/onload", "/dev/onload_epoll", "/dev/sfc_char"}));
    EXPECT_EQ(spec["devices"][1]["containerEdits"]["mounts"].size(), 6u);
    EXPECT_EQ(spec["devices"][1]["containerEdits"]["mounts"][0]["options"][1], "ro");
  }
  const auto view = sim_->resource(kOnload);
  EXPECT_FALSE(view->options.pre_start_required());  // nothing to do before a start
  // NICs on NUMA nodes 0 and 1: every replica names both (ABI 1.6).
  ASSERT_EQ(view->devices[0].topology().nodes_size(), 2);
  EXPECT_EQ(view->devices[0].topology().nodes(0).id(), 0);
  EXPECT_EQ(view->devices[0].topology().nodes(1).id(), 1);

  v1beta1::ContainerAllocateResponse resp;
  grpc::Status st = sim_->Allocate(kOnload, {"onload-1"}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.devices_size(), 3);
  EXPECT_EQ(resp.devices(0).host_path(), "/dev/onload");
  EXPECT_EQ(resp.devices(1).host_path(), "/dev/onload_epoll");
  EXPECT_EQ(resp.devices(2).host_path(), "/dev/sfc_char");
  EXPECT_EQ(resp.devices(2).permissions(), "rw");
  ASSERT_EQ(resp.mounts_size(), 6);
  for (const auto& m : resp.mounts()) {
    EXPECT_TRUE(m.read_only()) << m.host_path();
    EXPECT_EQ(m.container_path(), "/opt/onload/usr/lib64/" + m.host_path().substr(11));
  }
  EXPECT_EQ(resp.mounts(0).host_path(), "/usr/lib64/libonload.so");
  EXPECT_EQ(resp.envs().at("LD_PRELOAD"), "/opt/onload/usr/lib64/libonload.so");

  // rmmod onload: every share Unhealthy, with the reason in the log.
  fx_.Unload();
  ASSERT_TRUE(HealthyIs(kOnload, 4, 0));
  EXPECT_TRUE(agent_->WaitForLog(
      "Onload not usable: onload driver not loaded (/sys/module/onload missing)", kWait))
      << agent_->Log();
  st = sim_->Allocate(kOnload, {"onload-1"}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // modprobe onload: back, same registration.
  ASSERT_TRUE(fx_.Load());
  ASSERT_TRUE(HealthyIs(kOnload, 4, 4));
  EXPECT_EQ(sim_->resource(kOnload)->registrations, 1u);
  EXPECT_TRUE(agent_->Running());
}

TEST_F(SolarflareAgentTest, NicModeAttachCommandLearnsThePod) {
  StartNicMode();
  const auto view = sim_->resource(kNic);
  EXPECT_TRUE(view->options.pre_start_required());
  EXPECT_TRUE(view->options.get_preferred_allocation_available());
  ASSERT_EQ(view->devices[1].id(), kB);
  EXPECT_EQ(view->devices[1].topology().nodes(0).id(), 1);

  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kNic, {kA}, &resp).ok());
  EXPECT_EQ(resp.envs().at("SFC_RESOURCE_AMD_COM_ONLOAD_NIC"), "ens1f0np0");
  sim_->BindPod("trading", "matcher-0", "engine", kNic, {kA});
  grpc::Status st = sim_->PreStartContainer(kNic, {kA});
  ASSERT_TRUE(st.ok()) << st.error_message();
  const std::string env = testing::ReadFile(seen_);
  for (const char* want : {"DEVPLUG_POD_NAMESPACE=trading\n", "DEVPLUG_POD_NAME=matcher-0\n",
                           "DEVPLUG_CONTAINER=engine\n", "DEVPLUG_DEVICE_IDS=0000:3b:00.0\n",
                           "DEVPLUG_IFNAMES=ens1f0np0\n", "DEVPLUG_RESOURCE=amd.com/onload-nic\n"})
    EXPECT_NE(env.find(want), std::string::npos) << want << " in\n" << env;
  EXPECT_TRUE(
      agent_->WaitForLog("attached 0000:3b:00.0 (ens1f0np0) to trading/matcher-0/engine", kWait))
      << agent_->Log();

  // The command refuses: the container start fails with its stderr line.
  ASSERT_TRUE(sim_->Allocate(kNic, {kB}, &resp).ok());
  sim_->BindPod("trading", "blocked", "engine", kNic, {kB});
  st = sim_->PreStartContainer(kNic, {kB});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("exited with status 1: ip: cannot move ens5f0np0 into the pod"),
            std::string::npos)
      << st.error_message();
}

// A NIC the kubelet still lists under its finished pod (kubelets before 1.34)
// and under the new one: the attach command never runs with either pod's
// name; the start fails and succeeds once the old pod is gone.
TEST_F(SolarflareAgentTest, NicModeNeverAttachesOnAnAmbiguousHolder) {
  StartNicMode();
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kNic, {kA}, &resp).ok());
  sim_->BindPod("trading", "a-old", "engine", kNic, {kA});
  ASSERT_TRUE(sim_->PreStartContainer(kNic, {kA}).ok());
  ASSERT_NE(testing::ReadFile(seen_).find("DEVPLUG_POD_NAME=a-old\n"), std::string::npos);
  std::remove(seen_.c_str());
  ASSERT_TRUE(sim_->Allocate(kNic, {kA}, &resp).ok());
  sim_->BindPod("trading", "b-new", "engine", kNic, {kA});
  grpc::Status st = sim_->PreStartContainer(kNic, {kA});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("under more than one pod"), std::string::npos)
      << st.error_message();
  EXPECT_FALSE(std::filesystem::exists(seen_)) << "attach ran on an ambiguous answer";
  sim_->DeletePod("trading", "a-old");
  st = sim_->PreStartContainer(kNic, {kA});
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_NE(testing::ReadFile(seen_).find("DEVPLUG_POD_NAME=b-new\n"), std::string::npos);
}

TEST_F(SolarflareAgentTest, AnAttachTimeoutLongerThanPrestartTimeoutIsAConfigError) {
  StartSim();
  StartAgent(
      Resource(kNic, "solarflare",
               "mode = \"nic\"\nattach_command = \"" + attach_ + "\"\nattach_timeout = \"20s\""),
      "0s", "prestart_timeout = \"15s\"");
  EXPECT_EQ(agent_->Wait(kWait), std::optional<int>(78)) << agent_->Log();
  EXPECT_NE(agent_->Log().find("devplug.toml:15: resource[0].attach_timeout: \"20s\" must be "
                               "shorter than the agent's prestart_timeout (15s)"),
            std::string::npos)
      << agent_->Log();
  agent_.reset();
}

}  // namespace
}  // namespace devplug
