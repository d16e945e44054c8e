// The cex module through the real loader and ModuleInstance, on AP bus
// fixture trees shaped as drivers/s390/crypto makes them. The module is its
// test build (cex-fixture.so): the same code, with the kernel's zcrypt
// create/destroy and mask parsing acted out on the fixture
// (modules/cex/emulator.h); the installed cex.so is checked to load and
// refuse bad configuration alike.
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "apbus.h"
#include "cex_fixture.h"
#include "emulator.h"
#include "fake_hooks.h"
#include "module_harness.h"
#include "test_util.h"
#include "zcrypt.h"

namespace devplug::modules {
namespace {

using devplug::cex::ApplyMaskWrite;
using devplug::cex::FormatMask;
using devplug::cex::Mask;
using devplug::testing::CexCardSpec;
using devplug::testing::CexFixture;
using devplug::testing::CexQueueSpec;
using harness::Find;
using harness::Ids;
using Strings = std::vector<std::string>;
using namespace std::chrono_literals;

constexpr char kRes[] = "cex.example.com/cca";

std::string FixtureModule() { return devplug::testing::FakeModuleDir() + "/cex-fixture.so"; }
std::string Zeros(size_t n) { return std::string(n, '0'); }

// ---- the kernel's facts, without a module -----------------------------------------------------

TEST(CexMaskTest, AbsoluteAndRelativeWritesAsTheKernelParsesThem) {
  Mask m;
  // Adapter 3 is bit 3 from the left: the first digit 0001.
  ASSERT_TRUE(ApplyMaskWrite("+3", m));
  EXPECT_EQ(FormatMask(m), "0x1" + Zeros(63));
  // Domain 6: 0000 0010.
  Mask d;
  ASSERT_TRUE(ApplyMaskWrite("+6\n", d));
  EXPECT_EQ(FormatMask(d), "0x02" + Zeros(62));
  // Relative writes keep the rest; ranges, hex and octal numbers.
  ASSERT_TRUE(ApplyMaskWrite("+0x10-0x13,-3,+010", m));
  EXPECT_EQ(FormatMask(m), "0x0080f" + Zeros(59));
  // Absolute: replaced, missing digits are 0, "0x" optional.
  ASSERT_TRUE(ApplyMaskWrite("8", m));
  EXPECT_EQ(FormatMask(m), "0x8" + Zeros(63));
  ASSERT_TRUE(ApplyMaskWrite("0x" + std::string(64, 'f') + "\n", m));
  EXPECT_TRUE(m.all());
  // EINVAL cases leave the mask as it was.
  const Mask before = m;
  for (const char* bad : {"+256", "+5-3", "+x",
                          "0x"
                          "1234z",
                          "+1;+2", "-"}) {
    EXPECT_FALSE(ApplyMaskWrite(bad, m)) << bad;
    EXPECT_EQ(m, before) << bad;
  }
  EXPECT_FALSE(ApplyMaskWrite("0x" + std::string(65, 'f'), m)) << "more digits than bits";
}

TEST(CexNamesTest, ApqnsAndNodeNames) {
  auto a = devplug::cex::ParseApqn("03.0006");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->adapter, 3);
  EXPECT_EQ(a->domain, 6);
  EXPECT_EQ(devplug::cex::ParseApqn("FF.00FE")->Name(), "ff.00fe");
  for (const char* bad : {"3.6", "03.006", "03:0006", "03.0100", "g3.0006", "03.0006 "})
    EXPECT_FALSE(devplug::cex::ParseApqn(bad)) << bad;
  const std::string node = devplug::cex::NodeName(*a, 2);
  EXPECT_EQ(node, "devplug-cex-03.0006-2");
  EXPECT_LE(devplug::cex::NodeName({255, 255}, 99).size(), devplug::cex::kMaxNodeName);
  devplug::cex::Apqn back;
  int share = -1;
  ASSERT_TRUE(devplug::cex::ParseNodeName(node, &back, &share));
  EXPECT_EQ(back, *a);
  EXPECT_EQ(share, 2);
  for (const char* foreign :
       {"zcrypt-apqn-3-6-0", "zcrypt_0", "devplug-cex-03.0006", "devplug-cex-03.0006-01"})
    EXPECT_FALSE(devplug::cex::ParseNodeName(foreign, &back, &share)) << foreign;
}

TEST(CexNamesTest, GenerationAndModeFromTheCardsAttributes) {
  using devplug::cex::Mode;
  EXPECT_EQ(devplug::cex::GenerationOf(14, "CEX8C"), 8);
  EXPECT_EQ(devplug::cex::GenerationOf(13, ""), 7);
  EXPECT_EQ(devplug::cex::GenerationOf(std::nullopt, "CEX9P"), 9);
  EXPECT_EQ(devplug::cex::GenerationOf(14, "CEX10A"), 10) << "a compatible hwtype, a newer type";
  EXPECT_EQ(devplug::cex::GenerationOf(std::nullopt, ""), 0);
  EXPECT_EQ(devplug::cex::ModeOf(0x92800000u, ""), Mode::kCca);
  EXPECT_EQ(devplug::cex::ModeOf(0x04000000u, "CEX8C"), Mode::kEp11) << "the bits win";
  EXPECT_EQ(devplug::cex::ModeOf(0x08000000u, ""), Mode::kAccel);
  EXPECT_EQ(devplug::cex::ModeOf(std::nullopt, "CEX7P"), Mode::kEp11);
}

// ---- the module -------------------------------------------------------------------------------

class CexModuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!devplug::testing::IsRoot()) GTEST_SKIP() << "zcrypt device nodes need mknod (root)";
  }
  StatusOr<std::unique_ptr<ModuleInstance>> Open(const std::string& body,
                                                 ModuleInstance::Options o = {},
                                                 const std::string& name = kRes, size_t index = 0) {
    o.pods = devplug::testing::PodsFrom([this](const std::string& id,
                                               std::optional<std::chrono::steady_clock::time_point>,
                                               PodHolder* holder) {
      auto it = pods_.find(id);
      if (pod_rc_ != 0) return pod_rc_;
      if (it == pods_.end()) return -ENOENT;
      *holder = {it->second, "pod-of-" + id, "uid-" + id, "main"};
      return 0;
    });
    return harness::OpenFile(FixtureModule(), name, dir_.path(), body, index, std::move(o));
  }
  // The emulator's log: lines starting with `verb` ("create", "destroy").
  Strings Ops(const std::string& verb) const {
    Strings out;
    std::istringstream in(devplug::testing::ReadFile(dir_.path() + "/zcrypt-ops.log"));
    for (std::string l; std::getline(in, l);)
      if (l.rfind(verb + " ", 0) == 0) out.push_back(l);
    return out;
  }
  std::string Mask(const std::string& node, const std::string& file) const {
    std::string v = devplug::testing::ReadFile(fx_.NodeDir(node) + "/" + file);
    while (!v.empty() && v.back() == '\n') v.pop_back();
    return v;
  }
  static void Event(ModuleInstance& inst, const std::string& action, const std::string& sysname) {
    udev::Event ev;
    ev.action = action;
    ev.subsystem = "ap";
    ev.sysname = sysname;
    ev.syspath = "/sys/devices/ap/" + sysname;
    inst.OnUdevEvents({ev});
    harness::Settle(inst);
  }

  devplug::testing::TempDir dir_;
  CexFixture fx_{dir_.path()};
  std::map<std::string, std::string> pods_;  // ID -> namespace
  int pod_rc_ = 0;
};

