// The vfio module end to end: devplugd with a vfio resource on a fixture
// node, the kubelet simulator over real sockets, and what a DPDK or
// KubeVirt pod would receive.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "agent_fixture.h"
#include "cdi/spec.h"
#include "sysfs_fixture.h"

namespace devplug {
namespace {

using testing::PciSpec;
using testing::SysfsFixture;

constexpr char kVf[] = "intel.com/sriov_vf";
constexpr char kEnv[] = "PCI_RESOURCE_INTEL_COM_SRIOV_VF";

// Node 0: VFs 3b:02.0-3 (groups 10-13); node 1: VFs af:02.0-3 (groups
// 20-23), of which af:02.3 has no /dev/vfio node.
class VfioAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    if (!testing::IsRoot()) GTEST_SKIP() << "VFIO fixtures need mknod (root)";
    SysfsFixture fx(host_root());
    ASSERT_TRUE(fx.AddVfioContainer());
    for (int node = 0; node < 2; node++) {
      const std::string bus = node == 0 ? "0000:3b" : "0000:af";
      PciSpec pf{.address = bus + ":00.0",
                 .device = 0x1592,
                 .driver = "ice",
                 .numa_node = node,
                 .iommu_group = 90 + node,
                 .parent = {},
                 .net = {}};
      std::vector<PciSpec> vfs;
      for (int k = 0; k < 4; k++) {
        const int group = 10 * (node + 1) + k;
        vfs.push_back({.address = bus + ":02." + std::to_string(k),
                       .driver = "vfio-pci",
                       .numa_node = node,
                       .iommu_group = group,
                       .parent = {},
                       .net = {}});
        if (!(node == 1 && k == 3)) {
          ASSERT_TRUE(fx.AddVfioGroup(group));
        }
      }
      fx.AddSriov(pf, vfs);
    }
  }
};

TEST_F(VfioAgentTest, RegistersAndHandsOutVfioNodesAndTheEnv) {
  StartSim();
  StartAgent(Resource(kVf, "vfio", "vendor = \"0x8086\"\ndevices = [\"1889\"]"));
  ASSERT_TRUE(Registered(kVf));
  ASSERT_TRUE(sim_->WaitUntil(
      [](const auto& rs) { return rs.count(kVf) && rs.at(kVf).devices.size() == 8; }, kWait));
  const auto view = sim_->resource(kVf);
  // GetPreferredAllocation is advertised, PreStartContainer is not.
  EXPECT_TRUE(view->options.get_preferred_allocation_available());
  EXPECT_FALSE(view->options.pre_start_required());
  std::map<std::string, const v1beta1::Device*> by_id;
  for (const auto& d : view->devices) by_id[d.id()] = &d;
  ASSERT_TRUE(by_id.count("0000:3b:02.1"));
  EXPECT_EQ(by_id["0000:3b:02.1"]->health(), "Healthy");
  ASSERT_EQ(by_id["0000:3b:02.1"]->topology().nodes_size(), 1);
  EXPECT_EQ(by_id["0000:3b:02.1"]->topology().nodes(0).id(), 0);
  EXPECT_EQ(by_id["0000:af:02.2"]->topology().nodes(0).id(), 1);
  EXPECT_EQ(by_id["0000:af:02.3"]->health(), "Unhealthy");
  EXPECT_FALSE(by_id.count("0000:3b:00.0"));  // the PF is on its own driver

  v1beta1::ContainerAllocateResponse resp;
  grpc::Status st = sim_->Allocate(kVf, {"0000:af:02.1", "0000:3b:02.0"}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.devices_size(), 3);
  EXPECT_EQ(resp.devices(0).host_path(), "/dev/vfio/vfio");
  EXPECT_EQ(resp.devices(0).container_path(), "/dev/vfio/vfio");
  EXPECT_EQ(resp.devices(0).permissions(), "rw");
  EXPECT_EQ(resp.devices(1).host_path(), "/dev/vfio/21");
  EXPECT_EQ(resp.devices(2).host_path(), "/dev/vfio/10");
  ASSERT_EQ(resp.envs().size(), 1u);
  EXPECT_EQ(resp.envs().at(kEnv), "0000:af:02.1,0000:3b:02.0");
  EXPECT_EQ(resp.mounts_size(), 0);

  st = sim_->Allocate(kVf, {"0000:af:02.3"}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("0000:af:02.3"), std::string::npos) << st.error_message();

  std::vector<std::string> ids;
  st = sim_->GetPreferredAllocation(
      kVf, {"0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2", "0000:af:02.0", "0000:af:02.1"},
      {"0000:af:02.1"}, 2, &ids);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(ids, (std::vector<std::string>{"0000:af:02.1", "0000:af:02.0"}));
}

