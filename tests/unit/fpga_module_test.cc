// The fpga-opae module through the real loader and ModuleInstance, on DFL
// and intel-fpga fixture trees. The module is its test build
// (fpga-opae-fixture.so): the same code, with device operations that act on
// the fixture (modules/fpga-opae/fixture_ops.cc); the installed fpga-opae.so
// is checked to load and refuse bad configuration alike.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fpga_fixture.h"
#include "module_harness.h"
#include "test_util.h"

namespace devplug::modules {
namespace {

using harness::Find;
using harness::Ids;
using testing::FpgaCardSpec;
using testing::FpgaPortSpec;
using testing::FpgaVfSpec;
using testing::kIdleAfu;
using testing::kInterface;
using testing::kNlb0;
using testing::kNlb3;
using Strings = std::vector<std::string>;
using namespace std::chrono_literals;

constexpr char kRes[] = "fpga.example.com/nlb3";

std::string FixtureModule() { return devplug::testing::FakeModuleDir() + "/fpga-opae-fixture.so"; }

class FpgaModuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!devplug::testing::IsRoot()) GTEST_SKIP() << "fixture device nodes need root (mknod)";
  }
  // One card, PF 0000:5e:00.0 on NUMA 0: dfl-port.0 (port 0, nlb0) and
  // dfl-port.1 (port 1, nlb0); VF 0000:5e:00.1 with dfl-port.2 (port 2).
  void OneCard(bool legacy = false) {
    FpgaCardSpec c;
    c.legacy = legacy;
    c.ports = {FpgaPortSpec{0, 0, kNlb0}, FpgaPortSpec{1, 1, kNlb0}};
    if (!legacy) c.vfs = {FpgaVfSpec{"0000:5e:00.1", 5, FpgaPortSpec{2, 2, kNlb0}}};
    fx_.AddCard(c);
  }
  StatusOr<std::unique_ptr<ModuleInstance>> Open(const std::string& body,
                                                 const std::string& name = kRes, size_t index = 0) {
    return harness::OpenFile(FixtureModule(), name, dir_.path(), body, index);
  }
  std::string Region(const std::string& extra = "") const {
    return "mode = \"region\"\nafu_id = \"" + std::string(kNlb3) + "\"\ninterface_id = \"" +
           kInterface + "\"\n" + extra;
  }

  devplug::testing::TempDir dir_;
  testing::FpgaFixture fx_{dir_.path()};
};

// ---- discovery, modes and claims --------------------------------------------------------------