TEST_F(CexModuleTest, ListsQueuesBoundToCex4queueByTheirKernelNames) {
  fx_.AddCard({.adapter = 3, .queues = {{.domain = 6}, {.domain = 7}}});
  fx_.AddCard(
      {.adapter = 4, .type = "CEX8P", .functions = "0x04000000", .queues = {{.domain = 6}}});
  fx_.AddCard(
      {.adapter = 5, .type = "CEX8A", .functions = "0x08000000", .queues = {{.domain = 6}}});
  // cardff/ff.00fe: the upper bounds in hex.
  fx_.AddCard({.adapter = 0xff, .queues = {{.domain = 0xfe}}});
  auto inst = Open("");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_EQ(Ids(*(*inst)->devices(), true),
            (Strings{"03.0006", "03.0007", "04.0006", "05.0006", "ff.00fe"}));
  {  // What DRA publishes (ABI 1.9): the queue, and the card's type and mode.
    using T = DeviceAttribute::Type;
    const DeviceListPtr list = (*inst)->devices();
    EXPECT_EQ(Find(*list, "04.0006")->attributes,
              (std::vector<DeviceAttribute>{{"adapter", T::kInt, "", 4},
                                            {"domain", T::kInt, "", 6},
                                            {"type", T::kString, "CEX8P", 0},
                                            {"mode", T::kString, "ep11", 0}}));
  }
  // mode is enforced from the card's functions.
  inst->reset();
  auto ep11 = Open("mode = \"ep11\"\n", {}, "cex.example.com/ep11", 1);
  ASSERT_TRUE(ep11.ok()) << ep11.status().message();
  EXPECT_EQ(Ids(*(*ep11)->devices()), Strings{"04.0006"});
}

