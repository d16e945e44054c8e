// The module toolkit (modules/common): sysfs reads, PCI enumeration on
// fixture trees and on this machine's real /sys/bus/pci, selectors, env
// names and locality packing.
#include <libudev.h>

#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "devplug/common/env.h"
#include "devplug/common/fs.h"
#include "devplug/common/netlink.h"
#include "devplug/common/pci.h"
#include "devplug/common/preferred.h"
#include "devplug/common/run.h"
#include "sysfs_fixture.h"
#include "test_util.h"

namespace devplug::common {
namespace {

using devplug::testing::PciSpec;
using devplug::testing::SysfsFixture;
using devplug::testing::TempDir;
using devplug::testing::WriteFile;
using Strings = std::vector<std::string>;

TEST(CommonFsTest, BasenameAndDirname) {
  using devplug::common::Basename;
  using devplug::common::Dirname;
  EXPECT_EQ(Basename("/dev/net/tun"), "tun");
  EXPECT_EQ(Dirname("/dev/net/tun"), "/dev/net");
  EXPECT_EQ(Dirname("/dev"), "/");
  EXPECT_EQ(Dirname("/"), "/");
}

TEST(CommonFsTest, ConfiguredPathsAreAbsoluteWithoutDotDot) {
  using devplug::common::IsAbsolutePath;
  for (const char* ok : {"/dev/net/tun", "/home/kubernetes/bin/nvidia", "/a", "/a/..b", "/a/b/"})
    EXPECT_TRUE(IsAbsolutePath(ok)) << ok;
  for (const char* bad : {"", "/", "dev/net/tun", "./x", "/a/../etc", "/a/..", "~/x"})
    EXPECT_FALSE(IsAbsolutePath(bad)) << bad;
  EXPECT_FALSE(IsAbsolutePath(std::string_view("/a\0b", 4)));
}

TEST(CommonIdsTest, PciIdsInAnyCaseWithOrWithoutPrefix) {
  EXPECT_EQ(ParsePciId("8086"), 0x8086);
  EXPECT_EQ(ParsePciId("0x8086"), 0x8086);
  EXPECT_EQ(ParsePciId("0X15B3"), 0x15b3);
  EXPECT_EQ(ParsePciId("15b3"), 0x15b3);
  EXPECT_EQ(ParsePciId("1"), 0x1);
  EXPECT_EQ(ParsePciId(""), std::nullopt);
  EXPECT_EQ(ParsePciId("0x"), std::nullopt);
  EXPECT_EQ(ParsePciId("10086"), std::nullopt);  // more than 16 bits
  EXPECT_EQ(ParsePciId("80 86"), std::nullopt);
  EXPECT_EQ(ParsePciId("-1"), std::nullopt);
  EXPECT_EQ(ParsePciId("xyz"), std::nullopt);
  EXPECT_EQ(PciIdString(0x15b3), "15b3");
}

TEST(CommonIdsTest, PciAddresses) {
  EXPECT_EQ(NormalizePciAddress("0000:3b:02.1"), "0000:3b:02.1");
  EXPECT_EQ(NormalizePciAddress("3b:02.1"), "0000:3b:02.1");
  EXPECT_EQ(NormalizePciAddress("0000:AF:1F.7"), "0000:af:1f.7");
  // Domains above ffff (Intel VMD): as many digits as the kernel prints.
  EXPECT_EQ(NormalizePciAddress("10000:3b:02.1"), "10000:3b:02.1");
  EXPECT_EQ(NormalizePciAddress("00010000:3B:02.1"), "10000:3b:02.1");
  EXPECT_EQ(NormalizePciAddress("ffffffff:00:00.0"), "ffffffff:00:00.0");
  EXPECT_EQ(NormalizePciAddress("100000000:00:00.0"), std::nullopt);
  EXPECT_TRUE(IsPciAddress("10000:e1:00.0"));
  EXPECT_FALSE(IsPciAddress("010000:e1:00.0"));                  // the kernel prints no such zero
  EXPECT_EQ(NormalizePciAddress("0000:3b:20.0"), std::nullopt);  // slot > 0x1f
  EXPECT_EQ(NormalizePciAddress("0000:3b:02.8"), std::nullopt);  // function > 7
  EXPECT_EQ(NormalizePciAddress("0000-3b:02.1"), std::nullopt);
  EXPECT_EQ(NormalizePciAddress("pci0000:00"), std::nullopt);
  EXPECT_EQ(NormalizePciAddress(""), std::nullopt);
}

TEST(CommonEnvTest, KubeVirtsRule) {
  EXPECT_EQ(EnvNameForResource("PCI_RESOURCE", "intel.com/qat_vf"),
            "PCI_RESOURCE_INTEL_COM_QAT_VF");
  EXPECT_EQ(EnvNameForResource("PCI_RESOURCE", "nvidia.com/GA102GL_A10"),
            "PCI_RESOURCE_NVIDIA_COM_GA102GL_A10");
  // Only '.' and '/' change: the consumer computes the same name.
  EXPECT_EQ(EnvNameForResource("PCI_RESOURCE", "openshift.io/sriov-nic"),
            "PCI_RESOURCE_OPENSHIFT_IO_SRIOV-NIC");
  // The strict rule leaves only shell-safe characters.
  EXPECT_EQ(EnvNameStrict("FPGA_RESOURCE", "fpga.example.com/nlb-3"),
            "FPGA_RESOURCE_FPGA_EXAMPLE_COM_NLB_3");
}

TEST(CommonNetlinkTest, MacAddressesBothWays) {
  const std::string raw = devplug::common::ParseMacAddress("52:54:00:AB:cd:0f");
  ASSERT_EQ(raw.size(), 6u);
  EXPECT_EQ(static_cast<unsigned char>(raw[3]), 0xab);
  EXPECT_EQ(devplug::common::FormatHwAddress(raw), "52:54:00:ab:cd:0f");
  for (const char* bad : {"", "52:54:00:ab:cd", "52:54:00:ab:cd:0g", "52-54-00-ab-cd-0f",
                          "52:54:00:ab:cd:0f:", "eth0", "0000:3b:00.0"})
    EXPECT_TRUE(devplug::common::ParseMacAddress(bad).empty()) << bad;
  EXPECT_EQ(devplug::common::FormatHwAddress(std::string("\x01\x02", 2)), "01:02");
}

TEST(CommonFsTest, HostRootJoinsAndStrips) {
  HostRoot real("/");
  EXPECT_EQ(real.Path("/sys/bus/pci"), "/sys/bus/pci");
  EXPECT_EQ(real.Strip("/sys/bus/pci"), "/sys/bus/pci");
  HostRoot host("/host/");
  EXPECT_EQ(host.Path("/dev/vfio/vfio"), "/host/dev/vfio/vfio");
  EXPECT_EQ(host.Strip("/host/dev/vfio/12"), "/dev/vfio/12");
  EXPECT_EQ(host.Strip("/hostile/dev"), "/hostile/dev");  // not under the root
}

TEST(CommonFsTest, OneNumaRuleForEveryModule) {
  TempDir t;
  const HostRoot root(t.path());
  const std::string pci = "/sys/devices/pci0000:00/0000:00:02.0";
  WriteFile(t / (pci + "/numa_node"), "1\n");
  // A tty below the PCI function names no node of its own.
  const std::string tty = pci + "/tty/ttyS9";
  WriteFile(t / (tty + "/dev"), "4:73\n");
  EXPECT_EQ(NumaNodeOf(root.Path(pci)), 1);
  EXPECT_EQ(NumaNodeOf(root.Path(tty)), -1);
  EXPECT_EQ(NearestNumaNode(root, tty), 1);
  EXPECT_EQ(NearestNumaNode(root, pci), 1);
  // "-1", absent, garbage and nodes past MAX_NUMNODES are all unknown.
  for (const char* v : {"-1", "zebra", "1024", "70000"}) {
    WriteFile(t / (pci + "/numa_node"), v);
    EXPECT_EQ(NumaNodeOf(root.Path(pci)), -1) << v;
    EXPECT_EQ(NearestNumaNode(root, tty), -1) << v;
  }
  WriteFile(t / (pci + "/numa_node"), "1023");
  EXPECT_EQ(NearestNumaNode(root, tty), 1023);
  // Only /sys/devices is walked: a path elsewhere names no node.
  WriteFile(t / "/sys/class/numa_node", "0");
  EXPECT_EQ(NearestNumaNode(root, "/sys/class/tty"), -1);
}

TEST(CommonFsTest, AttributesAreTrimmedAndErrorsAreValues) {
  TempDir t;
  WriteFile(t / "vendor", "0x8086\n");
  WriteFile(t / "numa_node", "-1\n");
  WriteFile(t / "bad", "zebra\n");
  WriteFile(t / "empty", "");
  EXPECT_EQ(*ReadAttr(t / "vendor"), "0x8086");
  EXPECT_EQ(*ReadHexAttr(t / "vendor"), 0x8086u);
  EXPECT_EQ(*ReadIntAttr(t / "numa_node"), -1);
  EXPECT_EQ(*ReadAttr(t / "empty"), "");

  auto missing = ReadAttr(t / "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ENOENT);
  EXPECT_EQ(missing.error().path, t / "nope");
  EXPECT_NE(missing.error().ToString().find("No such file"), std::string::npos);

  auto bad = ReadHexAttr(t / "bad");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, EINVAL);
  EXPECT_EQ(bad.error().ToString(), t / "bad" + ": Invalid argument: not a hex number: \"zebra\"");
  EXPECT_FALSE(ReadIntAttr(t / "vendor").ok());

  auto dir = Dir::Open(t.path());
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(*dir->ReadHex("vendor"), 0x8086u);
  EXPECT_EQ(dir->ReadInt("nope").error().path, t / "nope");
  std::filesystem::create_symlink("../../bus/pci/drivers/vfio-pci", t / "driver");
  EXPECT_EQ(*dir->LinkName("driver"), "vfio-pci");
  EXPECT_EQ(*LinkName(t / "driver"), "vfio-pci");
  EXPECT_EQ(*dir->List(), (Strings{"bad", "driver", "empty", "numa_node", "vendor"}));
  EXPECT_EQ(*dir->List("n"), (Strings{"numa_node"}));
  EXPECT_FALSE(ListDir(t / "nope").ok());
  EXPECT_FALSE(Dir::Open(t / "vendor").ok());  // not a directory
}

// Two NUMA nodes, two vendors, SR-IOV with more than ten VFs (virtfn10
// sorts after virtfn9 by index, not by name), a network function, an
// unbound function and one without IOMMU group or NUMA node.
void BuildMixedTree(SysfsFixture& fx) {
  PciSpec pf{.address = "0000:3b:00.0",
             .vendor = 0x8086,
             .device = 0x1592,
             .driver = "ice",
             .numa_node = 0,
             .iommu_group = 40,
             .parent = "0000:3a:00.0",
             .net = {"ens1f0"}};
  std::vector<PciSpec> vfs;
  for (int k = 0; k < 12; k++) {
    char addr[16];
    std::snprintf(addr, sizeof(addr), "0000:3b:%02x.%d", 1 + k / 8, k % 8);
    vfs.push_back(PciSpec{.address = addr,
                          .vendor = 0x8086,
                          .device = 0x1889,
                          .driver = k < 10 ? "vfio-pci" : "iavf",
                          .numa_node = 0,
                          .iommu_group = 100 + k});
  }
  fx.AddSriov(pf, vfs);
  fx.AddPci({.address = "0000:af:00.0",
             .vendor = 0x15b3,
             .device = 0x1017,
             .driver = "mlx5_core",
             .numa_node = 1,
             .iommu_group = 200,
             .net = {"ens8f0"}});
  fx.AddPci({.address = "0000:af:00.1",
             .vendor = 0x15b3,
             .device = 0x1017,
             .numa_node = 1,
             .iommu_group = 200});  // unbound
  fx.AddPci({.address = "0000:00:1f.0",
             .vendor = 0x8086,
             .device = 0xa1c1,
             .class_code = 0x060100});  // no group, numa -1
  // An NVMe drive behind Intel VMD: PCI domain 10000, a 13-character address.
  fx.AddPci({.address = "10000:e1:00.0",
             .vendor = 0x8086,
             .device = 0x0a54,
             .class_code = 0x010802,
             .driver = "nvme",
             .numa_node = 0,
             .iommu_group = 30,
             .parent = "10000:e0:06.0"});
}

TEST(CommonPciTest, EnumeratesAFixtureTreeLikeSysfs) {
  TempDir t;
  SysfsFixture fx(t.path());
  BuildMixedTree(fx);
  auto scan = EnumeratePci(HostRoot(t.path()));
  ASSERT_TRUE(scan.ok()) << scan.error().ToString();
  EXPECT_TRUE(scan->problems.empty());
  ASSERT_EQ(scan->functions.size(), 17u);
  std::map<std::string, PciFunction> by;
  for (const auto& f : scan->functions) by[f.address] = f;

  const PciFunction& pf = by.at("0000:3b:00.0");
  EXPECT_EQ(pf.vendor, 0x8086);
  EXPECT_EQ(pf.device, 0x1592);
  EXPECT_EQ(pf.class_code, 0x020000u);
  EXPECT_EQ(pf.driver, "ice");
  EXPECT_EQ(pf.iommu_group, 40);
  EXPECT_EQ(pf.numa_node, 0);
  EXPECT_FALSE(pf.is_virtual_function());
  ASSERT_EQ(pf.virtfns.size(), 12u);
  EXPECT_EQ(pf.virtfns[9], "0000:3b:02.1");
  EXPECT_EQ(pf.virtfns[10], "0000:3b:02.2");
  EXPECT_EQ(pf.net_interfaces, Strings{"ens1f0"});

  const PciFunction& vf = by.at("0000:3b:01.3");
  EXPECT_EQ(vf.physfn, "0000:3b:00.0");
  EXPECT_TRUE(vf.is_virtual_function());
  EXPECT_EQ(vf.driver, "vfio-pci");
  EXPECT_EQ(vf.iommu_group, 103);
  EXPECT_TRUE(vf.virtfns.empty());

  EXPECT_EQ(by.at("0000:af:00.1").driver, "");
  EXPECT_EQ(by.at("0000:af:00.1").numa_node, 1);
  EXPECT_EQ(by.at("0000:00:1f.0").iommu_group, -1);
  EXPECT_EQ(by.at("0000:00:1f.0").numa_node, -1);
  EXPECT_EQ(by.at("0000:00:1f.0").class_code, 0x060100u);

  // Seen in review: domains above ffff were skipped.
  const PciFunction& vmd = by.at("10000:e1:00.0");
  EXPECT_EQ(vmd.driver, "nvme");
  EXPECT_EQ(vmd.iommu_group, 30);

  auto one = ReadPciFunction(HostRoot(t.path()), "0000:af:00.0");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->net_interfaces, Strings{"ens8f0"});
  EXPECT_EQ(ReadPciFunction(HostRoot(t.path()), "0000:01:00.0").error().code, ENOENT);
}

TEST(CommonPciTest, SelectorsNarrowTheScan) {
  TempDir t;
  SysfsFixture fx(t.path());
  BuildMixedTree(fx);
  HostRoot root(t.path());
  auto addresses = [&](const PciSelector& s) {
    Strings out;
    auto scan = EnumeratePci(root, &s);
    EXPECT_TRUE(scan.ok());
    for (const auto& f : scan->functions) out.push_back(f.address);
    return out;
  };
  EXPECT_EQ(addresses({.vendors = {0x15b3}}), (Strings{"0000:af:00.0", "0000:af:00.1"}));
  EXPECT_EQ(addresses({.vendors = {0x15b3}, .drivers = {"mlx5_core"}}), Strings{"0000:af:00.0"});
  EXPECT_EQ(addresses({.vendors = {0x8086}, .devices = {0x1889}, .drivers = {"iavf"}}),
            (Strings{"0000:3b:02.2", "0000:3b:02.3"}));
  EXPECT_EQ(addresses({.vendors = {0x8086}, .devices = {0x1889}, .drivers = {"vfio-pci"}}).size(),
            10u);
  EXPECT_EQ(addresses({.addresses = {"0000:3b:01.0", "0000:af:00.1", "0000:01:00.0"}}),
            (Strings{"0000:3b:01.0", "0000:af:00.1"}));
  EXPECT_TRUE(addresses({.vendors = {0x10de}}).empty());
  // "" as a driver means "not bound".
  EXPECT_EQ(addresses({.vendors = {0x15b3}, .drivers = {""}}), Strings{"0000:af:00.1"});
}

TEST(CommonPciTest, NoPciBusIsAnEmptyScanAndBrokenEntriesAreProblems) {
  TempDir t;
  auto empty = EnumeratePci(HostRoot(t.path()));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->functions.empty());

