// The nvidia module through the real ABI, with a fake libnvidia-ml loaded
// through the module's own dlopen() path, and procfs, sysfs and devfs
// fixtures under a temporary host_root.
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "gpu_fixture.h"
#include "module_harness.h"
#include "test_util.h"

namespace devplug::modules {
namespace {

using namespace std::chrono_literals;
using devplug::testing::FakeGpu;
using devplug::testing::GpuFixture;
using devplug::testing::TempDir;
using harness::Find;
using harness::Ids;
using Strings = std::vector<std::string>;

constexpr char kName[] = "nvidia.com/gpu";
const std::string kA = "GPU-0a0a0a0a-0000-4000-8000-000000000000";
const std::string kB = "GPU-0b0b0b0b-0000-4000-8000-000000000001";
const std::string kC = "GPU-0c0c0c0c-0000-4000-8000-000000000002";
const std::string kD = "GPU-0d0d0d0d-0000-4000-8000-000000000003";

std::string FakeNvml(const char* variant = "fake_nvml") {
  return devplug::testing::FakeModuleDir() + "/" + variant + ".so";
}

Strings Nodes(const Recipe& r) {
  Strings out;
  for (const auto& n : r.device_nodes) out.push_back(n.host_path);
  return out;
}

std::string Env(const Recipe& r, const std::string& key) {
  for (const auto& [k, v] : r.envs)
    if (k == key) return v;
  return "<unset>";
}

class NvidiaModuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!devplug::testing::IsRoot()) GTEST_SKIP() << "GPU fixtures need mknod (root)";
    gpus_ = {{kA, "0000:3b:00.0", 0, 0}, {kB, "0000:5e:00.0", 1, 0},
             {kC, "0000:af:00.0", 2, 1}, {kD, "0000:d8:00.0", 3, 1}};
  }

  bool Build(const Strings& extra = {}) { return fx_.Build(gpus_, extra); }

  StatusOr<std::unique_ptr<ModuleInstance>> Open(const std::string& body,
                                                 const std::string& lib = FakeNvml()) {
    return harness::Open("nvidia", kName, root_.path(),
                         "nvml_library = \"" + lib + "\"\n" + body);
  }

  // Polls until the device's health is `healthy` (events arrive on the
  // module's own thread).
  bool WaitHealth(ModuleInstance& inst, const std::string& id, bool healthy) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      const DeviceListPtr list = inst.devices();  // keeps the list alive while read
      const Device* d = Find(*list, id);
      if (d && d->healthy == healthy) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  TempDir root_, nvml_;
  GpuFixture fx_{root_.path(), nvml_.path()};
  std::vector<FakeGpu> gpus_;
};

TEST_F(NvidiaModuleTest, NvmlDiscoveryIdsTopologyAndAllocate) {
  ASSERT_TRUE(Build());
  auto inst = Open("");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  DeviceListPtr list = (*inst)->devices();
  EXPECT_EQ(Ids(*list), (Strings{kA, kB, kC, kD}));
  EXPECT_EQ(Ids(*list, true).size(), 4u);
  EXPECT_EQ(Find(*list, kB)->numa_node, 0);
  EXPECT_EQ(Find(*list, kC)->numa_node, 1);

  auto r = harness::Allocate(**inst, {kC, kA});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Nodes(*r), (Strings{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                "/dev/nvidia2", "/dev/nvidia0"}));
  EXPECT_EQ(Env(*r, "NVIDIA_VISIBLE_DEVICES"), kC + "," + kA);
  EXPECT_TRUE(r->cdi_devices.empty());
}