TEST_F(CexModuleTest, AVfioApQueueOrMissingAttributesNeverBreakTheScan) {
  fx_.AddCard({.adapter = 3,
               .queues = {{.domain = 6},
                          {.domain = 7, .driver = "vfio_ap"},  // a guest's: no online file
                          {.domain = 8, .driver = ""}}});      // bound to nothing
  fx_.AddCard({.adapter = 6, .type = "", .bound = false});     // no cex4card: no type, online
  // Entries the AP root holds besides cards.
  devplug::testing::WriteFile(dir_.path() + "/sys/devices/ap/card03/03.0006/../uevent", "");
  fx_.SetQueue(3, 6, "config", "");  // an older kernel without config/chkstop
  fx_.SetQueue(3, 6, "chkstop", "");
  auto inst = Open("");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_EQ(Ids(*(*inst)->devices()), Strings{"03.0006"});
  EXPECT_TRUE(Find(*(*inst)->devices(), "03.0006")->healthy);
  // The queue leaves for vfio_ap: it leaves the list, the others stay.
  fx_.AddCard({.adapter = 7, .queues = {{.domain = 6}}});
  fx_.Bind(3, 6, "vfio_ap");
  // A queue bound after the driver's folder was listed: its own link counts.
  std::filesystem::remove(dir_.path() + "/sys/bus/ap/drivers/cex4queue/07.0006");
  fx_.SetQueue(3, 6, "online", "");
  Event(**inst, "unbind", "03.0006");
  EXPECT_EQ(Ids(*(*inst)->devices()), Strings{"07.0006"});
}

TEST_F(CexModuleTest, EveryHealthReason) {
  for (int a = 1; a <= 5; ++a) fx_.AddCard({.adapter = a, .queues = {{.domain = 6}}});
  fx_.SetQueue(1, 6, "online", "0");
  fx_.SetCard(2, "online", "0");
  fx_.SetCard(3, "config", "0");
  fx_.SetCard(3, "online", "0");  // the kernel's card online includes config
  fx_.SetQueue(4, 6, "config", "0");
  fx_.SetQueue(4, 6, "online", "0");  // so does the queue's
  fx_.SetCard(5, "chkstop", "1");
  auto inst = Open("");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  const auto list = (*inst)->devices();
  const std::map<std::string, std::string> want{{"01.0006", "queue offline"},
                                                {"02.0006", "card offline"},
                                                {"03.0006", "deconfigured"},
                                                {"04.0006", "deconfigured"},
                                                {"05.0006", "checkstopped"}};
  for (const auto& [id, reason] : want) {
    const Device* d = Find(*list, id);
    ASSERT_NE(d, nullptr) << id;
    EXPECT_FALSE(d->healthy) << id;
    EXPECT_EQ(d->health_reason, reason) << id;
  }
  // A kernel without multi-node support: nothing can be handed out safely.
  std::filesystem::remove(dir_.path() + "/sys/class/zcrypt/create");
  fx_.SetQueue(1, 6, "online", "1");
  Event(**inst, "change", "01.0006");
  EXPECT_EQ(Find(*(*inst)->devices(), "01.0006")->health_reason, "no zcrypt multi-node support");
}

