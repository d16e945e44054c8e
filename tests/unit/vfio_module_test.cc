// The vfio module through the real ABI on fixture trees shaped like a node's
// sysfs and devfs, and on this machine's real PCI bus.
#include <filesystem>

#include <gtest/gtest.h>

#include "module_harness.h"
#include "sysfs_fixture.h"
#include "test_util.h"

namespace devplug::modules {
namespace {

using devplug::testing::PciSpec;
using devplug::testing::SysfsFixture;
using devplug::testing::TempDir;
using harness::Find;
using harness::Ids;
using Strings = std::vector<std::string>;

constexpr char kName[] = "intel.com/sriov_vf";
constexpr char kEnv[] = "PCI_RESOURCE_INTEL_COM_SRIOV_VF";

// Two NUMA nodes, each with an Intel PF whose VFs are bound to vfio-pci
// (one VF on node 1 bound to iavf instead, one whose /dev/vfio node is
// missing), a Mellanox VF also on vfio-pci, and two Intel functions that
// share one IOMMU group.
class VfioModuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!devplug::testing::IsRoot()) GTEST_SKIP() << "VFIO fixtures need mknod (root)";
    ASSERT_TRUE(fx_.AddVfioContainer());
    AddPf("0000:3b", 0, 40, 60, "0000:3a:00.0");
    AddPf("0000:af", 1, 41, 70, "0000:ae:00.0");
    fx_.Unbind("0000:af:01.3");
    fx_.Bind("0000:af:01.3", "iavf");
    fx_.RemoveVfioGroup(72);
    fx_.AddPci({.address = "0000:5e:00.2",
                .vendor = 0x15b3,
                .device = 0x101e,
                .driver = "vfio-pci",
                .numa_node = 0,
                .iommu_group = 80});
    ASSERT_TRUE(fx_.AddVfioGroup(80));
    for (const char* a : {"0000:d8:00.0", "0000:d8:00.1"})
      fx_.AddPci({.address = a,
                  .vendor = 0x8086,
                  .device = 0x10fb,
                  .driver = "vfio-pci",
                  .numa_node = 1,
                  .iommu_group = 90});
    ASSERT_TRUE(fx_.AddVfioGroup(90));
  }

  void AddPf(const std::string& bus, int numa, int pf_group, int first_group,
             const std::string& bridge) {
    PciSpec pf{.address = bus + ":00.0",
               .device = 0x1592,
               .driver = "ice",
               .numa_node = numa,
               .iommu_group = pf_group,
               .parent = bridge};
    std::vector<PciSpec> vfs;
    for (int k = 0; k < 4; k++) {
      vfs.push_back({.address = bus + ":01." + std::to_string(k),
                     .driver = "vfio-pci",
                     .numa_node = numa,
                     .iommu_group = first_group + k});
      ASSERT_TRUE(fx_.AddVfioGroup(first_group + k));
    }
    fx_.AddSriov(pf, vfs);
  }

  std::unique_ptr<ModuleInstance> Open(const std::string& body = "vendor = \"8086\"\n") {
    auto inst = harness::Open("vfio", kName, root_.path(), body);
    EXPECT_TRUE(inst.ok()) << inst.status().message();
    return inst.ok() ? std::move(inst).value() : nullptr;
  }

  TempDir root_;
  SysfsFixture fx_{root_.path()};
};

TEST_F(VfioModuleTest, DiscoveryIdsHealthAndTopology) {
  auto inst = Open();
  ASSERT_TRUE(inst);
  DeviceListPtr list = inst->devices();
  EXPECT_EQ(Ids(*list),
            (Strings{"0000:3b:01.0", "0000:3b:01.1", "0000:3b:01.2", "0000:3b:01.3", "0000:af:01.0",
                     "0000:af:01.1", "0000:af:01.2", "0000:d8:00.0", "0000:d8:00.1"}));
  EXPECT_EQ(Find(*list, "0000:3b:01.2")->numa_node, 0);
  EXPECT_EQ(Find(*list, "0000:d8:00.1")->numa_node, 1);
  EXPECT_FALSE(Find(*list, "0000:af:01.2")->healthy);  // /dev/vfio/72 is missing
  EXPECT_EQ(Find(*list, "0000:af:01.2")->health_reason, "/dev/vfio/72 missing");
  EXPECT_EQ(Find(*list, "0000:3b:01.0")->health_reason, "");
  EXPECT_EQ(Ids(*list, true).size(), 8u);

  // What DRA publishes (ABI 1.9): a VF sits beside its PF under the PF's
  // bridge, so under the bridge's root complex; the unhealthy one too.
  const Device* vf = Find(*list, "0000:af:01.2");
  EXPECT_EQ(vf->pci_address, "0000:af:01.2");
  EXPECT_EQ(vf->pcie_root, "pci0000:ae");
  using T = DeviceAttribute::Type;
  EXPECT_EQ(vf->attributes, (std::vector<DeviceAttribute>{{"vendorID", T::kString, "8086", 0},
                                                          {"deviceID", T::kString, "1889", 0},
                                                          {"iommuGroup", T::kInt, "", 72}}));
  EXPECT_EQ(Find(*list, "0000:d8:00.0")->pcie_root, "pci0000:d8");
}