  SysfsFixture fx(t.path());
  fx.AddPci({.address = "0000:01:00.0"});
  fx.AddPci({.address = "0000:02:00.0"});
  std::filesystem::remove(fx.DevicePath("0000:02:00.0") + "/vendor");  // half-removed
  // A dangling link, as a function that left between readdir and open.
  std::filesystem::create_symlink("../../../devices/pci0000:03/0000:03:00.0",
                                  t / "sys/bus/pci/devices/0000:03:00.0");
  auto scan = EnumeratePci(HostRoot(t.path()));
  ASSERT_TRUE(scan.ok());
  ASSERT_EQ(scan->functions.size(), 1u);
  EXPECT_EQ(scan->functions[0].address, "0000:01:00.0");
  ASSERT_EQ(scan->problems.size(), 2u);
  EXPECT_EQ(scan->problems[0].path, t / "sys/bus/pci/devices/0000:02:00.0/vendor");
  EXPECT_EQ(scan->problems[1].code, ENOENT);
}

TEST(CommonPciTest, DriverBindingsReadOnlyNewBindings) {
  TempDir t;
  SysfsFixture fx(t.path());
  BuildMixedTree(fx);
  DriverBindings b(HostRoot(t.path()), "vfio-pci", kPciIommuGroup | kPciNuma);
  auto addresses = [](const PciScan& s) {
    Strings out;
    for (const auto& f : s.functions) out.push_back(f.address);
    return out;
  };
  auto first = b.Scan({.vendors = {0x8086}});
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  ASSERT_EQ(first->functions.size(), 10u);
  EXPECT_EQ(first->functions[3].address, "0000:3b:01.3");
  EXPECT_EQ(first->functions[3].iommu_group, 103);
  EXPECT_EQ(first->functions[3].driver, "vfio-pci");
  EXPECT_EQ(b.reads(), 10u);

  // Nothing changed: nothing is read again.
  auto again = b.Scan({.vendors = {0x8086}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(addresses(*again), addresses(*first));
  EXPECT_EQ(b.reads(), 10u);

  // An unbind drops one; a bind to vfio-pci adds one, read once.
  fx.Unbind("0000:3b:01.1");
  fx.Bind("0000:3b:02.2", "vfio-pci");
  auto changed = b.Scan({.vendors = {0x8086}});
  ASSERT_TRUE(changed.ok());
  ASSERT_EQ(changed->functions.size(), 10u);
  EXPECT_EQ(changed->functions[1].address, "0000:3b:01.2");
  EXPECT_EQ(changed->functions.back().address, "0000:3b:02.2");
  EXPECT_EQ(b.reads(), 11u);

  // Forget() forces a re-read: a changed attribute shows.
  fx.SetAttr("0000:3b:01.0", "numa_node", "1");
  b.Forget("0000:3b:01.0");
  auto forgot = b.Scan({.vendors = {0x8086}});
  EXPECT_EQ(forgot->functions[0].numa_node, 1);
  EXPECT_EQ(b.reads(), 12u);

  // Selectors: addresses narrow the listing, IDs filter cached entries.
  EXPECT_EQ(addresses(*b.Scan({.addresses = {"0000:3b:01.2"}})), Strings{"0000:3b:01.2"});
  EXPECT_TRUE(b.Scan({.vendors = {0x15b3}})->functions.empty());
  // A driver that is not loaded has no folder: an empty scan.
  DriverBindings none(HostRoot(t.path()), "no-such-driver");
  auto empty = none.Scan({});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->functions.empty());
}

TEST(CommonFsTest, ListCharDevices) {
  TempDir t;
  WriteFile(t / "dev/vfio/not-a-node", "");
  if (devplug::testing::IsRoot()) {
    ASSERT_TRUE(devplug::testing::MakeCharDevice(t / "dev/vfio/vfio", 10, 196));
    ASSERT_TRUE(devplug::testing::MakeCharDevice(t / "dev/vfio/12", 243, 12));
  }
  auto names = ListCharDevices(t / "dev/vfio");
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, devplug::testing::IsRoot() ? (Strings{"12", "vfio"}) : Strings{});
  EXPECT_TRUE(ListCharDevices(t / "dev/none")->empty());
}