// A kernel with IOMMUFD (CONFIG_IOMMUFD, CONFIG_VFIO_DEVICE_CDEV): the misc
// node /dev/iommu, and per VFIO device a class "vfio-dev" device vfio<N>
// under its PCI function whose node the kernel names vfio/devices/vfio<N>.
// A container gets those as well as the group nodes, and the resource's CDI
// spec carries them.
TEST_F(VfioAgentTest, IommufdAddsTheIommuAndDeviceNodesToAnswersAndTheSpec) {
  ASSERT_TRUE(testing::MakeCharDevice(host_root() + "/dev/iommu", 10, 123));
  auto cdev = [&](const std::string& address, int n, bool node) {
    const std::string dev =
        host_root() + "/sys/bus/pci/devices/" + address + "/vfio-dev/vfio" + std::to_string(n);
    testing::WriteFile(dev + "/dev", "237:" + std::to_string(n) + "\n");
    return !node ||
           testing::MakeCharDevice(host_root() + "/dev/vfio/devices/vfio" + std::to_string(n), 237,
                                   static_cast<unsigned>(n));
  };
  ASSERT_TRUE(cdev("0000:3b:02.0", 0, true));
  ASSERT_TRUE(cdev("0000:3b:02.1", 1, false));  // its node not made (yet)
  StartSim();
  StartAgent(Resource(kVf, "vfio", "vendor = \"0x8086\"\ndevices = [\"1889\"]\ncdi = \"cri\""),
             "0s", "cdi_dir = \"/run/cdi\"");
  ASSERT_TRUE(Registered(kVf));
  ASSERT_TRUE(HealthyIs(kVf, 8, 7));
  auto nodes = [&](const std::vector<std::string>& ids) {
    v1beta1::ContainerAllocateResponse resp;
    grpc::Status st = sim_->Allocate(kVf, ids, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    std::vector<std::string> out;
    for (const auto& d : resp.devices()) out.push_back(d.host_path());
    return out;
  };
  EXPECT_EQ(nodes({"0000:3b:02.0"}),
            (std::vector<std::string>{"/dev/vfio/vfio", "/dev/vfio/10", "/dev/iommu",
                                      "/dev/vfio/devices/vfio0"}));
  EXPECT_EQ(nodes({"0000:3b:02.1"}), (std::vector<std::string>{"/dev/vfio/vfio", "/dev/vfio/11"}));

  const auto spec = nlohmann::json::parse(
      testing::ReadFile(host_root() + "/run/cdi/devplug-devplug.intel.com-sriov_vf.json"));
  EXPECT_TRUE(cdi::Validate(spec).empty()) << spec.dump(1);
  ASSERT_EQ(spec["devices"].size(), 7u);  // the Unhealthy one has no recipe
  const auto& first = spec["devices"][0];
  EXPECT_EQ(first["name"], "0000:3b:02.0");
  std::vector<std::string> paths;
  for (const auto& n : first["containerEdits"]["deviceNodes"]) paths.push_back(n["path"]);
  EXPECT_EQ(paths, (std::vector<std::string>{"/dev/vfio/vfio", "/dev/vfio/10", "/dev/iommu",
                                             "/dev/vfio/devices/vfio0"}));
  EXPECT_EQ(first["containerEdits"]["deviceNodes"][3]["major"], 237);
  EXPECT_EQ(first["containerEdits"]["env"][0], std::string(kEnv) + "=0000:3b:02.0");
}

TEST_F(VfioAgentTest, BadVendorIsAConfigErrorWithFileLineAndKey) {
  WriteFile(config_path(), Config(Resource(kVf, "vfio", "vendor = \"intel\"")));
  auto r = testing::RunDevplugd({"--config", config_path(), "--check-config"});
  EXPECT_EQ(r.exit_code, 78) << r.output;
  EXPECT_NE(
      r.output.find(config_path() + ":13: resource[0].vendor: \"intel\" is not a 16-bit PCI ID"),
      std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace devplug