TEST_F(NvidiaModuleTest, SharesAreReplicasAndAllocateDeduplicatesUuids) {
  ASSERT_TRUE(Build());
  auto inst = Open("shares = 3\ncdi = true\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_EQ((*inst)->devices()->size(), 12u);
  EXPECT_NE(Find(*(*inst)->devices(), kA + "::2"), nullptr);
  auto r = harness::Allocate(**inst, {kA + "::0", kA + "::2", kB + "::1"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Nodes(*r), (Strings{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                "/dev/nvidia0", "/dev/nvidia1"}));
  EXPECT_EQ(Env(*r, "NVIDIA_VISIBLE_DEVICES"), kA + "," + kB);
  EXPECT_EQ(r->cdi_devices, (Strings{"nvidia.com/gpu=" + kA, "nvidia.com/gpu=" + kB}));
  // Replicas of one GPU are packed together.
  Strings all = Ids(*(*inst)->devices());
  auto two = harness::Prefer(**inst, all, {}, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->at(0).substr(0, kA.size()), two->at(1).substr(0, kA.size()));
}

TEST_F(NvidiaModuleTest, CriticalXidMakesTheGpuUnhealthyUntilItReappears) {
  ASSERT_TRUE(Build());
  auto inst = Open("");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  fx_.Xid(1, 13);  // an application's fault: ignored by default
  fx_.Xid(1, 79);  // fallen off the bus
  ASSERT_TRUE(WaitHealth(**inst, kB, false));
  EXPECT_EQ(Find(*(*inst)->devices(), kB)->health_reason, "XID 79");
  EXPECT_TRUE(Find(*(*inst)->devices(), kA)->healthy);
  EXPECT_EQ(harness::Allocate(**inst, {kB}).status().code(), StatusCode::kInvalidArgument);

  // A resync does not clear it; a pci event for the GPU (reset, re-bind,
  // re-plug, or an operator's `echo change > .../uevent`) does.
  harness::Rescan(**inst);
  EXPECT_FALSE(Find(*(*inst)->devices(), kB)->healthy);
  udev::Event ev;
  ev.action = "change";
  ev.subsystem = "pci";
  ev.sysname = "0000:5e:00.0";
  ev.syspath = "/sys/devices/pci0000:5e/0000:5e:00.0";
  (*inst)->OnUdevEvents({ev});
  ASSERT_TRUE(WaitHealth(**inst, kB, true));
  // XID events keep working after NVML was re-initialised for it.
  fx_.Xid(3, 48);
  ASSERT_TRUE(WaitHealth(**inst, kD, false));
}

// Seen in review: any PCI add or bind on the host (SR-IOV VFs of a NIC on a
// GPU node) re-initialised NVML. Only NVIDIA's own functions count.
TEST_F(NvidiaModuleTest, OtherVendorsPciEventsAreNotTheModulesBusiness) {
  ASSERT_TRUE(Build());
  auto inst = Open("");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  auto event = [&](const std::string& action, const std::string& address) {
    udev::Event ev;
    ev.action = action;
    ev.subsystem = "pci";
    ev.sysname = address;
    ev.syspath = fx_.sysfs().DevicePath(address).substr(root_.path().size());
    (*inst)->OnUdevEvents({ev});
  };
  fx_.sysfs().AddPci({.address = "0000:3b:02.0", .vendor = 0x8086, .device = 0x1889,
                      .driver = "iavf", .numa_node = 0});
  uint64_t scans = (*inst)->scans();
  event("add", "0000:3b:02.0");
  event("bind", "0000:3b:02.0");
  event("unbind", "0000:3b:02.0");
  harness::Rescan(**inst);  // one scan of our own, queued after the events
  EXPECT_EQ((*inst)->scans(), scans + 1) << "an Intel VF made the module rescan";
  // A new NVIDIA function may be a new GPU: that one is looked at.
  fx_.sysfs().AddPci({.address = "0000:86:00.0", .vendor = 0x10de, .device = 0x20b0,
                      .driver = "nvidia", .numa_node = 1});
  scans = (*inst)->scans();
  event("add", "0000:86:00.0");
  harness::Rescan(**inst);
  EXPECT_EQ((*inst)->scans(), scans + 2);
}

TEST_F(NvidiaModuleTest, IgnoredXidsAreConfigurableAndNullDeviceHitsAll) {
  ASSERT_TRUE(Build());
  auto inst = Open("ignored_xids = [79]\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  fx_.Xid(0, 79);
  fx_.Xid(-1, 13);  // not ignored any more; no device: every GPU
  ASSERT_TRUE(WaitHealth(**inst, kD, false));
  EXPECT_TRUE(Ids(*(*inst)->devices(), true).empty());
}

TEST_F(NvidiaModuleTest, MissingNodeProcfsEntryOrLostGpuIsUnhealthy) {
  ASSERT_TRUE(Build({"lost 3"}));
  auto inst = Open("");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_EQ(Ids(*(*inst)->devices(), true), (Strings{kA, kB, kC}));  // D is lost
  std::filesystem::remove(root_ / "dev/nvidia0");
  std::filesystem::remove(root_ / "proc/driver/nvidia/gpus/0000:5e:00.0/information");
  harness::Rescan(**inst);
  EXPECT_EQ(Ids(*(*inst)->devices(), true), Strings{kC});
  ASSERT_TRUE(devplug::testing::MakeCharDevice(root_ / "dev/nvidia0", 195, 0));
  fx_.WriteInformation(gpus_[1]);
  harness::Rescan(**inst);
  EXPECT_EQ(Ids(*(*inst)->devices(), true), (Strings{kA, kB, kC}));  // recovered
  // Without the optional control nodes, only the GPU node is passed.
  std::filesystem::remove(root_ / "dev/nvidia-uvm-tools");
  harness::Rescan(**inst);
  EXPECT_EQ(Nodes(*harness::Allocate(**inst, {kA})),
            (Strings{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"}));
}

TEST_F(NvidiaModuleTest, ProcfsDiscoveryAndFallback) {
  ASSERT_TRUE(Build());
  // No NVML at all: auto falls back to procfs.
  auto missing = Open("", "/nonexistent/libnvidia-ml.so.1");
  ASSERT_TRUE(missing.ok()) << missing.status().message();
  EXPECT_EQ(Ids(*(*missing)->devices(), true), (Strings{kA, kB, kC, kD}));
  EXPECT_EQ(Find(*(*missing)->devices(), kD)->numa_node, 1);
  // A library without a required symbol: the same.
  auto nouuid = Open("", FakeNvml("fake_nvml_nouuid"));
  ASSERT_TRUE(nouuid.ok()) << nouuid.status().message();
  EXPECT_EQ((*nouuid)->devices()->size(), 4u);
  // Asked for explicitly: a clean failure naming the reason.
  auto strict = Open("discovery = \"nvml\"\n", FakeNvml("fake_nvml_nouuid"));
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("lacks nvmlDeviceGetUUID"), std::string::npos)
      << strict.status().message();
  // procfs on purpose: an entry that disappears leaves its GPU Unhealthy.
  auto procfs = Open("discovery = \"procfs\"\n");
  ASSERT_TRUE(procfs.ok());
  std::filesystem::remove_all(root_ / "proc/driver/nvidia/gpus/0000:af:00.0");
  harness::Rescan(**procfs);
  EXPECT_EQ(Ids(*(*procfs)->devices()).size(), 4u);
  EXPECT_FALSE(Find(*(*procfs)->devices(), kC)->healthy);
  // NVML whose init fails: procfs too.
  fx_.WriteInformation(gpus_[2]);
  fx_.Script(gpus_, {"initfail 9"});
  auto initfail = Open("");
  ASSERT_TRUE(initfail.ok());
  EXPECT_EQ((*initfail)->devices()->size(), 4u);
}

TEST_F(NvidiaModuleTest, WithoutTheEventApiGpusAreStillServed) {
  ASSERT_TRUE(Build());
  auto inst = Open("", FakeNvml("fake_nvml_noevents"));
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_EQ(Ids(*(*inst)->devices(), true).size(), 4u);
}

// Eight GPUs in two NVLink islands of four (every pair inside an island
// joined by two links, one link between the islands' first GPUs), split
// over NUMA nodes against the islands.
std::vector<FakeGpu> EightGpus() {
  std::vector<FakeGpu> g;
  for (int i = 0; i < 8; i++) {
    char uuid[64], pci[16];
    std::snprintf(uuid, sizeof(uuid), "GPU-%08d-0000-4000-8000-00000000000%d", i, i);
    std::snprintf(pci, sizeof(pci), "0000:%02x:00.0", 0x10 + i * 0x10);
    g.push_back({uuid, pci, static_cast<unsigned>(i), i % 2, "NVIDIA H100 80GB HBM3"});
  }
  return g;
}

Strings Islands() {
  Strings lines;
  for (int base : {0, 4})
    for (int i = base; i < base + 4; i++)
      for (int j = i + 1; j < base + 4; j++)
        lines.push_back("nvlink " + std::to_string(i) + " " + std::to_string(j) + " 2");
  lines.push_back("nvlink 0 4 1");
  return lines;
}

TEST_F(NvidiaModuleTest, PreferredAllocationFollowsNvLink) {
  gpus_ = EightGpus();
  ASSERT_TRUE(Build(Islands()));
  auto inst = Open("");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  const Strings all = Ids(*(*inst)->devices());
  ASSERT_EQ(all.size(), 8u);
  auto uuid = [&](int i) { return gpus_[static_cast<size_t>(i)].uuid; };
  auto sorted = [](Strings s) {
    std::sort(s.begin(), s.end());
    return s;
  };
  auto four = harness::Prefer(**inst, all, {}, 4);
  ASSERT_TRUE(four.ok()) << four.status().message();
  EXPECT_EQ(sorted(*four), sorted({uuid(0), uuid(1), uuid(2), uuid(3)}));
  auto with = harness::Prefer(**inst, all, {uuid(6)}, 4);
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(with->front(), uuid(6));
  EXPECT_EQ(sorted(*with), sorted({uuid(4), uuid(5), uuid(6), uuid(7)}));
  // Only some available: the best pair among them.
  auto pair = harness::Prefer(**inst, {uuid(0), uuid(2), uuid(5), uuid(7)}, {uuid(5)}, 2);
  ASSERT_TRUE(pair.ok());
  EXPECT_EQ(*pair, (Strings{uuid(5), uuid(7)}));
}

TEST_F(NvidiaModuleTest, BadKeysNameFileLineAndKey) {
  ASSERT_TRUE(Build());
  struct Case {
    std::string body;
    std::string error;
  } cases[] = {
      {"discovery = \"magic\"\n", "module.toml:5: resource[0].discovery: must be \"auto\", \"nvml\" or \"procfs\""},
      {"shares = 0\n", "module.toml:5: resource[0].shares: must be between 1 and 1000"},
      {"ignored_xids = [\"13\"]\n", "module.toml:5: resource[0].ignored_xids: must be an array of integers"},
      {"ignored_xids = [13, 0]\n", "module.toml:5: resource[0].ignored_xids: 0 is not an XID"},
      {"cdi = 1\n", "module.toml:5: resource[0].cdi: must be a boolean"},
  };
  for (const Case& c : cases) {
    auto inst = Open(c.body);
    ASSERT_FALSE(inst.ok()) << c.body;
    EXPECT_NE(inst.status().message().find(c.error), std::string::npos)
        << c.body << "\n" << inst.status().message();
  }
}

TEST(NvidiaModuleRealTest, NoDriverMeansNoGpus) {
  if (std::filesystem::exists("/proc/driver/nvidia")) GTEST_SKIP() << "this machine has the driver";
  auto inst = harness::Open("nvidia", kName, "/", "");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_TRUE((*inst)->devices()->empty());
}

}  // namespace
}  // namespace devplug::modules