// This machine's real PCI functions, compared with what libudev reports for
// the same devices (an independent reader of the same sysfs).
TEST(CommonPciTest, EnumeratesThisMachinesRealPciBus) {
  if (!std::filesystem::exists("/sys/bus/pci/devices")) GTEST_SKIP() << "no PCI bus";
  auto scan = EnumeratePci(HostRoot("/"));
  ASSERT_TRUE(scan.ok()) << scan.error().ToString();
  EXPECT_TRUE(scan->problems.empty());

  udev* u = udev_new();
  ASSERT_NE(u, nullptr);
  udev_enumerate* e = udev_enumerate_new(u);
  udev_enumerate_add_match_subsystem(e, "pci");
  ASSERT_GE(udev_enumerate_scan_devices(e), 0);
  std::map<std::string, PciFunction> expected;
  udev_list_entry* entry;
  udev_list_entry_foreach(entry, udev_enumerate_get_list_entry(e)) {
    udev_device* d = udev_device_new_from_syspath(u, udev_list_entry_get_name(entry));
    if (!d) continue;
    PciFunction f;
    f.address = udev_device_get_sysname(d);
    auto attr = [&](const char* n) {
      const char* v = udev_device_get_sysattr_value(d, n);
      return std::string(v ? v : "");
    };
    f.vendor = static_cast<uint16_t>(std::stoul(attr("vendor"), nullptr, 16));
    f.device = static_cast<uint16_t>(std::stoul(attr("device"), nullptr, 16));
    f.class_code = static_cast<uint32_t>(std::stoul(attr("class"), nullptr, 16));
    f.driver = udev_device_get_driver(d) ? udev_device_get_driver(d) : "";
    const std::string numa = attr("numa_node");
    f.numa_node = numa.empty() ? -1 : std::max(-1, std::stoi(numa));
    std::error_code ec;
    auto group =
        std::filesystem::read_symlink(std::string(udev_device_get_syspath(d)) + "/iommu_group", ec);
    f.iommu_group = ec ? -1 : std::stoi(group.filename().string());
    expected[f.address] = f;
    udev_device_unref(d);
  }
  udev_enumerate_unref(e);
  udev_unref(u);

  ASSERT_EQ(scan->functions.size(), expected.size());
  ASSERT_FALSE(expected.empty());
  for (const PciFunction& f : scan->functions) {
    SCOPED_TRACE(f.address);
    ASSERT_TRUE(expected.count(f.address));
    const PciFunction& x = expected.at(f.address);
    EXPECT_EQ(f.vendor, x.vendor);
    EXPECT_EQ(f.device, x.device);
    EXPECT_EQ(f.class_code, x.class_code);
    EXPECT_EQ(f.driver, x.driver);
    EXPECT_EQ(f.numa_node, x.numa_node);
    EXPECT_EQ(f.iommu_group, x.iommu_group);
  }
}

