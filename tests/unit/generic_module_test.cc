// The generic module, loaded through the ABI, on fixture trees under a
// temporary host_root shaped like the real /dev and /sys (device nodes made
// with mknod, /sys/dev/char links, USB devices under /sys/bus/usb/devices),
// and on this machine's real /dev/net/tun.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "module_harness.h"
#include "test_util.h"

namespace devplug::modules {
namespace {

using devplug::testing::MakeCharDevice;
using devplug::testing::TempDir;
using devplug::testing::WriteFile;
using harness::Find;
using harness::Ids;
using harness::Rescan;

constexpr char kName[] = "devices.kubevirt.io/tun";

StatusOr<std::unique_ptr<ModuleInstance>> Generic(const std::string& host_root,
                                                  const std::string& body) {
  return harness::Open("generic", kName, host_root, body);
}

void Symlink(const std::string& target, const std::string& link) {
  std::filesystem::create_directories(std::filesystem::path(link).parent_path());
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0) << link;
}

// A misc node with its /sys/dev/char link, as the kernel lays them out.
void MiscNode(const TempDir& root, const std::string& dev, unsigned minor,
              const std::string& sys_device) {
  ASSERT_TRUE(MakeCharDevice(root / dev, 10, minor));
  WriteFile(root / (sys_device + "/dev"), "10:" + std::to_string(minor) + "\n");
  Symlink("../../" + sys_device.substr(4), root / ("sys/dev/char/10:" + std::to_string(minor)));
}

class GenericTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!devplug::testing::IsRoot()) GTEST_SKIP() << "mknod needs root";
  }
  TempDir root_;
};