TEST_F(VfioModuleTest, AllocateGivesContainerAndGroupNodesAndTheEnv) {
  auto inst = Open();
  ASSERT_TRUE(inst);
  auto r = harness::Allocate(*inst, {"0000:d8:00.1", "0000:3b:01.2", "0000:d8:00.0"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->device_nodes, (std::vector<DeviceNode>{{"/dev/vfio/vfio", "/dev/vfio/vfio", "rw"},
                                                      {"/dev/vfio/90", "/dev/vfio/90", "rw"},
                                                      {"/dev/vfio/62", "/dev/vfio/62", "rw"}}));
  ASSERT_EQ(r->envs.size(), 1u);
  EXPECT_EQ(r->envs[0].first, kEnv);
  EXPECT_EQ(r->envs[0].second, "0000:d8:00.1,0000:3b:01.2,0000:d8:00.0");
  EXPECT_TRUE(r->mounts.empty());
  EXPECT_TRUE(r->annotations.empty());

  auto unhealthy = harness::Allocate(*inst, {"0000:af:01.2"});
  EXPECT_EQ(unhealthy.status().code(), StatusCode::kInvalidArgument);
  auto other_driver = harness::Allocate(*inst, {"0000:af:01.3"});
  EXPECT_EQ(other_driver.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(VfioModuleTest, SelectorsAndShortAddresses) {
  auto mlx = Open("vendor = \"0x15B3\"\n");
  ASSERT_TRUE(mlx);
  EXPECT_EQ(Ids(*mlx->devices()), Strings{"0000:5e:00.2"});

  auto by_device = Open("vendor = \"8086\"\ndevices = [\"10fb\", \"0x1234\"]\n");
  ASSERT_TRUE(by_device);
  EXPECT_EQ(Ids(*by_device->devices()), (Strings{"0000:d8:00.0", "0000:d8:00.1"}));

  auto allow =
      Open("vendor = \"8086\"\naddresses = [\"3B:01.1\", \"0000:af:01.0\", \"af:01.3\"]\n");
  ASSERT_TRUE(allow);
  EXPECT_EQ(Ids(*allow->devices()), (Strings{"0000:3b:01.1", "0000:af:01.0"}));

  auto iavf = Open("vendor = \"8086\"\ndriver = \"iavf\"\n");
  ASSERT_TRUE(iavf);
  EXPECT_EQ(Ids(*iavf->devices()), Strings{"0000:af:01.3"});
  // Health does not depend on the driver: group 73's node exists.
  EXPECT_TRUE(Find(*iavf->devices(), "0000:af:01.3")->healthy);
}

TEST_F(VfioModuleTest, UnbindRebindRemoveAndGroupNodes) {
  auto inst = Open();
  ASSERT_TRUE(inst);
  fx_.Unbind("0000:3b:01.1");
  harness::Rescan(*inst);
  EXPECT_EQ(Find(*inst->devices(), "0000:3b:01.1"), nullptr);  // left the list
  fx_.Bind("0000:3b:01.1", "vfio-pci");
  harness::Rescan(*inst);
  ASSERT_NE(Find(*inst->devices(), "0000:3b:01.1"), nullptr);
  EXPECT_TRUE(Find(*inst->devices(), "0000:3b:01.1")->healthy);

  fx_.RemovePci("0000:3b:01.3");  // hot-unplug
  fx_.RemoveVfioGroup(60);
  ASSERT_TRUE(fx_.AddVfioGroup(72));
  harness::Rescan(*inst);
  EXPECT_EQ(Find(*inst->devices(), "0000:3b:01.3"), nullptr);
  EXPECT_FALSE(Find(*inst->devices(), "0000:3b:01.0")->healthy);
  EXPECT_TRUE(Find(*inst->devices(), "0000:af:01.2")->healthy);  // recovered

  // Without the container node nothing is usable.
  std::filesystem::remove(root_ / "dev/vfio/vfio");
  harness::Rescan(*inst);
  EXPECT_TRUE(Ids(*inst->devices(), true).empty());
  ASSERT_TRUE(fx_.AddVfioContainer());
  harness::Rescan(*inst);
  EXPECT_EQ(Ids(*inst->devices(), true).size(), 7u);
}

TEST_F(VfioModuleTest, NoIommuModeUsesTheNoiommuNode) {
  fx_.RemoveVfioGroup(61);
  ASSERT_TRUE(fx_.AddVfioGroup(61, /*noiommu=*/true));
  auto inst = Open();
  ASSERT_TRUE(inst);
  EXPECT_TRUE(Find(*inst->devices(), "0000:3b:01.1")->healthy);
  auto r = harness::Allocate(*inst, {"0000:3b:01.1"});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->device_nodes.size(), 2u);
  EXPECT_EQ(r->device_nodes[1].host_path, "/dev/vfio/noiommu-61");
}

TEST_F(VfioModuleTest, PreferredAllocationPacksNumaThenIommuGroup) {
  auto inst = Open();
  ASSERT_TRUE(inst);
  const Strings healthy = Ids(*inst->devices(), true);
  // Node 0 has four, node 1 has four (two of them one group).
  auto two = harness::Prefer(*inst, healthy, {}, 2);
  ASSERT_TRUE(two.ok()) << two.status().message();
  // Both nodes fit equally; the lower node wins the tie.
  EXPECT_EQ(*two, (Strings{"0000:3b:01.0", "0000:3b:01.1"}));
  auto with_must = harness::Prefer(*inst, healthy, {"0000:3b:01.3"}, 3);
  ASSERT_TRUE(with_must.ok());
  EXPECT_EQ(*with_must, (Strings{"0000:3b:01.3", "0000:3b:01.0", "0000:3b:01.1"}));
  // must_include on node 1 in group 90: its partner first, then node 1.
  EXPECT_EQ(*harness::Prefer(*inst, healthy, {"0000:af:01.1"}, 3),
            (Strings{"0000:af:01.1", "0000:d8:00.0", "0000:d8:00.1"}));
  auto group = harness::Prefer(*inst, healthy, {"0000:d8:00.1"}, 3);
  ASSERT_TRUE(group.ok());
  EXPECT_EQ(*group, (Strings{"0000:d8:00.1", "0000:d8:00.0", "0000:af:01.0"}));
  // Five cannot fit one node: four from one node, one from the other.
  auto five = harness::Prefer(*inst, healthy, {}, 5);
  ASSERT_TRUE(five.ok());
  ASSERT_EQ(five->size(), 5u);
  int node0 = 0;
  for (const auto& id : *five) node0 += id.rfind("0000:3b", 0) == 0;
  EXPECT_TRUE(node0 == 4 || node0 == 1) << node0;
}

TEST_F(VfioModuleTest, BadKeysNameFileLineAndKey) {
  struct Case {
    std::string body;
    std::string error;
  } cases[] = {
      {"vendor = \"intel\"\n",
       "module.toml:4: resource[0].vendor: \"intel\" is not a 16-bit PCI ID in hex"},
      {"vendor = \"8086\"\ndevices = [\"1889\", \"12345\"]\n",
       "module.toml:5: resource[0].devices: \"12345\" is not a 16-bit PCI ID"},
      {"vendor = \"8086\"\ndevices = []\n", "module.toml:5: resource[0].devices: is empty"},
      {"vendor = \"8086\"\n\naddresses = [\"3b:01.0\", \"3b:01\"]\n",
       "module.toml:6: resource[0].addresses: \"3b:01\" is not a PCI function address"},
      {"vendor = \"8086\"\ndriver = \"../vfio\"\n",
       "module.toml:5: resource[0].driver: must be a kernel driver name"},
      {"devices = [\"1889\"]\n", "vendor"},
      {"vendor = 8086\n", "module.toml:4: resource[0].vendor: must be a string"},
  };
  for (const Case& c : cases) {
    auto inst = harness::Open("vfio", kName, root_.path(), c.body);
    ASSERT_FALSE(inst.ok()) << c.body;
    EXPECT_NE(inst.status().message().find(c.error), std::string::npos) << c.body << "\n"
                                                                        << inst.status().message();
  }
}

// The real PCI bus of this machine: every function of a vendor bound to a
// driver, read independently here, is what the module lists.
TEST(VfioModuleRealTest, ListsThisMachinesFunctionsOfADriver) {
  namespace fs = std::filesystem;
  if (!fs::exists("/sys/bus/pci/devices")) GTEST_SKIP() << "no PCI bus";
  // The most common (vendor, driver) pair on this machine.
  std::map<std::pair<std::string, std::string>, Strings> pairs;
  for (const auto& e : fs::directory_iterator("/sys/bus/pci/devices")) {
    std::error_code ec;
    auto drv = fs::read_symlink(e.path() / "driver", ec);
    if (ec) continue;
    std::string vendor = devplug::testing::ReadFile(e.path() / "vendor");
    vendor = vendor.substr(2, 4);
    pairs[{vendor, drv.filename().string()}].push_back(e.path().filename().string());
  }
  if (pairs.empty()) GTEST_SKIP() << "no bound PCI function";
  auto best = pairs.begin();
  for (auto it = pairs.begin(); it != pairs.end(); ++it)
    if (it->second.size() > best->second.size()) best = it;
  std::sort(best->second.begin(), best->second.end());

  auto inst = harness::Open(
      "vfio", kName, "/",
      "vendor = \"" + best->first.first + "\"\ndriver = \"" + best->first.second + "\"\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  ASSERT_NE((*inst)->devices(), nullptr);
  EXPECT_EQ(Ids(*(*inst)->devices()), best->second);
  for (const Device& d : *(*inst)->devices()) {
    std::error_code ec;
    auto group = fs::read_symlink("/sys/bus/pci/devices/" + d.id + "/iommu_group", ec);
    const bool node =
        !ec && fs::exists("/dev/vfio/vfio") && fs::exists("/dev/vfio/" + group.filename().string());
    EXPECT_EQ(d.healthy, node) << d.id;
  }
}

}  // namespace
}  // namespace devplug::modules