// ---- PackByLocality ----

std::vector<Placement> Places(std::initializer_list<Placement> l) { return l; }

TEST(CommonPreferredTest, FillsOneNumaNodeFirst) {
  // Node 0: a0 a1; node 1: b0 b1 b2.
  auto av = Places({{"a0", 0, -1}, {"a1", 0, -1}, {"b0", 1, -1}, {"b1", 1, -1}, {"b2", 1, -1}});
  // Best fit: two fit on node 0 exactly, keeping node 1's three together.
  EXPECT_EQ(PackByLocality(av, {}, 2), (Strings{"a0", "a1"}));
  EXPECT_EQ(PackByLocality(av, {}, 3), (Strings{"b0", "b1", "b2"}));
  // must_include pulls the rest to its node.
  EXPECT_EQ(PackByLocality(av, {"b2"}, 2), (Strings{"b2", "b0"}));
  // Too big for one node: the biggest node first, then the next.
  EXPECT_EQ(PackByLocality(av, {}, 4), (Strings{"b0", "b1", "b2", "a0"}));
  EXPECT_EQ(PackByLocality(av, {}, 9).size(), 5u);
  EXPECT_EQ(PackByLocality(av, {}, 0), Strings{});
}

TEST(CommonPreferredTest, KeepsGroupsWhole) {
  // One node; group 7 has two members, the rest are alone.
  auto av = Places({{"x0", 0, 5}, {"x1", 0, 7}, {"x2", 0, 7}, {"x3", 0, 9}});
  EXPECT_EQ(PackByLocality(av, {}, 2), (Strings{"x1", "x2"}));
  // One device: do not split group 7.
  EXPECT_EQ(PackByLocality(av, {}, 1), Strings{"x0"});
  // must_include in group 7: its partner comes next.
  EXPECT_EQ(PackByLocality(av, {"x2"}, 2), (Strings{"x2", "x1"}));
  EXPECT_EQ(PackByLocality(av, {}, 3), (Strings{"x1", "x2", "x0"}));
}