TEST_F(GenericTest, LiteralPathsStayListedAndFlip) {
  MiscNode(root_, "dev/net/tun", 200, "sys/devices/virtual/misc/tun");
  auto inst = Generic(root_.path(), "paths = [\"/dev/net/tun\", \"/dev/vhost-net\"]\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  DeviceListPtr list = (*inst)->devices();
  ASSERT_EQ(Ids(*list), (std::vector<std::string>{"net_tun", "vhost-net"}));
  EXPECT_TRUE(Find(*list, "net_tun")->healthy);
  EXPECT_EQ(Find(*list, "net_tun")->numa_node, -1);  // virtual: no topology
  const Device* vhost = Find(*list, "vhost-net");
  EXPECT_FALSE(vhost->healthy);
  EXPECT_EQ(vhost->health_reason, "/dev/vhost-net missing");

  // A regular file where the node should be is not a device.
  WriteFile(root_ / "dev/vhost-net", "");
  Rescan(**inst);
  EXPECT_EQ(Find(*(*inst)->devices(), "vhost-net")->health_reason,
            "/dev/vhost-net is not a device node");
  std::remove((root_ / "dev/vhost-net").c_str());
  ASSERT_TRUE(MakeCharDevice(root_ / "dev/vhost-net", 10, 238));
  Rescan(**inst);
  EXPECT_TRUE(Find(*(*inst)->devices(), "vhost-net")->healthy);

  auto r = harness::Allocate(**inst, {"net_tun", "vhost-net"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->device_nodes.size(), 2u);
  EXPECT_EQ(r->device_nodes[0].host_path, "/dev/net/tun");  // host_root never leaks
  EXPECT_EQ(r->device_nodes[0].container_path, "/dev/net/tun");
  EXPECT_EQ(r->device_nodes[0].permissions, "rw");
  EXPECT_EQ(r->device_nodes[1].host_path, "/dev/vhost-net");

  std::remove((root_ / "dev/net/tun").c_str());
  Rescan(**inst);
  EXPECT_FALSE(Find(*(*inst)->devices(), "net_tun")->healthy);
  EXPECT_FALSE(harness::Allocate(**inst, {"net_tun"}).ok());  // Unhealthy: refused
  EXPECT_FALSE(harness::Allocate(**inst, {"nope"}).ok());     // unknown: refused
}

TEST_F(GenericTest, GlobsAppearAndLeaveAndSkipWrongTypes) {
  ASSERT_TRUE(MakeCharDevice(root_ / "dev/ttyUSB0", 188, 0));
  ASSERT_TRUE(MakeCharDevice(root_ / "dev/ttyUSB1", 188, 1));
  WriteFile(root_ / "dev/ttyUSB.lock", "");  // matches, but no device node
  ASSERT_EQ(mkdir((root_ / "dev/ttyUSB9").c_str(), 0755), 0);
  auto inst = Generic(root_.path(),
                      "paths = [{ path = \"/dev/ttyUSB*\", container_path = \"/dev/serial/\" }]\n"
                      "permissions = \"r\"\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_EQ(Ids(*(*inst)->devices()), (std::vector<std::string>{"ttyUSB0", "ttyUSB1"}));
  auto r = harness::Allocate(**inst, {"ttyUSB1"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->device_nodes[0].host_path, "/dev/ttyUSB1");
  // A container_path ending in '/' gets the node's name.
  EXPECT_EQ(r->device_nodes[0].container_path, "/dev/serial/ttyUSB1");
  EXPECT_EQ(r->device_nodes[0].permissions, "r");

  std::remove((root_ / "dev/ttyUSB0").c_str());
  ASSERT_TRUE(MakeCharDevice(root_ / "dev/ttyUSB2", 188, 2));
  Rescan(**inst);
  EXPECT_EQ(Ids(*(*inst)->devices()), (std::vector<std::string>{"ttyUSB1", "ttyUSB2"}));
}

TEST_F(GenericTest, SymlinksAreFollowedForTheTypeButNamedAsLinks) {
  ASSERT_TRUE(MakeCharDevice(root_ / "dev/ttyUSB0", 188, 0));
  Symlink("../../ttyUSB0", root_ / "dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A50285BI-if00-port0");
  auto inst = Generic(root_.path(), "paths = [\"/dev/serial/by-id/*\"]\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  DeviceListPtr list = (*inst)->devices();
  ASSERT_EQ(
      Ids(*list),
      (std::vector<std::string>{"serial_by-id_usb-FTDI_FT232R_USB_UART_A50285BI-if00-port0"}));
  EXPECT_EQ(list->front().recipe.device_nodes[0].host_path,
            "/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A50285BI-if00-port0");
}

TEST_F(GenericTest, LongIdsAreShortenedWithAHash) {
  const std::string dir = "dev/disk/by-id/usb-SanDisk_Ultra_Fit_4C530001230918116283-0:0-part";
  ASSERT_TRUE(MakeCharDevice(root_ / (dir + "1"), 8, 1));
  ASSERT_TRUE(MakeCharDevice(root_ / (dir + "12"), 8, 12));
  auto inst = Generic(root_.path(), "paths = [\"/dev/disk/by-id/*\"]\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  // 63 characters stay; 64 become 54 + '-' + 8 hex digits of the SHA-256
  // of the whole ID (values from sha256sum).
  EXPECT_EQ(Ids(*(*inst)->devices()),
            (std::vector<std::string>{
                "disk_by-id_usb-SanDisk_Ultra_Fit_4C530001230918116283--012fbabc",
                "disk_by-id_usb-SanDisk_Ultra_Fit_4C530001230918116283-0:0-part1"}));

  // The replica suffix counts: each replica's whole ID is hashed.
  auto shared = Generic(root_.path(), "paths = [\"/" + dir + "1\"]\nshares = 2\n");
  ASSERT_TRUE(shared.ok()) << shared.status().message();
  EXPECT_EQ(Ids(*(*shared)->devices()),
            (std::vector<std::string>{
                "disk_by-id_usb-SanDisk_Ultra_Fit_4C530001230918116283--bc856dba",
                "disk_by-id_usb-SanDisk_Ultra_Fit_4C530001230918116283--f28084a4"}));
}

TEST_F(GenericTest, TopologyFromTheFirstAncestorWithANumaNode) {
  const std::string pci = "sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0";
  WriteFile(root_ / "sys/devices/pci0000:80/0000:80:01.0/numa_node", "1\n");
  WriteFile(root_ / (pci + "/numa_node"), "-1\n");  // unknown here: look further up
  ASSERT_TRUE(MakeCharDevice(root_ / "dev/video0", 81, 0));
  WriteFile(root_ / (pci + "/video4linux/video0/dev"), "81:0\n");
  Symlink("../../devices/pci0000:80/0000:80:01.0/0000:81:00.0/video4linux/video0",
          root_ / "sys/dev/char/81:0");
  auto inst = Generic(root_.path(), "paths = [\"/dev/video*\"]\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  ASSERT_EQ((*inst)->devices()->size(), 1u);
  EXPECT_EQ((*inst)->devices()->front().numa_node, 1);
}

TEST_F(GenericTest, SharesSpreadOrPackReplicas) {
  ASSERT_TRUE(MakeCharDevice(root_ / "dev/dri/renderD128", 226, 128));
  ASSERT_TRUE(MakeCharDevice(root_ / "dev/dri/renderD129", 226, 129));
  const std::string paths = "paths = [\"/dev/dri/renderD*\"]\nshares = 3\n";
  auto spread = Generic(root_.path(), paths);
  ASSERT_TRUE(spread.ok()) << spread.status().message();
  const std::vector<std::string> all = Ids(*(*spread)->devices());
  ASSERT_EQ(all.size(), 6u);
  EXPECT_EQ(all[0], "dri_renderD128::0");
  // For DRA (ABI 1.10): each node is one device, shared by claims.
  EXPECT_EQ(Find(*(*spread)->devices(), "dri_renderD129::2")->share_of, "dri_renderD129");
  // Replicas share their device's recipe.
  EXPECT_EQ(Find(*(*spread)->devices(), "dri_renderD129::2")->recipe.device_nodes[0].host_path,
            "/dev/dri/renderD129");

  auto two = harness::Prefer(**spread, all, {}, 2);
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(*two, (std::vector<std::string>{"dri_renderD128::0", "dri_renderD129::0"}));
  auto with = harness::Prefer(**spread, all, {"dri_renderD129::1"}, 3);
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(*with, (std::vector<std::string>{"dri_renderD129::1", "dri_renderD128::0",
                                             "dri_renderD128::1"}));

  auto pack = Generic(root_.path(), paths + "preferred = \"pack\"\n");
  ASSERT_TRUE(pack.ok()) << pack.status().message();
  auto packed = harness::Prefer(**pack, all, {}, 3);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(*packed, (std::vector<std::string>{"dri_renderD128::0", "dri_renderD128::1",
                                               "dri_renderD128::2"}));
  auto packed_with = harness::Prefer(**pack, all, {"dri_renderD129::2"}, 2);
  ASSERT_TRUE(packed_with.ok());
  EXPECT_EQ(*packed_with, (std::vector<std::string>{"dri_renderD129::2", "dri_renderD129::0"}));
}

TEST_F(GenericTest, GroupMountsAndEnvs) {
  ASSERT_TRUE(MakeCharDevice(root_ / "dev/sev", 10, 124));
  WriteFile(root_ / "etc/sev/cert_chain.cert", "cert");
  auto inst = Generic(root_.path(), R"(group = true
paths = [
  "/dev/sev",
  { path = "/etc/sev", type = "mount", container_path = "/etc/sev-host", read_only = true },
  { path = "/dev/sev-guest", optional = true },
]
envs = { SEV_CERTS = "/etc/sev-host", "WEIRD.NAME" = "1" }
)");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  DeviceListPtr list = (*inst)->devices();
  ASSERT_EQ(Ids(*list), (std::vector<std::string>{"sev"}));
  EXPECT_TRUE(list->front().healthy);  // the optional node may be missing
  auto r = harness::Allocate(**inst, {"sev"});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->device_nodes.size(), 1u);
  EXPECT_EQ(r->device_nodes[0].host_path, "/dev/sev");
  ASSERT_EQ(r->mounts.size(), 1u);
  EXPECT_EQ(r->mounts[0].host_path, "/etc/sev");
  EXPECT_EQ(r->mounts[0].container_path, "/etc/sev-host");
  EXPECT_TRUE(r->mounts[0].read_only);
  EXPECT_EQ(r->envs, (std::vector<std::pair<std::string, std::string>>{
                         {"SEV_CERTS", "/etc/sev-host"}, {"WEIRD.NAME", "1"}}));

  // The optional node, once there, comes along; a required one missing
  // makes the whole group Unhealthy.
  ASSERT_TRUE(MakeCharDevice(root_ / "dev/sev-guest", 10, 125));
  std::filesystem::remove_all(root_ / "etc/sev");
  Rescan(**inst);
  EXPECT_FALSE((*inst)->devices()->front().healthy);
  EXPECT_EQ((*inst)->devices()->front().health_reason, "/etc/sev missing");
}

TEST_F(GenericTest, GroupGlobMustMatchExactlyOneNode) {
  ASSERT_TRUE(MakeCharDevice(root_ / "dev/hidraw0", 240, 0));
  ASSERT_TRUE(MakeCharDevice(root_ / "dev/hidraw1", 240, 1));
  auto inst = Generic(root_.path(), "group = true\npaths = [\"/dev/hidraw*\"]\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_FALSE((*inst)->devices()->front().healthy);
  EXPECT_EQ((*inst)->devices()->front().health_reason, "/dev/hidraw* matches 2 nodes");
  std::remove((root_ / "dev/hidraw1").c_str());
  Rescan(**inst);
  EXPECT_TRUE((*inst)->devices()->front().healthy);
}

// A USB serial adapter as sysfs shows it: the device under its controller's
// PCI function, an interface, and a tty below it.
struct UsbFixture {
  static constexpr char kDev[] = "sys/devices/pci0000:00/0000:00:14.0/usb1/1-2";
  explicit UsbFixture(const TempDir& root, int devnum = 4) : root(root) {
    WriteFile(root / "sys/devices/pci0000:00/0000:00:14.0/numa_node", "0\n");
    const std::string d = kDev;
    WriteFile(root / (d + "/idVendor"), "0403\n");
    WriteFile(root / (d + "/idProduct"), "6001\n");
    WriteFile(root / (d + "/serial"), "A50285BI\n");
    WriteFile(root / (d + "/busnum"), "1\n");
    WriteFile(root / (d + "/devnum"), std::to_string(devnum) + "\n");
    WriteFile(root / (d + "/uevent"), "MAJOR=189\nMINOR=3\nDEVNAME=bus/usb/001/00" +
                                          std::to_string(devnum) + "\nDEVTYPE=usb_device\n");
    WriteFile(root / (d + "/1-2:1.0/bInterfaceClass"), "ff\n");
    WriteFile(root / (d + "/1-2:1.0/ttyUSB0/tty/ttyUSB0/uevent"),
              "MAJOR=188\nMINOR=0\nDEVNAME=ttyUSB0\n");
    std::filesystem::create_directories(root / "sys/bus/usb/devices");
    Symlink("../../../devices/pci0000:00/0000:00:14.0/usb1/1-2", root / "sys/bus/usb/devices/1-2");
    Symlink("../../../devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0",
            root / "sys/bus/usb/devices/1-2:1.0");
    // The root hub: another vendor.
    WriteFile(root / "sys/devices/pci0000:00/0000:00:14.0/usb1/idVendor", "1d6b\n");
    WriteFile(root / "sys/devices/pci0000:00/0000:00:14.0/usb1/idProduct", "0002\n");
    Symlink("../../../devices/pci0000:00/0000:00:14.0/usb1", root / "sys/bus/usb/devices/usb1");
    EXPECT_TRUE(MakeCharDevice(root / ("dev/bus/usb/001/00" + std::to_string(devnum)), 189, 3));
    EXPECT_TRUE(MakeCharDevice(root / "dev/ttyUSB0", 188, 0));
  }
  void Unplug() {
    std::filesystem::remove_all(root / "sys/bus/usb/devices/1-2");
    std::filesystem::remove_all(root / "sys/bus/usb/devices/1-2:1.0");
    std::filesystem::remove_all(root / kDev);
    std::filesystem::remove_all(root / "dev/bus/usb/001");
    std::filesystem::remove_all(root / "dev/ttyUSB0");
  }
  const TempDir& root;
};

TEST_F(GenericTest, UsbByVendorProductAppearsAndLeavesWithThePlug) {
  auto inst = Generic(root_.path(), R"(usb = [{ vendor = "0x0403", product = "6001" }]
usb_env = true
)");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_TRUE((*inst)->devices()->empty());

  UsbFixture usb(root_);
  Rescan(**inst);
  DeviceListPtr list = (*inst)->devices();
  ASSERT_EQ(Ids(*list), (std::vector<std::string>{"usb-0403:6001-001.004"}));
  EXPECT_TRUE(list->front().healthy);
  EXPECT_EQ(list->front().numa_node, 0);  // the controller's
  auto r = harness::Allocate(**inst, {"usb-0403:6001-001.004"});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->device_nodes.size(), 1u);  // usb_nodes = "bus"
  EXPECT_EQ(r->device_nodes[0].host_path, "/dev/bus/usb/001/004");
  // KubeVirt's variable and format: decimal bus:devnum.
  EXPECT_EQ(r->envs, (std::vector<std::pair<std::string, std::string>>{
                         {"USB_RESOURCE_DEVICES_KUBEVIRT_IO_TUN", "1:4"}}));

  // The bus node missing: listed, Unhealthy.
  std::remove((root_ / "dev/bus/usb/001/004").c_str());
  Rescan(**inst);
  EXPECT_EQ((*inst)->devices()->front().health_reason, "/dev/bus/usb/001/004 missing");

  usb.Unplug();
  Rescan(**inst);
  EXPECT_TRUE((*inst)->devices()->empty());
}

TEST_F(GenericTest, UsbBySerialWithAllNodes) {
  UsbFixture usb(root_);
  auto inst =
      Generic(root_.path(), R"(usb = [{ vendor = "0403", product = "6001", serial = "A50285BI" }]
usb_nodes = "all"
)");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  ASSERT_EQ(Ids(*(*inst)->devices()), (std::vector<std::string>{"usb-0403:6001-A50285BI"}));
  auto r = harness::Allocate(**inst, {"usb-0403:6001-A50285BI"});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->device_nodes.size(), 2u);
  EXPECT_EQ(r->device_nodes[0].host_path, "/dev/bus/usb/001/004");
  EXPECT_EQ(r->device_nodes[1].host_path, "/dev/ttyUSB0");

  auto other =
      Generic(root_.path(), "usb = [{ vendor = \"0403\", product = \"6001\", serial = \"X\" }]\n");
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE((*other)->devices()->empty());
}

TEST_F(GenericTest, BadKeysNameFileLineAndKey) {
  struct Case {
    const char* body;
    const char* error;
  } cases[] = {
      {"shares = 2\n", "module.toml:1: resource[0].paths: missing (give paths, usb, or both)"},
      {"paths = []\n", "module.toml:4: resource[0].paths: is empty"},
      {"paths = [\"dev/tun\"]\n",
       "module.toml:4: resource[0].paths[0]: \"dev/tun\" must be an absolute path"},
      {"paths = [\n  \"/dev/a\",\n  { path = \"/dev/b\", type = \"socket\" },\n]\n",
       "module.toml:6: resource[0].paths[1].type: must be \"device\" or \"mount\""},
      {"paths = [\n  { path = \"/dev/b\", mode = 1 },\n]\n",
       "module.toml:5: resource[0].paths[0].mode: unknown key"},
      {"paths = [{ container_path = \"/x\" }]\n",
       "module.toml:4: resource[0].paths[0]: has no path"},
      {"paths = [3]\n", "module.toml:4: resource[0].paths[0]: must be a path (string) or a table"},
      {"paths = [\"/dev/a\"]\npermissions = \"rwx\"\n",
       "module.toml:5: resource[0].permissions: must be made of r, w and m"},
      {"paths = [\"/dev/a\"]\nshares = 0\n", "module.toml:5: resource[0].shares: must be between"},
      {"usb = [{ vendor = \"04031\", product = \"6001\" }]\n",
       "module.toml:4: resource[0].usb[0].vendor: \"04031\" is not a 16-bit ID in hex"},
      {"usb = [{ vendor = \"0403\" }]\n", "module.toml:4: resource[0].usb[0].product: missing"},
      {"paths = [\"/dev/a\"]\nenvs = { A = 1 }\n",
       "module.toml:5: resource[0].envs.A: must be a string"},
      {"paths = [\"/dev/a\"]\nenvs = [\"A=1\"]\n",
       "module.toml:5: resource[0].envs: must be a table"},
      {"paths = \"/dev/a\"\n", "module.toml:4: resource[0].paths: must be an array"},
      {"paths = [\"/dev/a\"]\npreferred = \"random\"\n",
       "module.toml:5: resource[0].preferred: must be \"spread\" or \"pack\""},
      {"paths = [\"/dev/a\"]\nusb_nodes = \"some\"\n",
       "module.toml:5: resource[0].usb_nodes: must be \"bus\" or \"all\""},
  };
  for (const Case& c : cases) {
    auto inst = Generic(root_.path(), c.body);
    ASSERT_FALSE(inst.ok()) << c.body;
    EXPECT_NE(inst.status().message().find(c.error), std::string::npos) << c.body << "\n"
                                                                        << inst.status().message();
  }
}

// This machine's own tun node, with host_root "/" (nearly every Linux has it).
TEST(GenericRealTest, RealDevNetTun) {
  struct stat st;
  if (stat("/dev/net/tun", &st) != 0 || !S_ISCHR(st.st_mode))
    GTEST_SKIP() << "this machine has no /dev/net/tun";
  auto inst = Generic("/", "paths = [\"/dev/net/tun\"]\nshares = 4\npreopen = true\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  DeviceListPtr list = (*inst)->devices();
  ASSERT_EQ(Ids(*list, true),
            (std::vector<std::string>{"net_tun::0", "net_tun::1", "net_tun::2", "net_tun::3"}));
  EXPECT_EQ(list->front().numa_node, -1);
}

}  // namespace
}  // namespace devplug::modules