TEST_F(CexModuleTest, AQueueChangeReachesTheListByItsUevent) {
  fx_.AddCard({.adapter = 3});
  auto inst = Open("poll_interval = \"0s\"\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  fx_.SetQueue(3, 6, "online", "0");
  Event(**inst, "change", "03.0006");
  EXPECT_EQ(Find(*(*inst)->devices(), "03.0006")->health_reason, "queue offline");
  // An event of our own zcrypt nodes changes nothing: no rescan.
  const uint64_t scans = (*inst)->scans();
  udev::Event ev;
  ev.action = "add";
  ev.subsystem = "zcrypt";
  ev.sysname = "devplug-cex-03.0006-0";
  (*inst)->OnUdevEvents({ev});
  harness::Settle(**inst);
  EXPECT_EQ((*inst)->scans(), scans);
}

TEST_F(CexModuleTest, ACheckstopWithoutAUeventIsFoundByThePoll) {
  fx_.AddCard({.adapter = 3});
  auto inst = Open("poll_interval = \"50ms\"\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  ASSERT_TRUE(Find(*(*inst)->devices(), "03.0006")->healthy);
  fx_.SetCard(3, "chkstop", "1");  // ap_bus.c only logs this
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (Find(*(*inst)->devices(), "03.0006")->healthy &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(Find(*(*inst)->devices(), "03.0006")->health_reason, "checkstopped");
}

TEST_F(CexModuleTest, FiltersByGenerationApqnsAndMachine) {
  fx_.AddCard({.adapter = 3, .type = "CEX7C", .hwtype = "13"});
  fx_.AddCard({.adapter = 4, .queues = {{.domain = 6}, {.domain = 9}}});
  auto gen = Open("min_generation = 8\n");
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(Ids(*(*gen)->devices()), (Strings{"04.0006", "04.0009"}));
  gen->reset();
  auto listed = Open("apqns = [\"04.0009\", \"03.0006\", \"0a.0001\"]\n");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(Ids(*(*listed)->devices()), (Strings{"03.0006", "04.0009"}))
      << "listed before it exists (0a.0001) is fine";
  listed->reset();
  auto here = Open("machine_id = \"IBM-3931-00000000000ABCDE\"\n");
  ASSERT_TRUE(here.ok());
  EXPECT_EQ(Ids(*(*here)->devices()).size(), 3u);
  here->reset();
  auto elsewhere = Open("machine_id = \"IBM-3931-00000000000FFFFF\"\n");
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_TRUE((*elsewhere)->devices()->empty());
}

TEST_F(CexModuleTest, AllocateWritesNothingAndNamesTheContainersNode) {
  fx_.AddCard({.adapter = 3});
  fx_.AddCard({.adapter = 4});
  fx_.AddCard({.adapter = 5, .queues = {{.domain = 7}}});
  auto inst = Open("shares = 2\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_EQ(Ids(*(*inst)->devices()), (Strings{"03.0006::0", "03.0006::1", "04.0006::0",
                                               "04.0006::1", "05.0007::0", "05.0007::1"}));
  EXPECT_EQ((*inst)->devices()->at(3).share_of, "04.0006");  // one queue for DRA (ABI 1.10)
  auto r = harness::Allocate(**inst, {"04.0006::1", "03.0006::1"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->device_nodes.size(), 1u);
  EXPECT_EQ(r->device_nodes[0].host_path, "/dev/devplug-cex-03.0006-1");
  EXPECT_EQ(r->device_nodes[0].container_path, "/dev/z90crypt");
  const std::map<std::string, std::string> env(r->envs.begin(), r->envs.end());
  EXPECT_EQ(env.at("CEX_APQNS_CEX_EXAMPLE_COM_CCA"), "03.0006,04.0006");
  EXPECT_EQ(env.at("CSU_DEFAULT_DOMAIN"), "6");
  EXPECT_TRUE(Ops("create").empty()) << "Allocate made a node";
  // Not a rectangle: 03.0006 and 05.0007 would open 03.0007 and 05.0006.
  auto bad = harness::Allocate(**inst, {"03.0006::0", "05.0007::0"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rectangle"), std::string::npos) << bad.status().message();
}

TEST_F(CexModuleTest, PreferredAllocationSpreadsOverAdaptersInsideOneDomain) {
  for (int a = 3; a <= 5; ++a)
    fx_.AddCard({.adapter = a, .queues = {{.domain = 6}, {.domain = 7}}});
  auto inst = Open("shares = 2\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  Strings all = Ids(*(*inst)->devices());
  auto without = [&](Strings used) {
    Strings out;
    for (const auto& id : all)
      if (std::find(used.begin(), used.end(), id) == used.end()) out.push_back(id);
    return out;
  };
  // Adapters 03 and 04 each have one ID in use: 05 is picked.
  auto one = harness::Prefer(**inst, without({"03.0006::0", "04.0007::0"}), {}, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, Strings{"05.0006::0"});
  // Three in one domain, on three adapters; must_include sets the domain.
  auto three = harness::Prefer(**inst, all, {"04.0007::1"}, 3);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(*three, (Strings{"04.0007::1", "03.0007::0", "05.0007::0"}));
  auto r = harness::Allocate(**inst, *three);
  EXPECT_TRUE(r.ok()) << "the preferred set is a rectangle: " << r.status().message();
}

TEST_F(CexModuleTest, PreStartMakesTheNodeWithExactlyItsMasks) {
  fx_.AddCard({.adapter = 3});
  fx_.AddCard({.adapter = 4});
  auto inst = Open("ioctls = [\"ZSECSENDCPRB\", \"ZCRYPT_DEVICE_STATUS\", \"5\"]\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  ASSERT_TRUE(harness::PreStart(**inst, {"04.0006", "03.0006"}).ok());
  const std::string node = "devplug-cex-03.0006-0";
  EXPECT_EQ(Mask(node, "apmask"), "0x18" + Zeros(62)) << "adapters 3 and 4";
  EXPECT_EQ(Mask(node, "aqmask"), "0x02" + Zeros(62)) << "domain 6";
  EXPECT_EQ(Mask(node, "admask"), "0x" + Zeros(64)) << "no control domains unless asked";
  // 0x05, 0x5f, 0x81
  EXPECT_EQ(Mask(node, "ioctlmask"), "0x04" + Zeros(21) + "1" + Zeros(8) + "4" + Zeros(31));
  struct stat st {};
  ASSERT_EQ(stat((dir_.path() + "/dev/" + node).c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0666u);
  EXPECT_EQ(major(st.st_rdev), 250u);
  EXPECT_EQ(Ops("create"), Strings{"create " + node + " 0"});
}

TEST_F(CexModuleTest, AContainerRestartReusesTheNodeAndRightsItsMasks) {
  fx_.AddCard({.adapter = 3});
  auto inst = Open("control_domains = true\nnode_mode = \"0660\"\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  ASSERT_TRUE(harness::PreStart(**inst, {"03.0006"}).ok());
  const std::string node = "devplug-cex-03.0006-0";
  EXPECT_EQ(Mask(node, "admask"), "0x02" + Zeros(62));
  const std::string dev = devplug::testing::ReadFile(fx_.NodeDir(node) + "/dev");
  // Someone widened the node meanwhile; the container starts again.
  ASSERT_EQ(devplug::cex::EmulatorOps().WriteMask(fx_.NodeDir(node) + "/aqmask", "+0-255"), 0);
  ASSERT_TRUE(harness::PreStart(**inst, {"03.0006"}).ok());
  EXPECT_EQ(Mask(node, "aqmask"), "0x02" + Zeros(62));
  EXPECT_EQ(devplug::testing::ReadFile(fx_.NodeDir(node) + "/dev"), dev) << "not made anew";
  // The second create met EEXIST, as the kernel answers: nothing was
  // destroyed or made twice.
  EXPECT_EQ(Ops("create"), (Strings{"create " + node + " 0", "create " + node + " -17"}));
  EXPECT_TRUE(Ops("destroy").empty());
  struct stat st {};
  ASSERT_EQ(stat((dir_.path() + "/dev/" + node).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
}

TEST_F(CexModuleTest, AKernelWithoutAdmaskIsServed) {
  fx_.AddCard({.adapter = 3});
  devplug::testing::WriteFile(dir_.path() + "/zcrypt-emulator/no-admask", "");
  auto inst = Open("");
  ASSERT_TRUE(inst.ok());
  ASSERT_TRUE(harness::PreStart(**inst, {"03.0006"}).ok());
  EXPECT_FALSE(devplug::testing::FileExists(fx_.NodeDir("devplug-cex-03.0006-0") + "/admask"));
}

TEST_F(CexModuleTest, TheKernelsNodeLimitIsARetryNotAFinalError) {
  fx_.AddCard({.adapter = 3});
  for (int i = 0; i < 256; ++i) {
    const std::string name = "zcrypt_" + std::to_string(i);
    fx_.ForeignNode(name);
    devplug::testing::WriteFile(fx_.NodeDir(name) + "/dev", "250:" + std::to_string(i) + "\n");
  }
  auto inst = Open("");
  ASSERT_TRUE(inst.ok());
  Status st = harness::PreStart(**inst, {"03.0006"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("exhausted"), std::string::npos) << st.message();
  EXPECT_EQ(Ops("create"), Strings{"create devplug-cex-03.0006-0 -28"});
  // A broken class: create is not a file the kernel would give.
  std::filesystem::remove(fx_.NodeDir("zcrypt_0"), *std::make_unique<std::error_code>());
  std::filesystem::remove_all(fx_.NodeDir("zcrypt_0"));
  std::filesystem::remove(dir_.path() + "/sys/class/zcrypt/create");
  std::filesystem::create_directories(dir_.path() + "/sys/class/zcrypt/create");
  st = harness::PreStart(**inst, {"03.0006"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Is a directory"), std::string::npos) << st.message();
}

TEST_F(CexModuleTest, ANodeDevtmpfsNeverMakesFailsThePreStartInTime) {
  fx_.AddCard({.adapter = 3});
  devplug::testing::WriteFile(dir_.path() + "/zcrypt-emulator/no-dev", "");
  auto inst = Open("");
  ASSERT_TRUE(inst.ok());
  const auto t0 = std::chrono::steady_clock::now();
  Status st = harness::PreStart(**inst, {"03.0006"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("did not appear"), std::string::npos) << st.message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
}

TEST_F(CexModuleTest, APodOutsideTheNamespacesIsRefusedBeforeItStarts) {
  fx_.AddCard({.adapter = 3, .queues = {{.domain = 6}, {.domain = 7}}});
  auto inst = Open("namespaces = [\"team-a\", \"hsm\"]\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  pods_["03.0006"] = "team-a";
  pods_["03.0007"] = "team-b";
  EXPECT_TRUE(harness::PreStart(**inst, {"03.0006"}).ok());
  Status st = harness::PreStart(**inst, {"03.0007"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(
      st.message().find("pod team-b/pod-of-03.0007 is not allowed to use " + std::string(kRes)),
      std::string::npos)
      << st.message();
  EXPECT_FALSE(devplug::testing::FileExists(fx_.NodeDir("devplug-cex-03.0007-0")))
      << "a refused pod got a node";
  // Fail closed: nobody found, or the kubelet cannot be asked.
  pods_.erase("03.0007");
  EXPECT_FALSE(harness::PreStart(**inst, {"03.0007"}).ok());
  pod_rc_ = -EAGAIN;
  EXPECT_FALSE(harness::PreStart(**inst, {"03.0006"}).ok());
}

TEST_F(CexModuleTest, ReleaseDestroysTheNodeAlsoForAnInstanceMadeByAReload) {
  fx_.AddCard({.adapter = 3});
  auto inst = Open("shares = 2\n");
  ASSERT_TRUE(inst.ok());
  ASSERT_TRUE(harness::PreStart(**inst, {"03.0006::1"}).ok());
  pods_["03.0006::1"] = "default";  // still held while the instance is replaced
  inst->reset();
  auto again = Open("shares = 2\n");
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(devplug::testing::FileExists(fx_.NodeDir("devplug-cex-03.0006-1")))
      << "a held node was swept";
  EXPECT_EQ(harness::Release(**again, {"03.0006::1"}).first, 0);
  EXPECT_FALSE(devplug::testing::FileExists(fx_.NodeDir("devplug-cex-03.0006-1")));
  EXPECT_FALSE(devplug::testing::FileExists(dir_.path() + "/dev/devplug-cex-03.0006-1"));
  // Again, or for an ID whose node was never made: released.
  EXPECT_EQ(harness::Release(**again, {"03.0006::1", "03.0006::0"}).first, 0);
}

// A pod started under another `shares` holds its node under that time's ID
// form: the start-up sweep asks for every form before it destroys a node
// (review D12: "destroyed devplug-cex-03.0006-1: no pod holds 03.0006").
TEST_F(CexModuleTest, AtStartANodeHeldUnderAnotherSharesFormStays) {
  fx_.AddCard({.adapter = 3, .queues = {{.domain = 6}, {.domain = 7}}});
  for (const char* n : {"devplug-cex-03.0006-1", "devplug-cex-03.0007-0"}) fx_.ForeignNode(n);
  pods_["03.0006::1"] = "default";  // started when shares was 2
  pods_["03.0007"] = "default";     // started when shares was 1
  auto inst = Open("");             // shares = 1 now
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  EXPECT_TRUE(devplug::testing::FileExists(fx_.NodeDir("devplug-cex-03.0006-1")));
  EXPECT_TRUE(devplug::testing::FileExists(fx_.NodeDir("devplug-cex-03.0007-0")));
  inst->reset();
  pods_.erase("03.0006::1");  // that pod is gone
  auto shared = Open("shares = 2\n");
  ASSERT_TRUE(shared.ok()) << shared.status().message();
  EXPECT_TRUE(devplug::testing::FileExists(fx_.NodeDir("devplug-cex-03.0007-0")));
  EXPECT_FALSE(devplug::testing::FileExists(fx_.NodeDir("devplug-cex-03.0006-1")))
      << "held by nobody now";
}

TEST_F(CexModuleTest, AtStartOurNodesNoPodHoldsAreDestroyedAndNoOthers) {
  fx_.AddCard({.adapter = 3, .queues = {{.domain = 6}, {.domain = 7}}});
  for (const char* n : {"devplug-cex-03.0006-0", "devplug-cex-03.0007-0", "devplug-cex-03.0009-0",
                        "devplug-cex-03.0006-1", "zcrypt-apqn-3-6-0", "zcrypt_0"})
    fx_.ForeignNode(n);
  pods_["03.0007"] = "default";  // a container may restart on it
  auto inst = Open("");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  auto exists = [&](const char* n) { return devplug::testing::FileExists(fx_.NodeDir(n)); };
  EXPECT_FALSE(exists("devplug-cex-03.0006-0")) << "free at start";
  EXPECT_FALSE(exists("devplug-cex-03.0009-0")) << "its APQN is gone";
  EXPECT_FALSE(exists("devplug-cex-03.0006-1")) << "a share this resource no longer has";
  EXPECT_TRUE(exists("devplug-cex-03.0007-0")) << "held by a pod";
  EXPECT_TRUE(exists("zcrypt-apqn-3-6-0")) << "the vendor plugin's";
  EXPECT_TRUE(exists("zcrypt_0")) << "zcryptctl's";
}

TEST_F(CexModuleTest, ConfigurationMistakesNameTheKey) {
  fx_.AddCard({.adapter = 3});
  struct Case {
    std::string body, key;
  };
  const std::vector<Case> cases{
      {"apqns = [\"3.6\"]\n", "apqns"},
      {"apqns = [\"03.0006\", \"03.0006\"]\n", "apqns"},
      {"mode = \"hsm\"\n", "mode"},
      {"min_generation = 3\n", "min_generation"},
      {"shares = 0\n", "shares"},
      {"apqns = [\"03.0006\", \"04.0006\", \"05.0006\"]\nshares = 100\n", "shares"},
      {"ioctls = [\"ZFOO\"]\n", "ioctls"},
      {"node_mode = \"rw\"\n", "node_mode"},
      {"namespaces = [\"Team_A\"]\n", "namespaces"},
      {"machine_id = \"IBM\"\n", "machine_id"},
      {"poll_interval = \"soon\"\n", "poll_interval"},
  };
  for (const std::string& module : {FixtureModule(), devplug::testing::ModuleDir() + "/cex.so"})
    for (const Case& c : cases) {
      auto inst = harness::OpenFile(module, kRes, dir_.path(), c.body);
      ASSERT_FALSE(inst.ok()) << c.body;
      EXPECT_NE(inst.status().message().find(std::string(harness::kFile) + ":"), std::string::npos)
          << inst.status().message();
      EXPECT_NE(inst.status().message().find(c.key), std::string::npos)
          << c.key << ": " << inst.status().message();
    }
}

TEST_F(CexModuleTest, AnApqnInTwoResourcesAndTooManyNodesAreRefused) {
  fx_.AddCard({.adapter = 3});
  auto a = Open("apqns = [\"03.0006\", \"03.0007\"]\nshares = 100\n", {}, "cex.example.com/a", 0);
  ASSERT_TRUE(a.ok()) << a.status().message();
  auto b = Open("apqns = [\"03.0007\"]\n", {}, "cex.example.com/b", 1);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("03.0007 is also listed by resource \"cex.example.com/a\""),
            std::string::npos)
      << b.status().message();
  auto c = Open("apqns = [\"04.0006\"]\nshares = 57\n", {}, "cex.example.com/c", 2);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("257 nodes"), std::string::npos) << c.status().message();
  // The same resource again (a reload replacing it) is not a conflict.
  auto a2 = Open("apqns = [\"03.0006\", \"03.0007\"]\nshares = 100\n", {}, "cex.example.com/a", 0);
  EXPECT_TRUE(a2.ok()) << a2.status().message();
}

TEST_F(CexModuleTest, TwoResourcesSelectingOneQueueDoNotBothServeIt) {
  fx_.AddCard({.adapter = 3, .queues = {{.domain = 6}, {.domain = 7}}});
  auto first = Open("", {}, "cex.example.com/all", 0);
  auto second = Open("mode = \"cca\"\n", {}, "cex.example.com/cca", 1);
  ASSERT_TRUE(first.ok() && second.ok());
  harness::Rescan(**first);
  harness::Rescan(**second);
  EXPECT_EQ(Ids(*(*first)->devices()), (Strings{"03.0006", "03.0007"}));
  EXPECT_TRUE((*second)->devices()->empty());
}

}  // namespace
}  // namespace devplug::modules