TEST(CommonPreferredTest, NoNumaInformationAndUnknownIds) {
  auto av = Places({{"d2", -1, -1}, {"d0", -1, -1}, {"d1", -1, -1}});
  EXPECT_EQ(PackByLocality(av, {}, 2), (Strings{"d0", "d1"}));
  // must_include is kept whole even when larger than size, and IDs not in
  // available are passed through.
  EXPECT_EQ(PackByLocality(av, {"zz", "d2"}, 1), (Strings{"zz", "d2"}));
  // Real nodes win ties over "no node".
  auto mixed = Places({{"n", -1, -1}, {"r", 0, -1}});
  EXPECT_EQ(PackByLocality(mixed, {}, 1), Strings{"r"});
}

TEST(CommonPreferredTest, LargeRequestFillsOneNode) {
  std::vector<Placement> av;
  for (int i = 0; i < 4096; i++) {
    char id[16];
    std::snprintf(id, sizeof(id), "0000:%02x:%02x.%d", i / 256, (i / 8) % 32, i % 8);
    av.push_back({id, i % 2, i});
  }
  auto out = PackByLocality(av, {}, 2048);
  ASSERT_EQ(out.size(), 2048u);
  std::map<std::string, int> node;
  for (const auto& p : av) node[p.id] = p.numa_node;
  for (const auto& id : out) EXPECT_EQ(node[id], 0) << id;  // exactly one node's worth
}

