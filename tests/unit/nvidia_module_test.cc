// The nvidia module through the real ABI, with a fake libnvidia-ml loaded
// through the module's own dlopen() path, and procfs, sysfs and devfs
// fixtures under a temporary host_root.
#include <filesystem>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "gpu_fixture.h"
#include "mig.h"
#include "module_harness.h"
#include "test_util.h"

namespace devplug::modules {
namespace {

using namespace std::chrono_literals;
using devplug::testing::FakeGpu;
using devplug::testing::FakeMig;
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
    gpus_ = {{kA, "0000:3b:00.0", 0, 0},
             {kB, "0000:5e:00.0", 1, 0},
             {kC, "0000:af:00.0", 2, 1},
             {kD, "0000:d8:00.0", 3, 1}};
  }

  bool Build(const Strings& extra = {}) { return fx_.Build(gpus_, extra); }

  StatusOr<std::unique_ptr<ModuleInstance>> Open(const std::string& body,
                                                 const std::string& lib = FakeNvml()) {
    return harness::Open("nvidia", kName, root_.path(), "nvml_library = \"" + lib + "\"\n" + body);
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

  // A PCI change uevent for a GPU (a reset, or an operator's echo).
  void Change(ModuleInstance& inst, const std::string& pci) {
    udev::Event ev;
    ev.action = "change";
    ev.subsystem = "pci";
    ev.sysname = pci;
    ev.syspath = fx_.sysfs().DevicePath(pci).substr(root_.path().size());
    inst.OnUdevEvents({ev});
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
  // What DRA publishes (ABI 1.9), from NVML and sysfs.
  const Device* b = Find(*list, kB);
  EXPECT_EQ(b->pci_address, "0000:5e:00.0");
  EXPECT_EQ(b->pcie_root, "pci0000:5e");
  using T = DeviceAttribute::Type;
  EXPECT_EQ(b->attributes,
            (std::vector<DeviceAttribute>{{"uuid", T::kString, kB, 0},
                                          {"productName", T::kString, "NVIDIA A100-SXM4-40GB", 0},
                                          {"memory", T::kCapacity, "", 40960ll << 20}}));

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
  ASSERT_NE(Find(*(*inst)->devices(), kA + "::2"), nullptr);
  // For DRA (ABI 1.10): one GPU, shared by claims.
  EXPECT_EQ(Find(*(*inst)->devices(), kA + "::2")->share_of, kA);
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
// Measured on a real H100: SIGTERM -> exit took 35-52 ms, 31-45 of them in
// the module's stop, which waited for the nvmlEventSetWait under way (up to
// 40 ms, with the driver's lock held). The last instance's destroy() now
// returns while that wait goes on; the event set is freed and NVML shut down
// once it ends.
TEST_F(NvidiaModuleTest, DestroyDoesNotWaitForTheEventWaitUnderWay) {
  ASSERT_TRUE(Build());
  auto inst = Open("");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  ASSERT_EQ(fx_.Calls("eventsetcreate"), 1);
  fx_.HoldEventWaits(true);
  ASSERT_TRUE(fx_.WaitCalls("waitheld", 1));  // the event thread is inside a wait that goes on
  auto destroyed = std::async(std::launch::async, [&] { inst->reset(); });
  const bool prompt = destroyed.wait_for(10s) == std::future_status::ready;
  const int shutdowns_while_held = fx_.Calls("shutdown");
  fx_.HoldEventWaits(false);
  destroyed.wait();
  EXPECT_TRUE(prompt) << "destroy() waited for the event wait under way";
  EXPECT_EQ(shutdowns_while_held, 0);
  EXPECT_TRUE(fx_.WaitCalls("shutdown", 1));
  EXPECT_EQ(fx_.Calls("eventsetfree"), 1);
  EXPECT_EQ(fx_.Calls("shutdown"), 1);

  // A new instance gets a new session, while or after the old one ends.
  auto again = Open("");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(Ids(*(*again)->devices(), true), (Strings{kA, kB, kC, kD}));
  fx_.Xid(2, 79);
  EXPECT_TRUE(WaitHealth(**again, kC, false));
}

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
  fx_.sysfs().AddPci({.address = "0000:3b:02.0",
                      .vendor = 0x8086,
                      .device = 0x1889,
                      .driver = "iavf",
                      .numa_node = 0});
  uint64_t scans = (*inst)->scans();
  event("add", "0000:3b:02.0");
  event("bind", "0000:3b:02.0");
  event("unbind", "0000:3b:02.0");
  harness::Rescan(**inst);  // one scan of our own, queued after the events
  EXPECT_EQ((*inst)->scans(), scans + 1) << "an Intel VF made the module rescan";
  // A new NVIDIA function may be a new GPU: that one is looked at.
  fx_.sysfs().AddPci({.address = "0000:86:00.0",
                      .vendor = 0x10de,
                      .device = 0x20b0,
                      .driver = "nvidia",
                      .numa_node = 1});
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

// A GPU that falls off the bus while served: NVML no longer answers even
// its UUID. It stays listed, Unhealthy, with the reason.
TEST_F(NvidiaModuleTest, GpuLostWhileServedSaysSo) {
  ASSERT_TRUE(Build());
  auto inst = Open("");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  ASSERT_EQ(Ids(*(*inst)->devices(), true).size(), 4u);
  fx_.Script(gpus_, {"lost 2"});  // seen at the next nvmlInit
  Change(**inst, gpus_[2].pci);
  ASSERT_TRUE(WaitHealth(**inst, kC, false));
  EXPECT_EQ(Find(*(*inst)->devices(), kC)->health_reason, "lost (NVML)");
  EXPECT_EQ(Ids(*(*inst)->devices(), true), (Strings{kA, kB, kD}));
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
      {"discovery = \"magic\"\n",
       "module.toml:5: resource[0].discovery: must be \"auto\", \"nvml\" or \"procfs\""},
      {"shares = 0\n", "module.toml:5: resource[0].shares: must be between 1 and 1000"},
      {"ignored_xids = [\"13\"]\n",
       "module.toml:5: resource[0].ignored_xids: must be an array of integers"},
      {"ignored_xids = [13, 0]\n", "module.toml:5: resource[0].ignored_xids: 0 is not an XID"},
      {"cdi = 1\n", "module.toml:5: resource[0].cdi: must be a boolean"},
      {"mig = \"mixed\"\n",
       "module.toml:5: resource[0].mig: must be \"none\" (whole GPUs) or \"only\""},
      {"mig_profile = \"1g.10gb\"\n",
       "module.toml:5: resource[0].mig_profile: needs mig = \"only\""},
      {"mig = \"only\"\nmig_profile = \"1g\"\n",
       "module.toml:6: resource[0].mig_profile: \"1g\" is not a MIG profile name"},
      {"discovery = \"procfs\"\nmig = \"only\"\n",
       "module.toml:6: resource[0].mig: \"only\" needs NVML"},
      {"device_list_strategy = \"env\"\n",
       "module.toml:5: resource[0].device_list_strategy: must be \"envvar\", \"volume-mounts\" or "
       "\"cdi\""},
      {"driver_mount = { host = \"/home/kubernetes/bin/nvidia\" }\n",
       "module.toml:5: resource[0].driver_mount: has no container path"},
      {"driver_mount = { host = \"lib\", container = \"/usr/local/nvidia\" }\n",
       "module.toml:5: resource[0].driver_mount.host: must be an absolute path"},
      {"driver_mount = \"/home/kubernetes/bin/nvidia\"\n",
       "module.toml:5: resource[0].driver_mount: must be a table"},
      {"extra_mounts = [{ host = \"/a\", container = \"/b\", ro = true }]\n",
       "module.toml:5: resource[0].extra_mounts[0].ro: unknown key (known: host, container)"},
      {"envs = { NVIDIA_VISIBLE_DEVICES = \"all\" }\n",
       "module.toml:5: resource[0].envs.NVIDIA_VISIBLE_DEVICES: is set by the module"},
  };
  for (const Case& c : cases) {
    auto inst = Open(c.body);
    ASSERT_FALSE(inst.ok()) << c.body;
    EXPECT_NE(inst.status().message().find(c.error), std::string::npos) << c.body << "\n"
                                                                        << inst.status().message();
  }
}

// ---- MIG ----

TEST(NvidiaMigNameTest, ProfileNamesMatchNvidias) {
  using devplug::nvidia::MigProfileName;
  // H100 80GB: NVML's total is 81559 MiB.
  const unsigned long long h100 = 81559ULL << 20, a100 = 40536ULL << 20, a30 = 24258ULL << 20;
  EXPECT_EQ(MigProfileName(1, 1, 9856, h100), "1g.10gb");
  EXPECT_EQ(MigProfileName(1, 1, 19968, h100), "1g.20gb");
  EXPECT_EQ(MigProfileName(2, 2, 19968, h100), "2g.20gb");
  EXPECT_EQ(MigProfileName(3, 3, 40192, h100), "3g.40gb");
  EXPECT_EQ(MigProfileName(4, 4, 40192, h100), "4g.40gb");
  EXPECT_EQ(MigProfileName(7, 7, 80896, h100), "7g.80gb");
  EXPECT_EQ(MigProfileName(3, 1, 40192, h100), "1c.3g.40gb");  // a smaller compute instance
  EXPECT_EQ(MigProfileName(1, 1, 4864, a100), "1g.5gb");
  EXPECT_EQ(MigProfileName(7, 7, 40192, a100), "7g.40gb");
  EXPECT_EQ(MigProfileName(1, 1, 5888, a30), "1g.6gb");
  // A share of exactly 1/8 stays 1/8.
  EXPECT_EQ(MigProfileName(1, 1, 10240, 81920ULL << 20), "1g.10gb");
  EXPECT_EQ(MigProfileName(0, 0, 9856, h100), "");
  EXPECT_EQ(MigProfileName(1, 1, 9856, 0), "");
  EXPECT_EQ(MigProfileName(1, 1, 90000, h100), "");  // more than the GPU has
}

TEST(NvidiaMigNameTest, ProfileNameShapeAndCapabilityFiles) {
  using devplug::nvidia::IsMigProfileName;
  using devplug::nvidia::ParseCapabilityMinor;
  for (const char* ok : {"1g.10gb", "7g.80gb", "1c.3g.40gb", "2c.4g.40gb"})
    EXPECT_TRUE(IsMigProfileName(ok)) << ok;
  for (const char* bad : {"", "1g", "g.10gb", "1g.10", "1g.10gb+me", "c.3g.40gb", "1x.3g.40gb",
                          "1g.10gbx", "mig-1g.10gb"})
    EXPECT_FALSE(IsMigProfileName(bad)) << bad;
  EXPECT_EQ(ParseCapabilityMinor("DeviceFileMinor: 21\nDeviceFileMode: 292\nDeviceFileModify: 1\n"),
            21u);
  EXPECT_EQ(ParseCapabilityMinor("DeviceFileMode: 292\nDeviceFileMinor:\t7\r\n"), 7u);
  EXPECT_FALSE(ParseCapabilityMinor("DeviceFileMode: 292\n").has_value());
  EXPECT_FALSE(ParseCapabilityMinor("DeviceFileMinor: x1\n").has_value());
  EXPECT_FALSE(ParseCapabilityMinor("DeviceFileMinor: \n").has_value());
}

// Two H100s with MIG on (GPU 0: three 1g.10gb and one 3g.40gb; GPU 1: two
// 3g.40gb), two without.
class NvidiaMigTest : public NvidiaModuleTest {
 protected:
  void SetUp() override {
    NvidiaModuleTest::SetUp();
    if (IsSkipped()) return;
    for (auto& g : gpus_) {
      g.model = "NVIDIA H100 80GB HBM3";
      g.mib = devplug::testing::kH100Mib;
    }
    migs_ = {devplug::testing::Mig1g10gb(0, kM[0], 9),  devplug::testing::Mig1g10gb(0, kM[1], 10),
             devplug::testing::Mig1g10gb(0, kM[2], 11), devplug::testing::Mig3g40gb(0, kM[3], 2),
             devplug::testing::Mig3g40gb(1, kM[4], 1),  devplug::testing::Mig3g40gb(1, kM[5], 2)};
    ASSERT_TRUE(Build());
    ASSERT_TRUE(fx_.Mig(gpus_, {0, 1}, migs_));
  }

  bool WaitCount(ModuleInstance& inst, size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (inst.devices()->size() == n) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  static inline const std::string kM[6] = {
      "MIG-00000000-0000-4000-8000-000000000000", "MIG-00000000-0000-4000-8000-000000000001",
      "MIG-00000000-0000-4000-8000-000000000002", "MIG-00000000-0000-4000-8000-000000000003",
      "MIG-00000000-0000-4000-8000-000000000004", "MIG-00000000-0000-4000-8000-000000000005"};
  std::vector<FakeMig> migs_;
};

TEST_F(NvidiaMigTest, MigDevicesByProfileWithTheirCapabilityNodes) {
  auto small = Open("mig = \"only\"\nmig_profile = \"1g.10gb\"\n");
  ASSERT_TRUE(small.ok()) << small.status().message();
  DeviceListPtr list = (*small)->devices();
  EXPECT_EQ(Ids(*list, true), (Strings{kM[0], kM[1], kM[2]}));
  EXPECT_EQ(Find(*list, kM[1])->numa_node, 0);
  // A MIG device is described by its own UUID and memory, and its GPU's
  // PCI function.
  using T = DeviceAttribute::Type;
  EXPECT_EQ(Find(*list, kM[1])->pci_address, gpus_[0].pci);
  EXPECT_EQ(Find(*list, kM[1])->attributes,
            (std::vector<DeviceAttribute>{{"uuid", T::kString, kM[1], 0},
                                          {"productName", T::kString, "NVIDIA H100 80GB HBM3", 0},
                                          {"parentUUID", T::kString, gpus_[0].uuid, 0},
                                          {"migProfile", T::kString, "1g.10gb", 0},
                                          {"memory", T::kCapacity, "", 9856ll << 20}}));
  auto r = harness::Allocate(**small, {kM[2], kM[0]});
  ASSERT_TRUE(r.ok()) << r.status().message();
  Strings want = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0"};
  for (const auto& c : fx_.CapNodes(0, 11, 0)) want.push_back(c);
  for (const auto& c : fx_.CapNodes(0, 9, 0)) want.push_back(c);
  EXPECT_EQ(Nodes(*r), want);
  EXPECT_EQ(Env(*r, "NVIDIA_VISIBLE_DEVICES"), kM[2] + "," + kM[0]);

  // All profiles; and the whole GPUs: only those without MIG.
  auto all = Open("mig = \"only\"\n");
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_EQ(Ids(*(*all)->devices(), true), (Strings{kM[0], kM[1], kM[2], kM[3], kM[4], kM[5]}));
  auto big = Open("mig = \"only\"\nmig_profile = \"3g.40gb\"\nshares = 2\n");
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_EQ(Ids(*(*big)->devices(), true), (Strings{kM[3] + "::0", kM[3] + "::1", kM[4] + "::0",
                                                    kM[4] + "::1", kM[5] + "::0", kM[5] + "::1"}));
  auto whole = Open("");
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(Ids(*(*whole)->devices(), true), (Strings{kC, kD}));
  // Four instances, one NVML session: one init, one event set.
  EXPECT_EQ(fx_.Calls("init"), 1);
  EXPECT_EQ(fx_.Calls("eventsetcreate"), 1);
  small->reset();
  all->reset();
  big->reset();
  whole->reset();
  // The session ends on its own thread, after the event wait under way.
  EXPECT_TRUE(fx_.WaitCalls("shutdown", 1));
  EXPECT_EQ(fx_.Calls("eventsetfree"), 1);
  EXPECT_EQ(fx_.Calls("shutdown"), 1);
}

TEST_F(NvidiaMigTest, MissingCapabilityMakesThatMigDeviceUnhealthy) {
  auto inst = Open("mig = \"only\"\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  const Strings caps = fx_.CapNodes(0, 10, 0);
  std::filesystem::remove(root_.path() + caps[1]);
  std::filesystem::remove(root_ / "proc/driver/nvidia/capabilities/gpu1/mig/gi2/access");
  harness::Rescan(**inst);
  DeviceListPtr list = (*inst)->devices();
  EXPECT_EQ(Ids(*list, true), (Strings{kM[0], kM[2], kM[3], kM[4]}));
  EXPECT_EQ(Find(*list, kM[1])->health_reason, caps[1] + " missing");
  EXPECT_EQ(Find(*list, kM[5])->health_reason, "MIG capability missing");
  ASSERT_TRUE(fx_.Mig(gpus_, {0, 1}, migs_));  // the driver makes them again
  harness::Rescan(**inst);
  EXPECT_EQ(Ids(*(*inst)->devices(), true).size(), 6u);
}

TEST_F(NvidiaMigTest, XidOnTheParentOrOneInstance) {
  auto inst = Open("mig = \"only\"\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  fx_.Xid(1, 94, 2, 0);  // contained to GPU 1's instance 2
  ASSERT_TRUE(WaitHealth(**inst, kM[5], false));
  EXPECT_EQ(Find(*(*inst)->devices(), kM[5])->health_reason, "XID 94");
  EXPECT_TRUE(Find(*(*inst)->devices(), kM[4])->healthy);
  fx_.Xid(0, 79);  // the whole GPU 0
  ASSERT_TRUE(WaitHealth(**inst, kM[3], false));
  EXPECT_EQ(Ids(*(*inst)->devices(), true), (Strings{kM[4]}));
  Change(**inst, gpus_[0].pci);  // GPU 0 reset
  ASSERT_TRUE(WaitHealth(**inst, kM[0], true));
  EXPECT_EQ(Ids(*(*inst)->devices(), true), (Strings{kM[0], kM[1], kM[2], kM[3], kM[4]}));
  Change(**inst, gpus_[1].pci);
  ASSERT_TRUE(WaitHealth(**inst, kM[5], true));
}

TEST_F(NvidiaMigTest, ReconfigurationIsPickedUp) {
  auto inst = Open("mig = \"only\"\nmig_profile = \"1g.10gb\"\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  ASSERT_EQ((*inst)->devices()->size(), 3u);
  // GPU 0's 3g.40gb becomes three more 1g.10gb: MIG-config-change event.
  std::vector<FakeMig> migs(migs_.begin(), migs_.begin() + 3);
  for (unsigned gi = 3; gi < 6; gi++)
    migs.push_back(devplug::testing::Mig1g10gb(
        0, "MIG-10000000-0000-4000-8000-00000000000" + std::to_string(gi), gi));
  migs.push_back(migs_[4]);
  migs.push_back(migs_[5]);
  ASSERT_TRUE(fx_.Mig(gpus_, {0, 1}, migs));
  fx_.MigChangeEvent(0);
  ASSERT_TRUE(WaitCount(**inst, 6));
  // Destroyed again, seen on a change uevent for the GPU.
  ASSERT_TRUE(fx_.Mig(gpus_, {0, 1}, {migs_[0], migs_[4], migs_[5]}));
  Change(**inst, gpus_[0].pci);
  ASSERT_TRUE(WaitCount(**inst, 1));
  EXPECT_EQ(Ids(*(*inst)->devices(), true), Strings{kM[0]});
  // MIG switched off on GPU 0: its devices leave, a whole-GPU resource gains it.
  ASSERT_TRUE(fx_.Mig(gpus_, {1}, {migs_[4], migs_[5]}));
  Change(**inst, gpus_[0].pci);
  ASSERT_TRUE(WaitCount(**inst, 0));
  // Back on, with no event at all: the periodic resync sees it once the
  // shared discovery is older than a second.
  ASSERT_TRUE(fx_.Mig(gpus_, {0, 1}, migs_));
  std::this_thread::sleep_for(1100ms);
  harness::Rescan(**inst);
  EXPECT_EQ(Ids(*(*inst)->devices(), true), (Strings{kM[0], kM[1], kM[2]}));
}

TEST_F(NvidiaMigTest, PreferredAllocationUsesFewestGpus) {
  // GPU 0: 1g x3 + 3g; GPU 1: 3g x2. Every MIG device, any profile.
  auto inst = Open("mig = \"only\"\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  const Strings all = Ids(*(*inst)->devices());
  auto two = harness::Prefer(**inst, all, {}, 2);
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(*two, (Strings{kM[4], kM[5]}));  // GPU 1 fits two exactly
  auto with = harness::Prefer(**inst, all, {kM[1]}, 3);
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(*with, (Strings{kM[1], kM[0], kM[2]}));  // the GPU already used
  auto five = harness::Prefer(**inst, all, {}, 5);
  ASSERT_TRUE(five.ok());
  EXPECT_EQ(*five, (Strings{kM[0], kM[1], kM[2], kM[3], kM[4]}));  // largest GPU first
}

TEST_F(NvidiaMigTest, DriversWithoutMigCalls) {
  auto only = Open("mig = \"only\"\n", FakeNvml("fake_nvml_nomig"));
  ASSERT_FALSE(only.ok());
  EXPECT_NE(only.status().message().find("lacks NVML's MIG calls"), std::string::npos)
      << only.status().message();
  auto whole = Open("", FakeNvml("fake_nvml_nomig"));
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(Ids(*(*whole)->devices(), true), (Strings{kA, kB, kC, kD}));
  // No NVML at all: mig = "only" cannot work.
  auto none = Open("mig = \"only\"\n", "/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("needs NVML"), std::string::npos)
      << none.status().message();
}

// ---- driver mounts and device list strategies ----

TEST_F(NvidiaModuleTest, DriverMountExtraMountsAndEnvs) {
  ASSERT_TRUE(Build());
  devplug::testing::WriteFile(root_.path() + "/home/kubernetes/bin/nvidia/lib64/libcuda.so.1", "");
  devplug::testing::WriteFile(root_.path() + "/etc/vulkan/icd.d/nvidia_icd.json", "{}");
  auto inst = Open(
      "driver_mount = { host = \"/home/kubernetes/bin/nvidia\", container = \"/usr/local/nvidia\" "
      "}\n"
      "extra_mounts = [{ host = \"/etc/vulkan/icd.d\", container = \"/etc/vulkan/icd.d\" },\n"
      "  { host = \"/opt/absent\", container = \"/opt/absent\" }]\n"
      "envs = { LD_LIBRARY_PATH = \"/usr/local/nvidia/lib64\" }\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  auto r = harness::Allocate(**inst, {kA, kB});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->mounts.size(), 2u);
  EXPECT_EQ(r->mounts[0].host_path, "/home/kubernetes/bin/nvidia");
  EXPECT_EQ(r->mounts[0].container_path, "/usr/local/nvidia");
  EXPECT_TRUE(r->mounts[0].read_only);
  EXPECT_EQ(r->mounts[1].container_path, "/etc/vulkan/icd.d");
  EXPECT_TRUE(r->mounts[1].read_only);
  EXPECT_EQ(Env(*r, "LD_LIBRARY_PATH"), "/usr/local/nvidia/lib64");
  EXPECT_EQ(Env(*r, "NVIDIA_VISIBLE_DEVICES"), kA + "," + kB);
  // The driver folder disappears (driver being reinstalled): every GPU
  // Unhealthy, with the reason; back when it is back.
  std::filesystem::rename(root_ / "home/kubernetes/bin/nvidia", root_ / "home/kubernetes/bin/old");
  harness::Rescan(**inst);
  EXPECT_TRUE(Ids(*(*inst)->devices(), true).empty());
  EXPECT_EQ(Find(*(*inst)->devices(), kC)->health_reason, "driver mount missing");
  std::filesystem::rename(root_ / "home/kubernetes/bin/old", root_ / "home/kubernetes/bin/nvidia");
  harness::Rescan(**inst);
  EXPECT_EQ(Ids(*(*inst)->devices(), true).size(), 4u);
}

TEST_F(NvidiaModuleTest, VolumeMountsAndCdiStrategies) {
  ASSERT_TRUE(Build());
  auto vol = Open("device_list_strategy = \"volume-mounts\"\n");
  ASSERT_TRUE(vol.ok()) << vol.status().message();
  auto r = harness::Allocate(**vol, {kD, kA});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->mounts.size(), 2u);
  EXPECT_EQ(r->mounts[0].host_path, "/dev/null");
  EXPECT_EQ(r->mounts[0].container_path, "/var/run/nvidia-container-devices/" + kD);
  EXPECT_EQ(r->mounts[1].container_path, "/var/run/nvidia-container-devices/" + kA);
  EXPECT_TRUE(r->mounts[1].read_only);
  EXPECT_EQ(Env(*r, "NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
  EXPECT_TRUE(r->cdi_devices.empty());
  auto cdi = Open("device_list_strategy = \"cdi\"\n");
  ASSERT_TRUE(cdi.ok()) << cdi.status().message();
  r = harness::Allocate(**cdi, {kB});
  ASSERT_TRUE(r.ok());
  // devplugd's own spec names the device (by this recipe): no name of a
  // spec NVIDIA's toolkit would have to make.
  EXPECT_TRUE(r->cdi_devices.empty());
  EXPECT_EQ(Env(*r, "NVIDIA_VISIBLE_DEVICES"), "<unset>");
  EXPECT_EQ(Nodes(*r).back(), "/dev/nvidia1");  // nodes still go to the device cgroup
}

TEST(NvidiaModuleRealTest, NoDriverMeansNoGpus) {
  if (std::filesystem::exists("/proc/driver/nvidia")) GTEST_SKIP() << "this machine has the driver";
  auto inst = harness::Open("nvidia", kName, "/", "");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_TRUE((*inst)->devices()->empty());
}

}  // namespace
}  // namespace devplug::modules