TEST_F(FpgaModuleTest, AfModeListsPortsHoldingTheAccelerator) {
  OneCard();
  fx_.SetAfu("dfl-port.1", kNlb3);
  auto inst = Open(std::string("afu_id = \"") + kNlb3 + "\"\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_EQ(Ids(*(*inst)->devices()), Strings{"dfl-port.1"});
  EXPECT_TRUE(Find(*(*inst)->devices(), "dfl-port.1")->healthy);
  EXPECT_EQ(Find(*(*inst)->devices(), "dfl-port.1")->numa_node, 0);
  {  // What DRA publishes (ABI 1.9): the PF carrying the port, the FIM, the AFU.
    const DeviceListPtr list = (*inst)->devices();
    const Device* d = Find(*list, "dfl-port.1");
    EXPECT_EQ(d->pci_address, "0000:5e:00.0");
    ASSERT_EQ(d->attributes.size(), 2u);
    EXPECT_EQ(d->attributes[0].name, "interfaceID");
    EXPECT_EQ(d->attributes[0].text, kInterface);
    EXPECT_EQ(d->attributes[1].name, "afuID");
    EXPECT_EQ(d->attributes[1].text, kNlb3);
  }
  // Reprogrammed elsewhere: it leaves, another one comes.
  fx_.SetAfu("dfl-port.1", kNlb0);
  fx_.SetAfu("dfl-port.2", "F7DF405C-BD7A-CF72-22F1-44B0B93ACD18");
  harness::Rescan(**inst);
  EXPECT_EQ(Ids(*(*inst)->devices()), Strings{"dfl-port.2"});
}

TEST_F(FpgaModuleTest, RegionModeListsEveryPortOfMatchingCards) {
  OneCard();
  FpgaCardSpec other;
  other.pf = "0000:af:00.0";
  other.bridge = "0000:ae:00.0";
  other.region = 3;
  other.fme = 1;
  other.numa_node = 1;
  other.interface_id = "0123456789abcdef0123456789abcdef";
  other.ports = {FpgaPortSpec{3, 0, kNlb0}};
  fx_.AddCard(other);
  auto inst = Open(Region());
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_EQ(Ids(*(*inst)->devices()), (Strings{"dfl-port.0", "dfl-port.1", "dfl-port.2"}));
  inst->reset();  // each resource below would claim what it selects
  // Without interface_id: every card.
  auto all = Open("mode = \"region\"\nafu_id = \"" + std::string(kNlb3) + "\"\n", "x.io/all");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(Ids(*(*all)->devices()).size(), 4u);
  EXPECT_EQ(Find(*(*all)->devices(), "dfl-port.3")->numa_node, 1);
  all->reset();
  // Allow-lists: a VF's port by the VF's address, a port by name.
  auto vf = Open(Region("addresses = [\"5e:00.1\"]\n"), "x.io/vf");
  ASSERT_TRUE(vf.ok());
  EXPECT_EQ(Ids(*(*vf)->devices()), Strings{"dfl-port.2"});
  vf->reset();
  auto named = Open(Region("ports = [\"dfl-port.1\"]\n"), "x.io/named");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(Ids(*(*named)->devices()), Strings{"dfl-port.1"});
}

// Region resources claim first, then af ones, each in configuration order,
// so a port never moves between resources when it is reprogrammed.
TEST_F(FpgaModuleTest, PortsBelongToOneResource) {
  OneCard();
  fx_.SetAfu("dfl-port.0", kNlb3);
  auto af = Open(std::string("afu_id = \"") + kNlb3 + "\"\n", "x.io/af", 0);
  ASSERT_TRUE(af.ok());
  EXPECT_EQ(Ids(*(*af)->devices()), Strings{"dfl-port.0"});
  // A region resource later in the file still comes first, and the af
  // resource gives the port up as soon as it exists.
  auto region = Open(Region("ports = [\"dfl-port.0\", \"dfl-port.1\"]\n"), "x.io/region", 1);
  ASSERT_TRUE(region.ok());
  EXPECT_EQ(Ids(*(*region)->devices()), (Strings{"dfl-port.0", "dfl-port.1"}));
  harness::Rescan(**af);
  EXPECT_EQ(Ids(*(*af)->devices()), Strings{});
  // Two region resources: the first table wins the ports both select.
  auto first = Open(Region(), "x.io/first", 2);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(Ids(*(*first)->devices()), Strings{"dfl-port.2"});
  // Gone, its ports go back.
  region->reset();
  harness::Rescan(**first);
  harness::Rescan(**af);
  EXPECT_EQ(Ids(*(*first)->devices()), (Strings{"dfl-port.0", "dfl-port.1", "dfl-port.2"}));
  EXPECT_EQ(Ids(*(*af)->devices()), Strings{});
  first->reset();
  harness::Rescan(**af);
  EXPECT_EQ(Ids(*(*af)->devices()), Strings{"dfl-port.0"});
}

TEST_F(FpgaModuleTest, IntelFpgaDriver) {
  OneCard(/*legacy=*/true);
  auto inst = Open(std::string("afu_id = \"") + kNlb0 + "\"\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_EQ(Ids(*(*inst)->devices()), (Strings{"intel-fpga-port.0", "intel-fpga-port.1"}));
  auto r = harness::Allocate(**inst, {"intel-fpga-port.1"});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->device_nodes.size(), 1u);
  EXPECT_EQ(r->device_nodes[0].host_path, "/dev/intel-fpga-port.1");
  // driver = "dfl" on this host finds nothing.
  auto dfl = Open(std::string("driver = \"dfl\"\nafu_id = \"") + kNlb0 + "\"\n", "x.io/dfl");
  ASSERT_TRUE(dfl.ok());
  EXPECT_TRUE((*dfl)->devices()->empty());
}

// ---- health ----------------------------------------------------------------------------------

TEST_F(FpgaModuleTest, HealthRulesWithReasons) {
  OneCard();
  auto inst = Open(Region("health_errors = true\n"));
  ASSERT_TRUE(inst.ok());
  EXPECT_EQ(Ids(*(*inst)->devices(), true).size(), 3u);
  fx_.RemoveNode("dfl-port.0");
  fx_.SetAfu("dfl-port.1", std::string(32, 'f'));
  fx_.SetPortAttr("dfl-port.2", "power_state", "0x6");
  harness::Rescan(**inst);
  auto list = (*inst)->devices();
  EXPECT_EQ(Find(*list, "dfl-port.0")->health_reason, "/dev/dfl-port.0 missing");
  EXPECT_NE(Find(*list, "dfl-port.1")->health_reason.find("all f"), std::string::npos);
  EXPECT_EQ(Find(*list, "dfl-port.2")->health_reason, "power state AP6");
  EXPECT_EQ(Ids(*list, true), Strings{});
  ASSERT_TRUE(devplug::testing::MakeCharDevice(dir_.path() + "/dev/dfl-port.0", 244, 0));
  fx_.SetAfu("dfl-port.1", kNlb0);
  fx_.SetPortAttr("dfl-port.2", "power_state", "0x0");
  fx_.SetPortAttr("dfl-port.2", "errors/errors", "0x4");
  harness::Rescan(**inst);
  list = (*inst)->devices();
  EXPECT_EQ(Ids(*list, true), (Strings{"dfl-port.0", "dfl-port.1"}));
  EXPECT_EQ(Find(*list, "dfl-port.2")->health_reason, "port errors 0x4");
}

// A listed port stays listed (Unhealthy) while its card's interface ID
// cannot be read, and recovers on its own.
TEST_F(FpgaModuleTest, UnreadableInterfaceKeepsThePortListed) {
  OneCard();
  auto inst = Open(Region());
  ASSERT_TRUE(inst.ok());
  const std::string compat =
      std::filesystem::canonical(dir_.path() + "/sys/class/fpga_region/region1/compat_id");
  std::filesystem::rename(compat, compat + ".gone");
  harness::Rescan(**inst);
  auto list = (*inst)->devices();
  ASSERT_EQ(Ids(*list).size(), 3u);
  EXPECT_EQ(Ids(*list, true), Strings{});
  EXPECT_NE(Find(*list, "dfl-port.0")->health_reason.find("interface ID unreadable"),
            std::string::npos);
  std::filesystem::rename(compat + ".gone", compat);
  harness::Rescan(**inst);
  EXPECT_EQ(Ids(*(*inst)->devices(), true).size(), 3u);
}

// ---- Allocate and GetPreferredAllocation ------------------------------------------------------

TEST_F(FpgaModuleTest, AllocateGivesPortNodesAndFunctionAddresses) {
  OneCard();
  auto inst = Open(Region());
  ASSERT_TRUE(inst.ok());
  auto r = harness::Allocate(**inst, {"dfl-port.2", "dfl-port.0", "dfl-port.1"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  Strings nodes;
  for (const auto& n : r->device_nodes) {
    nodes.push_back(n.host_path);
    EXPECT_EQ(n.container_path, n.host_path);
    EXPECT_EQ(n.permissions, "rw");
  }
  EXPECT_EQ(nodes, (Strings{"/dev/dfl-port.2", "/dev/dfl-port.0", "/dev/dfl-port.1"}));
  ASSERT_EQ(r->envs.size(), 1u);
  EXPECT_EQ(r->envs[0], std::make_pair(std::string("FPGA_RESOURCE_FPGA_EXAMPLE_COM_NLB3"),
                                       std::string("0000:5e:00.1,0000:5e:00.0")));
  inst->reset();
  // region-devel adds the FME, once; env = false drops the variable.
  auto devel =
      Open("mode = \"region-devel\"\nenv = false\nafu_id = \"" + std::string(kNlb3) + "\"\n",
           "x.io/my-dev.el");
  ASSERT_TRUE(devel.ok());
  r = harness::Allocate(**devel, {"dfl-port.0", "dfl-port.1"});
  ASSERT_TRUE(r.ok());
  nodes.clear();
  for (const auto& n : r->device_nodes) nodes.push_back(n.host_path);
  EXPECT_EQ(nodes, (Strings{"/dev/dfl-port.0", "/dev/dfl-fme.0", "/dev/dfl-port.1"}));
  EXPECT_TRUE(r->envs.empty());
}

TEST_F(FpgaModuleTest, PreferredPortsAlreadyProgrammedThenOneNodeThenNaturalOrder) {
  // Card A on NUMA 0: ports 0, 1; card B on NUMA 1: ports 2, 3, 10.
  FpgaCardSpec a;
  a.ports = {FpgaPortSpec{0, 0, kNlb0}, FpgaPortSpec{1, 1, kNlb0}};
  fx_.AddCard(a);
  FpgaCardSpec b;
  b.pf = "0000:af:00.0";
  b.bridge = "0000:ae:00.0";
  b.region = 3;
  b.fme = 1;
  b.numa_node = 1;
  b.ports = {FpgaPortSpec{2, 0, kNlb0}, FpgaPortSpec{3, 1, kNlb0}, FpgaPortSpec{10, 2, kNlb0}};
  fx_.AddCard(b);
  fx_.SetAfu("dfl-port.1", kNlb3);  // ready on node 0
  auto inst = Open(Region());
  ASSERT_TRUE(inst.ok());
  const Strings all{"dfl-port.0", "dfl-port.1", "dfl-port.2", "dfl-port.3", "dfl-port.10"};
  auto prefer = [&](Strings avail, Strings must, int n) {
    auto r = harness::Prefer(**inst, std::move(avail), std::move(must), n);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : Strings{};
  };
  // The ready port first, then node 1 (it can hold the rest with the most
  // ports), in natural order.
  EXPECT_EQ(prefer(all, {}, 3), (Strings{"dfl-port.1", "dfl-port.2", "dfl-port.3"}));
  EXPECT_EQ(prefer(all, {}, 1), Strings{"dfl-port.1"});
  EXPECT_EQ(prefer(all, {"dfl-port.10"}, 2), (Strings{"dfl-port.10", "dfl-port.1"}));
  EXPECT_EQ(prefer({"dfl-port.0", "dfl-port.10", "dfl-port.2"}, {}, 2),
            (Strings{"dfl-port.2", "dfl-port.10"}));
  // The same answer whatever order the kubelet lists them in (fixed seed).
  std::mt19937 rng(20261123);
  std::printf("seed 20261123\n");
  const Strings want = prefer(all, {}, 4);
  for (int i = 0; i < 20; ++i) {
    Strings shuffled = all;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    EXPECT_EQ(prefer(shuffled, {}, 4), want);
  }
}

// ---- PreStartContainer: programming ----------------------------------------------------------

TEST_F(FpgaModuleTest, PreStartProgramsWithFpgaconfOnceOnly) {
  OneCard();
  fx_.AddGbs(kInterface, kNlb3);
  const std::string tool = fx_.AddFpgaconf();
  auto inst = Open(Region("fpgaconf = \"" + tool + "\"\n"));
  ASSERT_TRUE(inst.ok());
  Status st = harness::PreStart(**inst, {"dfl-port.0"});
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(fx_.Afu("dfl-port.0"), kNlb3);
  const std::string gbs = dir_.path() + "/srv/intel.com/fpga/" + kInterface + "/" + kNlb3 + ".gbs";
  EXPECT_EQ(fx_.FpgaconfLog(), Strings{"-B 0x5e -D 0x00 -F 0x0 " + gbs});
  // Container restarts: already programmed, nothing runs.
  ASSERT_TRUE(harness::PreStart(**inst, {"dfl-port.0"}).ok());
  ASSERT_TRUE(harness::PreStart(**inst, {"dfl-port.0"}).ok());
  EXPECT_EQ(fx_.FpgaconfLog().size(), 1u);
  EXPECT_TRUE(fx_.OpsLog().empty());
  harness::Rescan(**inst);
  EXPECT_TRUE(Find(*(*inst)->devices(), "dfl-port.0")->healthy);
}

// fpgaconf programs slot 0 only: with "auto", other ports (and VF ports,
// port id 2 here) go through the PR ioctl on the PF's FME.
TEST_F(FpgaModuleTest, PreStartUsesTheIoctlForOtherSlots) {
  OneCard();
  fx_.AddGbs(kInterface, kNlb3);
  const std::string tool = fx_.AddFpgaconf();
  auto inst = Open(Region("fpgaconf = \"" + tool + "\"\n"));
  ASSERT_TRUE(inst.ok());
  Status st = harness::PreStart(**inst, {"dfl-port.2"});
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(fx_.Afu("dfl-port.2"), kNlb3);
  EXPECT_TRUE(fx_.FpgaconfLog().empty());
  ASSERT_EQ(fx_.OpsLog().size(), 1u);
  EXPECT_EQ(fx_.OpsLog()[0], "pr /dev/dfl-fme.0 port_id=2 argsz=24 flags=0 size=4132 head=AFU:" +
                                 std::string(kNlb3));
  // Told to use fpgaconf, such a port is refused with the reason.
  inst->reset();
  auto forced =
      Open(Region("fpgaconf = \"" + tool + "\"\nprogram_with = \"fpgaconf\"\n"), "x.io/forced");
  ASSERT_TRUE(forced.ok());
  st = harness::PreStart(**forced, {"dfl-port.1"});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("fpgaconf programs slot 0 only, and dfl-port.1 is port 1"),
            std::string::npos)
      << st.message();
}

TEST_F(FpgaModuleTest, PreStartRefusalsNameTheFileAndWhy) {
  OneCard();
  auto inst = Open(Region("program_with = \"ioctl\"\nfailure_hold = \"0\"\n"));
  ASSERT_TRUE(inst.ok());
  const std::string gbs = dir_.path() + "/srv/intel.com/fpga/" + kInterface + "/" + kNlb3 + ".gbs";
  Status st = harness::PreStart(**inst, {"dfl-port.0"});
  EXPECT_NE(st.message().find(gbs + ": No such file or directory"), std::string::npos)
      << st.message();
  fx_.AddGbs(kInterface, kNlb3, "0", "", "00000000000000000000000000000001");
  st = harness::PreStart(**inst, {"dfl-port.0"});
  EXPECT_NE(st.message().find(gbs + ": made for interface 00000000000000000000000000000001"),
            std::string::npos)
      << st.message();
  fx_.AddGbs(kInterface, kNlb0, "0", kNlb3);  // a file named nlb3 that holds nlb0
  st = harness::PreStart(**inst, {"dfl-port.0"});
  EXPECT_NE(st.message().find(gbs + ": holds accelerator " + std::string(kNlb0) + ", not " + kNlb3),
            std::string::npos)
      << st.message();
  devplug::testing::WriteFile(gbs, "not a bitstream at all, not at all");
  st = harness::PreStart(**inst, {"dfl-port.0"});
  EXPECT_NE(st.message().find(gbs + ": not a GBS file"), std::string::npos) << st.message();
  EXPECT_EQ(fx_.Afu("dfl-port.0"), kNlb0);
  EXPECT_TRUE(fx_.OpsLog().empty());
}

// "auto" falling back to the ioctl cannot set user clocks: such an image is
// refused rather than loaded with the wrong clock.
TEST_F(FpgaModuleTest, UserClockNeedsFpgaconf) {
  OneCard();
  fx_.AddGbs(kInterface, kNlb3, "312.5");
  auto inst = Open(Region("fpgaconf = \"/nonexistent/fpgaconf\"\n"));
  ASSERT_TRUE(inst.ok());
  Status st = harness::PreStart(**inst, {"dfl-port.0"});
  EXPECT_NE(st.message().find("needs user clocks (312.5/312.5 MHz)"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("/nonexistent/fpgaconf is not installed"), std::string::npos);
  inst->reset();
  auto ioctl = Open(Region("program_with = \"ioctl\"\n"), "x.io/ioctl");
  ASSERT_TRUE(ioctl.ok());
  EXPECT_TRUE(harness::PreStart(**ioctl, {"dfl-port.1"}).ok());
  EXPECT_EQ(fx_.Afu("dfl-port.1"), kNlb3);
}

// A failed programming holds the port Unhealthy for failure_hold (so the
// kubelet picks others), then it is judged from sysfs again.
TEST_F(FpgaModuleTest, FailedProgrammingHoldsThePort) {
  OneCard();
  fx_.AddGbs(kInterface, kNlb3);
  const std::string tool = fx_.AddFpgaconf(/*exit_code=*/3);
  auto inst = Open(Region("fpgaconf = \"" + tool + "\"\nfailure_hold = \"1500ms\"\n"));
  ASSERT_TRUE(inst.ok());
  Status st = harness::PreStart(**inst, {"dfl-port.0"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("exited with status 3: fpgaconf: error: PR failed"),
            std::string::npos)
      << st.message();
  harness::Rescan(**inst);
  const DeviceListPtr list = (*inst)->devices();  // keeps *d alive
  const Device* d = Find(*list, "dfl-port.0");
  EXPECT_FALSE(d->healthy);
  EXPECT_NE(d->health_reason.find("programming failed: "), std::string::npos) << d->health_reason;
  // The module's own timer brings it back, no resync needed.
  const auto end = std::chrono::steady_clock::now() + 20s;
  while (!Find(*(*inst)->devices(), "dfl-port.0")->healthy &&
         std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(Find(*(*inst)->devices(), "dfl-port.0")->healthy);
  // The PR ioctl failing (EIO from the card) is held the same way.
  fx_.SetPrFails("dfl-fme.0", true);
  st = harness::PreStart(**inst, {"dfl-port.1"});
  EXPECT_NE(st.message().find("PR error"), std::string::npos) << st.message();
  harness::Rescan(**inst);
  EXPECT_FALSE(Find(*(*inst)->devices(), "dfl-port.1")->healthy);
}

TEST_F(FpgaModuleTest, ProgrammingThatDoesNotTakeFailsAndSlowToolsAreKilled) {
  OneCard();
  fx_.AddGbs(kInterface, kNlb3);
  // A tool that "succeeds" without programming anything.
  const std::string liar = dir_.path() + "/bin/true-fpgaconf";
  devplug::testing::WriteFile(liar, "#!/bin/sh\nexit 0\n");
  chmod(liar.c_str(), 0755);
  auto inst = Open(Region("fpgaconf = \"" + liar + "\"\n"));
  ASSERT_TRUE(inst.ok());
  Status st = harness::PreStart(**inst, {"dfl-port.0"});
  EXPECT_NE(
      st.message().find("dfl-port.0 holds accelerator " + std::string(kNlb0) + ", not " + kNlb3),
      std::string::npos)
      << st.message();
  inst->reset();
  const std::string slow = fx_.AddFpgaconf(0, /*sleep_s=*/30);
  auto timed = Open(Region("fpgaconf = \"" + slow + "\"\nprogram_timeout = \"300ms\"\n"), "x.io/t");
  ASSERT_TRUE(timed.ok());
  const auto start = std::chrono::steady_clock::now();
  st = harness::PreStart(**timed, {"dfl-port.0"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
  EXPECT_NE(st.message().find("timed out after 300ms"), std::string::npos) << st.message();
}

// PreStartContainer is bounded as a whole: two ports, each programmed by a
// tool that takes a second, share one program_timeout of 1.5 s (before,
// each port got its own, and N ports took N times it).
TEST_F(FpgaModuleTest, PreStartIsBoundedAsAWholeByProgramTimeout) {
  FpgaCardSpec a, b;
  a.ports = {FpgaPortSpec{0, 0, kNlb0}};
  b.pf = "0000:af:00.0";
  b.bridge = "0000:ae:00.0";
  b.region = 2;
  b.fme = 1;
  b.ports = {FpgaPortSpec{1, 0, kNlb0}};
  fx_.AddCard(a);
  fx_.AddCard(b);
  fx_.AddGbs(kInterface, kNlb3);
  const std::string slow = fx_.AddFpgaconf(0, /*sleep_s=*/1);
  auto inst = Open(Region("fpgaconf = \"" + slow + "\"\nprogram_timeout = \"1500ms\"\n"));
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  ASSERT_EQ(Ids(*(*inst)->devices()), (Strings{"dfl-port.0", "dfl-port.1"}));
  const auto start = std::chrono::steady_clock::now();
  Status st = harness::PreStart(**inst, {"dfl-port.0", "dfl-port.1"});
  EXPECT_FALSE(st.ok()) << "two one-second programmings fit in 1.5 s?";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1900ms);
  EXPECT_NE(st.message().find("dfl-port.1"), std::string::npos) << st.message();
}

// A failed programming holds the port back, but a later programming of the
// same port that succeeds (the kubelet's retry of the start) ends the hold
// at once instead of after failure_hold.
TEST_F(FpgaModuleTest, ASuccessfulProgrammingEndsAnEarlierHold) {
  OneCard();
  fx_.AddGbs(kInterface, kNlb3);
  std::string tool = fx_.AddFpgaconf(/*exit_code=*/3);
  auto inst = Open(Region("fpgaconf = \"" + tool + "\"\nfailure_hold = \"60s\"\n"));
  ASSERT_TRUE(inst.ok());
  ASSERT_FALSE(harness::PreStart(**inst, {"dfl-port.0"}).ok());
  harness::Rescan(**inst);
  ASSERT_FALSE(Find(*(*inst)->devices(), "dfl-port.0")->healthy);
  tool = fx_.AddFpgaconf();  // the card works again
  Status st = harness::PreStart(**inst, {"dfl-port.0"});
  ASSERT_TRUE(st.ok()) << st.message();
  harness::Rescan(**inst);
  const DeviceListPtr list = (*inst)->devices();  // keeps *d alive
  const Device* d = Find(*list, "dfl-port.0");
  EXPECT_TRUE(d->healthy) << d->health_reason;
}

// Reprogramming and power state changes raise no uevent: the module's state
// poll sees them (here a port throttled to AP6, and an accelerator loaded
// by hand), with no resync and no event.
TEST_F(FpgaModuleTest, ThePortStatePollSeesChangesNoEventTells) {
  OneCard();
  auto inst = Open(Region("state_poll = \"100ms\"\n"));
  ASSERT_TRUE(inst.ok());
  ASSERT_TRUE(Find(*(*inst)->devices(), "dfl-port.0")->healthy);
  fx_.SetPortAttr("dfl-port.0", "power_state", "0x6");
  auto eventually = [](auto f) {
    for (auto end = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < end;
         std::this_thread::sleep_for(20ms))
      if (f()) return true;
    return f();
  };
  EXPECT_TRUE(eventually([&] {
    const DeviceListPtr list = (*inst)->devices();  // keeps *d alive
    const Device* d = Find(*list, "dfl-port.0");
    return !d->healthy && d->health_reason == "power state AP6";
  }));
  fx_.SetPortAttr("dfl-port.0", "power_state", "0x0");
  EXPECT_TRUE(eventually([&] { return Find(*(*inst)->devices(), "dfl-port.0")->healthy; }));
  // An af resource: a port loaded with its accelerator by hand joins it.
  auto af = Open(std::string("afu_id = \"") + kNlb3 + "\"\nstate_poll = \"100ms\"\n", "x.io/af");
  ASSERT_TRUE(af.ok());
  inst->reset();
  harness::Rescan(**af);
  EXPECT_EQ(Ids(*(*af)->devices()), Strings{});
  fx_.SetAfu("dfl-port.1", kNlb3);
  EXPECT_TRUE(eventually([&] { return Ids(*(*af)->devices()) == Strings{"dfl-port.1"}; }));
}

// Any event of the module's subsystems rescans, whatever device it names.
TEST_F(FpgaModuleTest, EveryEventOfItsSubsystemsRescans) {
  OneCard();
  auto inst = Open(Region("state_poll = \"0s\"\n"));
  ASSERT_TRUE(inst.ok());
  fx_.SetPortAttr("dfl-port.0", "power_state", "0x6");
  udev::Event ev;
  ev.action = "change";
  ev.subsystem = "platform";
  ev.sysname = "serial8250";
  ev.syspath = "/sys/devices/platform/serial8250";
  const uint64_t before = (*inst)->scans();
  (*inst)->OnUdevEvents({ev});
  for (auto end = std::chrono::steady_clock::now() + 10s;
       (*inst)->scans() == before && std::chrono::steady_clock::now() < end;)
    std::this_thread::sleep_for(10ms);
  EXPECT_GT((*inst)->scans(), before);
  harness::Rescan(**inst);  // settles the worker
  EXPECT_FALSE(Find(*(*inst)->devices(), "dfl-port.0")->healthy);
}

// PreStart runs on the instance's slow lane (kConcurrentSlowCalls): while a
// port is being programmed, scans, Allocate and GetPreferredAllocation of
// the others go on, and finish before the programming does.
TEST_F(FpgaModuleTest, AllocateAndScansGoOnWhileAPortIsProgrammed) {
  OneCard();
  fx_.AddGbs(kInterface, kNlb3);
  const std::string slow = fx_.AddFpgaconf(0, /*sleep_s=*/2);
  auto inst = Open(Region("fpgaconf = \"" + slow + "\"\n"));
  ASSERT_TRUE(inst.ok());
  ASSERT_TRUE((*inst)->slow_lane());
  std::atomic<bool> programmed{false};
  Status st;
  std::thread start([&] {
    st = harness::PreStart(**inst, {"dfl-port.0"});
    programmed = true;
  });
  for (auto end = std::chrono::steady_clock::now() + 20s;
       fx_.FpgaconfLog().empty() && std::chrono::steady_clock::now() < end;)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(fx_.FpgaconfLog().size(), 1u);  // under way
  harness::Rescan(**inst);
  auto r = harness::Allocate(**inst, {"dfl-port.1"});
  EXPECT_TRUE(r.ok()) << r.status().message();
  auto p = harness::Prefer(**inst, {"dfl-port.1", "dfl-port.2"}, {}, 1);
  EXPECT_TRUE(p.ok()) << p.status().message();
  EXPECT_FALSE(programmed.load()) << "the worker waited for the programming";
  start.join();
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(fx_.Afu("dfl-port.0"), kNlb3);
}

// ---- release -----------------------------------------------------------------------------------

TEST_F(FpgaModuleTest, ReleaseWaitsWhilePortIsOpenThenResetsAndScrubs) {
  OneCard();
  fx_.AddGbs(kInterface, kIdleAfu);
  const std::string log = dir_.path() + "/command.env";
  const std::string cmd = dir_.path() + "/bin/scrub";
  devplug::testing::WriteFile(cmd, "#!/bin/sh\nenv | grep ^DEVPLUG_ | sort > '" + log + "'\n");
  chmod(cmd.c_str(), 0755);
  auto inst =
      Open(Region("program_with = \"ioctl\"\nrelease_actions = [\"command\", "
                  "\"program-idle\", \"clear-errors\", \"reset\"]\nidle_afu_id = \"" +
                  std::string(kIdleAfu) + "\"\nrelease_command = \"" + cmd + "\"\n"));
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  ASSERT_TRUE((*inst)->tracks_releases());
  fx_.SetAfu("dfl-port.2", kNlb3);
  fx_.SetPortAttr("dfl-port.2", "errors/errors", "0x11");
  const std::string errors = fx_.PortDir("dfl-port.2") + "/errors/errors";
  struct stat before {};
  stat(errors.c_str(), &before);
  fx_.SetBusy("dfl-port.2", true);
  auto [rc, why] = harness::Release(**inst, {"dfl-port.2"});
  EXPECT_EQ(rc, -EAGAIN) << why;
  EXPECT_TRUE(fx_.OpsLog().empty());
  fx_.SetBusy("dfl-port.2", false);
  std::this_thread::sleep_for(10ms);
  std::tie(rc, why) = harness::Release(**inst, {"dfl-port.2"});
  ASSERT_EQ(rc, 0) << why;
  // In order: reset, errors written back, idle image, command.
  ASSERT_EQ(fx_.OpsLog().size(), 2u);
  EXPECT_EQ(fx_.OpsLog()[0], "reset /dev/dfl-port.2");
  EXPECT_NE(fx_.OpsLog()[1].find("pr /dev/dfl-fme.0 port_id=2"), std::string::npos);
  struct stat after {};
  stat(errors.c_str(), &after);
  EXPECT_NE(before.st_mtim.tv_nsec + before.st_mtim.tv_sec * 1000000000L,
            after.st_mtim.tv_nsec + after.st_mtim.tv_sec * 1000000000L)
      << "errors not written";
  EXPECT_EQ(fx_.Afu("dfl-port.2"), kIdleAfu);
  EXPECT_EQ(devplug::testing::ReadFile(log),
            "DEVPLUG_AFU_ID=" + std::string(kIdleAfu) +
                "\nDEVPLUG_DEVICE_ID=dfl-port.2\n"
                "DEVPLUG_FME_DEV=/dev/dfl-fme.0\nDEVPLUG_INTERFACE_ID=" +
                kInterface +
                "\nDEVPLUG_PCI_ADDRESS=0000:5e:00.1\nDEVPLUG_PORT_DEV=/dev/dfl-port.2\n"
                "DEVPLUG_RESOURCE=" +
                kRes + "\n");
}

TEST_F(FpgaModuleTest, ReleaseFailuresSayWhy) {
  OneCard();
  const std::string cmd = dir_.path() + "/bin/fail";
  devplug::testing::WriteFile(cmd, "#!/bin/sh\necho 'scrub: card wedged'\nexit 4\n");
  chmod(cmd.c_str(), 0755);
  auto inst = Open(Region("release_actions = [\"command\"]\nrelease_command = \"" + cmd + "\"\n"));
  ASSERT_TRUE(inst.ok());
  auto [rc, why] = harness::Release(**inst, {"dfl-port.0"});
  EXPECT_LT(rc, 0);
  EXPECT_NE(why.find("dfl-port.0: command: " + cmd + " exited with status 4: scrub: card wedged"),
            std::string::npos)
      << why;
  fx_.RemoveNode("dfl-port.1");
  std::tie(rc, why) = harness::Release(**inst, {"dfl-port.1"});
  EXPECT_NE(why.find("in-use probe: /dev/dfl-port.1: No such file"), std::string::npos) << why;
  // Without release actions there is nothing to track.
  inst->reset();
  auto none = Open(Region(), "x.io/none");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE((*none)->tracks_releases());
}

// ---- configuration ---------------------------------------------------------------------------

TEST_F(FpgaModuleTest, BadConfigurationNamesTheKey) {
  const std::string real = devplug::testing::ModuleDir() + "/fpga-opae.so";
  struct Case {
    std::string body, want;
  };
  const std::string afu = std::string("afu_id = \"") + kNlb3 + "\"\n";
  const std::vector<Case> cases{
      {"afu_id = \"xyz\"\n", "module.toml:4: resource[0].afu_id: \"xyz\" is not a UUID"},
      {afu + "mode = \"fast\"\n", "mode: must be \"af\", \"region\" or \"region-devel\""},
      {afu + "driver = \"opae\"\n", "driver: must be"},
      {afu + "mode = \"region\"\nprogram_timeout = \"28s\"\n",
       "program_timeout: \"28s\" must be shorter than the agent's prestart_timeout (28s)"},
      {afu + "program_timeout = \"1m\"\n", "program_timeout: \"1m\" is over the maximum of 29s"},
      {afu + "failure_hold = \"5x\"\n", "failure_hold: \"5x\": unknown unit"},
      {afu + "release_actions = [\"reset\", \"wipe\"]\n", "unknown action \"wipe\""},
      {afu + "release_actions = [\"reset\", \"reset\"]\n", "\"reset\" is listed twice"},
      {afu + "release_actions = [\"program-idle\"]\n", "\"program-idle\" needs idle_afu_id"},
      {afu + "release_actions = [\"program-idle\"]\nidle_afu_id = \"" + kIdleAfu + "\"\n",
       "\"program-idle\" needs mode \"region\""},
      {afu + "state_poll = \"2h\"\n", "state_poll: \"2h\" is over the maximum of 1h"},
      {afu + "release_actions = [\"command\"]\n", "\"command\" needs release_command"},
      {afu + "release_command = \"scrub.sh\"\n", "release_command: must be an absolute path"},
      {afu + "addresses = [\"5e:00\"]\n", "addresses: \"5e:00\" is not a PCI address"},
      {afu + "ports = [\"port0\"]\n", "ports: \"port0\" is not a port name"},
      {afu + "interface_id = \"12\"\n", "interface_id: \"12\" is not a UUID"},
      {"mode = \"region\"\n", "afu_id"},
  };
  for (const std::string& module : {real, FixtureModule()}) {
    for (const Case& c : cases) {
      auto inst = harness::OpenFile(module, kRes, dir_.path(), c.body);
      ASSERT_FALSE(inst.ok()) << c.body;
      EXPECT_NE(inst.status().message().find(c.want), std::string::npos)
          << "got: " << inst.status().message() << "\nwanted: " << c.want;
    }
  }
  // The installed module loads and serves what the fixture holds.
  OneCard();
  auto inst = harness::OpenFile(real, kRes, dir_.path(), afu + "mode = \"region\"\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_EQ(Ids(*(*inst)->devices()).size(), 3u);
}

}  // namespace
}  // namespace devplug::modules