// RunProgram: the helper programs modules run (attach and release commands,
// vendor tools): exit status, separate stderr, environment, time limit.
TEST(CommonRunTest, StatusOutputAndEnvironment) {
  using namespace std::chrono_literals;
  RunResult ok = RunProgram({"/bin/sh", "-c", "echo out; echo \"v=$V\" >&2"}, {"V=1"}, 10s);
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.errors, "v=1\n");
  EXPECT_NE(ok.output.find("out\n"), std::string::npos);
  EXPECT_NE(ok.output.find("v=1\n"), std::string::npos);

  // The failure names the last stderr line, even when stdout came later.
  RunResult bad = RunProgram(
      {"/bin/sh", "-c", "echo first >&2; echo 'no such pod' >&2; echo progress; exit 3"}, {}, 10s);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.exit_code, 3);
  EXPECT_EQ(bad.Describe("/x", 10s), "/x exited with status 3: no such pod");
  // Nothing on stderr: stdout's last line.
  RunResult quiet = RunProgram({"/bin/sh", "-c", "echo done; exit 1"}, {}, 10s);
  EXPECT_EQ(quiet.Describe("/x", 10s), "/x exited with status 1: done");

  RunResult missing = RunProgram({"/nonexistent/tool"}, {}, 10s);
  EXPECT_FALSE(missing.started);
  EXPECT_EQ(missing.Describe("/nonexistent/tool", 10s),
            "cannot run /nonexistent/tool: No such file or directory");
  EXPECT_FALSE(RunProgram({"relative"}, {}, 10s).started);
}

TEST(CommonRunTest, TheTimeLimitKillsTheWholeGroup) {
  using namespace std::chrono_literals;
  // A child that keeps the pipes open must not hold the caller past the limit.
  const auto start = std::chrono::steady_clock::now();
  RunResult r = RunProgram({"/bin/sh", "-c", "echo waiting >&2; sleep 30 & sleep 30"}, {}, 300ms);
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  EXPECT_EQ(r.Describe("/x", 300ms), "/x timed out after 300ms: waiting");
}

}  // namespace
}  // namespace devplug::common
