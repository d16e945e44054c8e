// The generic module through devplugd and the kubelet simulator: KubeVirt's
// tun and vhost-net served from a fixture /dev, and nodes made or removed
// without any uevent (rm, mknod) reaching the kubelet through the agent's
// path watches, long before the resync.
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "agent_fixture.h"

namespace devplug {
namespace {

constexpr char kTun[] = "devices.kubevirt.io/tun";
constexpr char kVhost[] = "devices.kubevirt.io/vhost-net";
constexpr char kSerial[] = "example.com/serial";

class GenericAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    if (!testing::IsRoot()) GTEST_SKIP() << "mknod needs root";
    AgentTest::SetUp();
  }
  bool Node(const std::string& path, unsigned major, unsigned minor) {
    return testing::MakeCharDevice(host_root() + path, major, minor);
  }
  void Remove(const std::string& path) { std::remove((host_root() + path).c_str()); }
};

TEST_F(GenericAgentTest, KubevirtNetworkDevicesFollowRmAndMknodWithoutUevents) {
  ASSERT_TRUE(Node("/dev/net/tun", 10, 200));
  ASSERT_TRUE(Node("/dev/vhost-net", 10, 238));
  StartSim();
  // No uevents reach a fixture tree, and the resync (60 s) is far beyond
  // every wait below: only the path watch can explain what the kubelet sees.
  StartAgent(Resource(kTun, "generic", "paths = [\"/dev/net/tun\"]\nshares = 3\npreopen = true") +
                 Resource(kVhost, "generic", "paths = [\"/dev/vhost-net\"]\nshares = 3") +
                 Resource(kSerial, "generic", "paths = [\"/dev/ttyUSB*\", \"/dev/sub/dir/node\"]"),
             "60s");
  ASSERT_TRUE(Registered(kTun));
  ASSERT_TRUE(Registered(kVhost));
  ASSERT_TRUE(Registered(kSerial));
  ASSERT_TRUE(HealthyIs(kTun, 3, 3));
  ASSERT_TRUE(HealthyIs(kVhost, 3, 3));
  ASSERT_TRUE(HealthyIs(kSerial, 1, 0));  // the literal path, missing

  Remove("/dev/net/tun");
  ASSERT_TRUE(HealthyIs(kTun, 3, 0));
  EXPECT_EQ(sim_->resource(kVhost)->healthy(), 3u);
  ASSERT_TRUE(Node("/dev/net/tun", 10, 200));
  ASSERT_TRUE(HealthyIs(kTun, 3, 3));

  // A glob's matches come and go.
  ASSERT_TRUE(Node("/dev/ttyUSB0", 188, 0));
  ASSERT_TRUE(HealthyIs(kSerial, 2, 1));
  Remove("/dev/ttyUSB0");
  ASSERT_TRUE(HealthyIs(kSerial, 1, 0));

  // A node whose directories do not exist yet.
  std::filesystem::create_directories(host_root() + "/dev/sub/dir");
  ASSERT_TRUE(Node("/dev/sub/dir/node", 10, 240));
  ASSERT_TRUE(HealthyIs(kSerial, 1, 1));
  std::filesystem::remove_all(host_root() + "/dev/sub");
  ASSERT_TRUE(HealthyIs(kSerial, 1, 0));

  // The rescans were the watch's ("path"), none came from a resync.
  auto m =
      testing::RunProcess({testing::DevplugctlPath(), "metrics", "--socket", control_socket()});
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("devplug_rescans_total{cause=\"resync\",resource=\"" + std::string(kTun) +
                          "\"} 0"),
            std::string::npos)
      << m.output;
  EXPECT_EQ(m.output.find("devplug_rescans_total{cause=\"path\",resource=\"" + std::string(kTun) +
                          "\"} 0"),
            std::string::npos)
      << m.output;
  // Each resource registered once: health changes are new snapshots.
  EXPECT_EQ(sim_->resource(kTun)->registrations, 1u);

  // Allocate: the node, same path in the container.
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kTun, {"net_tun::0", "net_tun::2"}, &resp).ok());
  ASSERT_EQ(resp.devices_size(), 1);
  EXPECT_EQ(resp.devices(0).host_path(), "/dev/net/tun");
  EXPECT_EQ(resp.devices(0).container_path(), "/dev/net/tun");
  EXPECT_EQ(resp.devices(0).permissions(), "rw");
}

TEST_F(GenericAgentTest, AGenericConfigMistakeNamesTheNestedLine) {
  StartSim();
  StartAgent(
      Resource(kTun, "generic",
               "paths = [\n  \"/dev/net/tun\",\n  { path = \"/dev/x\", type = \"pipe\" },\n]"),
      "60s");
  // A module key mistake at start is fatal, like a TOML error.
  EXPECT_EQ(agent_->Wait(kWait), 78) << agent_->Log();
  const std::string log = agent_->Log();
  EXPECT_NE(log.find(config_path() + ":15: resource[0].paths[1].type: must be \"device\" or "
                                     "\"mount\""),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace devplug
