// The solarflare module through the real ABI on a fixture node shaped like
// an Onload host: the onload driver and its three nodes, two SFC NICs with
// sfc_resource bound, an X3 (xilinx_efct) NIC, an Intel NIC and a pod's
// veth beside them, and the Onload libraries.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "devplug/common/pci.h"
#include "fake_hooks.h"
#include "module_harness.h"
#include "onload_fixture.h"
#include "test_util.h"

namespace devplug::modules {
namespace {

using devplug::testing::NicSpec;
using devplug::testing::OnloadFixture;
using devplug::testing::TempDir;
using harness::Find;
using harness::Ids;
using Strings = std::vector<std::string>;

constexpr char kShared[] = "amd.com/onload";
constexpr char kNic[] = "amd.com/onload-nic";
constexpr char kA[] = "0000:3b:00.0", kB[] = "0000:3b:00.1", kX3[] = "0000:5e:00.0",
               kIntel[] = "0000:af:00.0";

Strings Nodes(const Recipe& r) {
  Strings out;
  for (const auto& n : r.device_nodes)
    out.push_back(n.host_path + ">" + n.container_path + ":" + n.permissions);
  return out;
}

Strings Mounts(const Recipe& r) {
  Strings out;
  for (const auto& m : r.mounts)
    out.push_back(m.host_path + ">" + m.container_path + (m.read_only ? ":ro" : ":rw"));
  return out;
}

std::map<std::string, std::string> Envs(const Recipe& r) {
  return std::map<std::string, std::string>(r.envs.begin(), r.envs.end());
}

class SolarflareModuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!devplug::testing::IsRoot()) GTEST_SKIP() << "Onload fixtures need mknod (root)";
    ASSERT_TRUE(fx_.Install());
    fx_.AddNic({.address = kA, .ifname = "ens1f0np0", .numa_node = 0, .onload_index = 0});
    fx_.AddNic({.address = kB, .ifname = "ens1f1np1", .numa_node = 0, .onload_index = 1});
    fx_.AddNic({.address = kX3,
                .ifname = "ens2",
                .driver = "xilinx_efct",
                .vendor = 0x10ee,
                .device = 0x5084,
                .numa_node = 1,
                .onload_index = 2});
    fx_.AddNic({.address = kIntel,
                .ifname = "ens3f0",
                .driver = "ice",
                .vendor = 0x8086,
                .device = 0x1592,
                .numa_node = 1,
                .onload_index = -1});
    fx_.AddVirtual("veth1a2b3c");
  }

  std::unique_ptr<ModuleInstance> Open(const std::string& body, const char* name = kShared,
                                       ModuleInstance::Options o = {}) {
    auto inst = harness::OpenFile(devplug::testing::ModuleDir() + "/solarflare.so", name,
                                  root_.path(), body, 0, std::move(o));
    EXPECT_TRUE(inst.ok()) << inst.status().message();
    return inst.ok() ? std::move(inst).value() : nullptr;
  }
  std::string Reason(ModuleInstance& inst, const std::string& id) {
    const DeviceListPtr list = inst.devices();  // keeps *d alive
    const Device* d = Find(*list, id);
    return d == nullptr ? "(no device " + id + ")" : d->healthy ? "" : d->health_reason;
  }

  TempDir root_;
  OnloadFixture fx_{root_.path()};
};

TEST_F(SolarflareModuleTest, SharedGivesEveryPodTheNodesLibrariesAndPreload) {
  auto inst = Open("shares = 4\n");
  ASSERT_TRUE(inst);
  DeviceListPtr list = inst->devices();
  EXPECT_EQ(Ids(*list, true), (Strings{"onload-0", "onload-1", "onload-2", "onload-3"}));
  // The NICs sit on nodes 0 and 1: the kubelet hears both (ABI 1.6).
  EXPECT_EQ(list->front().Nodes(), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(list->front().numa_node, 0);
  EXPECT_FALSE(inst->runs_pre_start());  // no attach_command: no PreStartContainer

  auto r = harness::Allocate(*inst, {"onload-2"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Nodes(*r),
            (Strings{"/dev/onload>/dev/onload:rw", "/dev/onload_epoll>/dev/onload_epoll:rw",
                     "/dev/sfc_char>/dev/sfc_char:rw"}));
  // Every file of the two libraries, links included, each by its own name;
  // libciul and the static archive stay out.
  const std::string c = "/opt/onload/usr/lib64/";
  EXPECT_EQ(Mounts(*r),
            (Strings{"/usr/lib64/libonload.so>" + c + "libonload.so:ro",
                     "/usr/lib64/libonload.so.1>" + c + "libonload.so.1:ro",
                     "/usr/lib64/libonload.so.1.0.0>" + c + "libonload.so.1.0.0:ro",
                     "/usr/lib64/libonload_ext.so>" + c + "libonload_ext.so:ro",
                     "/usr/lib64/libonload_ext.so.1>" + c + "libonload_ext.so.1:ro",
                     "/usr/lib64/libonload_ext.so.1.0.0>" + c + "libonload_ext.so.1.0.0:ro"}));
  EXPECT_EQ(Envs(*r), (std::map<std::string, std::string>{{"LD_PRELOAD", c + "libonload.so"}}));

  // One NUMA node when every selected NIC is on it.
  auto sfc = Open("shares = 2\ndrivers = [\"sfc\"]\n");
  ASSERT_TRUE(sfc);
  EXPECT_EQ(sfc->devices()->front().numa_node, 0);
  // The default shares.
  auto many = Open("");
  ASSERT_TRUE(many);
  EXPECT_EQ(Ids(*many->devices(), true).size(), 100u);
}

TEST_F(SolarflareModuleTest, NicModeOneDevicePerNicWithItsInterfaces) {
  auto inst = Open("mode = \"nic\"\n", kNic);
  ASSERT_TRUE(inst);
  DeviceListPtr list = inst->devices();
  // Solarflare and Xilinx functions only: not the Intel NIC, not the veth.
  EXPECT_EQ(Ids(*list, true), (Strings{kA, kB, kX3}));
  EXPECT_EQ(Find(*list, kA)->numa_node, 0);
  EXPECT_EQ(Find(*list, kX3)->numa_node, 1);
  EXPECT_EQ(Find(*list, kX3)->pci_address, kX3);  // for DRA (ABI 1.9)

  auto r = harness::Allocate(*inst, {kB, kA});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Nodes(*r).size(), 3u);
  auto envs = Envs(*r);
  EXPECT_EQ(envs["SFC_RESOURCE_AMD_COM_ONLOAD_NIC"], "ens1f1np1,ens1f0np0");
  EXPECT_EQ(envs["LD_PRELOAD"], "/opt/onload/usr/lib64/libonload.so");

  auto two = harness::Prefer(*inst, {kA, kB, kX3}, {kX3}, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->front(), kX3);
  EXPECT_EQ(two->size(), 2u);
  auto pair = harness::Prefer(*inst, {kA, kX3, kB}, {}, 2);
  ASSERT_TRUE(pair.ok());
  EXPECT_EQ(*pair, (Strings{kA, kB}));  // both on node 0

  // A NIC that leaves sysfs leaves the list; it comes back when it returns.
  fx_.RemoveNic(kB, "ens1f1np1");
  harness::Rescan(*inst);
  EXPECT_EQ(Ids(*inst->devices()), (Strings{kA, kX3}));
  fx_.AddNic({.address = kB, .ifname = "ens1f1np1", .numa_node = 0, .onload_index = 1});
  harness::Rescan(*inst);
  EXPECT_EQ(Ids(*inst->devices(), true), (Strings{kA, kB, kX3}));
}

TEST_F(SolarflareModuleTest, Selectors) {
  auto ids = [&](const std::string& body) {
    auto inst = Open("mode = \"nic\"\n" + body, kNic);
    return inst ? Ids(*inst->devices()) : Strings{"(failed)"};
  };
  EXPECT_EQ(ids("drivers = [\"xilinx_efct\"]\n"), Strings{kX3});
  EXPECT_EQ(ids("vendors = [\"0x1924\"]\n"), (Strings{kA, kB}));
  EXPECT_EQ(ids("ifnames = [\"ens1f1np1\", \"ens9\"]\n"), Strings{kB});
  EXPECT_EQ(ids("addresses = [\"5e:00.0\"]\n"), Strings{kX3});
  // An operator may take any driver and vendor.
  EXPECT_EQ(ids("drivers = [\"ice\"]\nvendors = [\"8086\"]\n"), Strings{kIntel});
  // Virtual interfaces are never NICs, whatever the selectors say.
  EXPECT_EQ(ids("ifnames = [\"veth1a2b3c\"]\n"), Strings{});
}

TEST_F(SolarflareModuleTest, UnloadingOnloadFlipsHealthAndLoadingBringsItBack) {
  auto shared = Open("shares = 2\n");
  auto nic = Open("mode = \"nic\"\n", kNic);
  ASSERT_TRUE(shared && nic);
  fx_.Unload();
  harness::Rescan(*shared);
  harness::Rescan(*nic);
  EXPECT_EQ(Ids(*shared->devices(), true), Strings{});
  EXPECT_EQ(shared->devices()->size(), 2u);  // the shares stay, Unhealthy
  EXPECT_EQ(Reason(*shared, "onload-0"), "onload driver not loaded (/sys/module/onload missing)");
  EXPECT_EQ(Ids(*nic->devices()), (Strings{kA, kB, kX3}));
  EXPECT_EQ(Reason(*nic, kA), "onload driver not loaded (/sys/module/onload missing)");
  EXPECT_EQ(harness::Allocate(*shared, {"onload-0"}).status().code(), StatusCode::kInvalidArgument);

  ASSERT_TRUE(fx_.Load());
  harness::Rescan(*shared);
  harness::Rescan(*nic);
  EXPECT_EQ(Ids(*shared->devices(), true).size(), 2u);
  EXPECT_EQ(Ids(*nic->devices(), true), (Strings{kA, kB, kX3}));
}

TEST_F(SolarflareModuleTest, NodeChecks) {
  auto inst = Open("shares = 1\noptional_devices = [\"/dev/onload_cplane\"]\n");
  ASSERT_TRUE(inst);
  EXPECT_EQ(Nodes(*harness::Allocate(*inst, {"onload-0"})).size(), 3u);  // optional one absent
  ASSERT_TRUE(devplug::testing::MakeCharDevice(root_ / "dev/onload_cplane", 247, 0));
  harness::Rescan(*inst);
  EXPECT_EQ(Nodes(*harness::Allocate(*inst, {"onload-0"})).back(),
            "/dev/onload_cplane>/dev/onload_cplane:rw");

  // Every `devices` entry must be a character device.
  std::filesystem::remove(root_ / "dev/sfc_char");
  devplug::testing::WriteFile(root_ / "dev/sfc_char", "");
  harness::Rescan(*inst);
  EXPECT_EQ(Reason(*inst, "onload-0"), "/dev/sfc_char missing");
  ASSERT_TRUE(std::filesystem::remove(root_ / "dev/sfc_char"));
  ASSERT_TRUE(devplug::testing::MakeCharDevice(root_ / "dev/sfc_char", 244, 0));

  // The control-plane server: the default path, a configured one, the
  // operator's crictl layout, and the check turned off.
  std::filesystem::remove(root_ / "sbin/onload_cp_server");
  harness::Rescan(*inst);
  EXPECT_EQ(Reason(*inst, "onload-0"), "control-plane server /sbin/onload_cp_server missing");
  fx_.SetCplanePath("/opt/onload/sbin/onload_cp_server");
  harness::Rescan(*inst);
  EXPECT_EQ(Reason(*inst, "onload-0"),
            "control-plane server /opt/onload/sbin/onload_cp_server missing");
  devplug::testing::WriteFile(root_ / "opt/onload/sbin/onload_cp_server", "");
  harness::Rescan(*inst);
  EXPECT_EQ(Reason(*inst, "onload-0"), "");
  fx_.SetCplanePath("/usr/local/bin/crictl");
  harness::Rescan(*inst);
  EXPECT_EQ(Reason(*inst, "onload-0"), "");
  fx_.SetCplanePath("");
  auto unchecked = Open("shares = 1\ncheck_cplane = false\n");
  ASSERT_TRUE(unchecked);
  EXPECT_EQ(Reason(*unchecked, "onload-0"), "");
  harness::Rescan(*inst);
  EXPECT_EQ(Reason(*inst, "onload-0"), "control-plane server /sbin/onload_cp_server missing");
}

TEST_F(SolarflareModuleTest, NicUsabilityFollowsSfcResourceAndCarrier) {
  auto nic = Open("mode = \"nic\"\n", kNic);
  auto shared = Open("shares = 1\ndrivers = [\"sfc\"]\n");
  auto linked = Open("mode = \"nic\"\nrequire_link = true\n", kNic);
  ASSERT_TRUE(nic && shared && linked);
  fx_.SetEnable(kA, 0, false);
  harness::Rescan(*nic);
  harness::Rescan(*shared);
  EXPECT_EQ(Reason(*nic, kA), "Onload disabled");
  EXPECT_EQ(Ids(*nic->devices(), true), (Strings{kB, kX3}));
  EXPECT_EQ(Reason(*shared, "onload-0"), "");  // one usable NIC is enough
  fx_.SetEnable(kB, 1, false);
  harness::Rescan(*shared);
  EXPECT_EQ(Reason(*shared, "onload-0"),
            "no usable NIC: 0000:3b:00.0 Onload disabled; 0000:3b:00.1 Onload disabled");
  fx_.SetEnable(kA, 0, true);
  harness::Rescan(*shared);
  EXPECT_EQ(Reason(*shared, "onload-0"), "");

  // Carrier counts only with require_link; a NIC with two interfaces needs one.
  fx_.SetCarrier("ens2", false);
  harness::Rescan(*nic);
  harness::Rescan(*linked);
  EXPECT_EQ(Reason(*nic, kX3), "");
  EXPECT_EQ(Reason(*linked, kX3), "no carrier on ens2");
  fx_.AddInterfaceTo(kX3, "ens2d1", true);
  harness::Rescan(*linked);
  EXPECT_EQ(Reason(*linked, kX3), "");
  fx_.SetCarrier("ens2", true);

  // require_nic = false: usable without any NIC; with it, no NIC is a reason.
  auto none = Open("shares = 1\nvendors = [\"abcd\"]\n");
  auto anyway = Open("shares = 1\nvendors = [\"abcd\"]\nrequire_nic = false\n");
  ASSERT_TRUE(none && anyway);
  EXPECT_EQ(Reason(*none, "onload-0"), "no Solarflare NIC found");
  EXPECT_EQ(Reason(*anyway, "onload-0"), "");
  // A NIC without an sfc_resource binding is taken as usable.
  fx_.AddNic({.address = "0000:d8:00.0", .ifname = "ens4", .numa_node = 1, .onload_index = -1});
  harness::Rescan(*nic);
  EXPECT_EQ(Reason(*nic, "0000:d8:00.0"), "");
}

TEST_F(SolarflareModuleTest, LibrariesScriptAndEnvs) {
  // Auto: the first folder holding libonload.so.
  std::filesystem::remove_all(root_ / "usr/lib64");
  devplug::testing::WriteFile(root_ / "usr/lib/x86_64-linux-gnu/libonload.so", "");
  devplug::testing::WriteFile(root_ / "opt/onload/usr/lib64/libonload.so", "");
  auto inst =
      Open("shares = 1\nenvs = {EF_POLL_USEC = \"100000\", EF_TCP_FASTSTART_INIT = \"0\"}\n");
  ASSERT_TRUE(inst);
  auto r = harness::Allocate(*inst, {"onload-0"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(
      Mounts(*r),
      Strings{"/usr/lib/x86_64-linux-gnu/libonload.so>/opt/onload/usr/lib64/libonload.so:ro"});
  EXPECT_EQ(Envs(*r), (std::map<std::string, std::string>{
                          {"EF_POLL_USEC", "100000"},
                          {"EF_TCP_FASTSTART_INIT", "0"},
                          {"LD_PRELOAD", "/opt/onload/usr/lib64/libonload.so"}}));

  // A configured folder and container folder.
  auto fixed =
      Open("shares = 1\nlib_dir = \"/opt/onload/usr/lib64\"\ncontainer_lib_dir = \"/onload\"\n");
  ASSERT_TRUE(fixed);
  r = harness::Allocate(*fixed, {"onload-0"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Mounts(*r), Strings{"/opt/onload/usr/lib64/libonload.so>/onload/libonload.so:ro"});
  EXPECT_EQ(Envs(*r)["LD_PRELOAD"], "/onload/libonload.so");

  // preload promises libonload.so: without it the devices are Unhealthy.
  std::filesystem::remove(root_ / "usr/lib/x86_64-linux-gnu/libonload.so");
  std::filesystem::remove(root_ / "opt/onload/usr/lib64/libonload.so");
  harness::Rescan(*inst);
  EXPECT_EQ(
      Reason(*inst, "onload-0"),
      "libonload.so not found in /usr/lib64, /usr/lib/x86_64-linux-gnu, /opt/onload/usr/lib64");

  // The wrapper script instead of LD_PRELOAD.
  auto script = Open("shares = 1\npreload = false\nonload_script = true\n");
  ASSERT_TRUE(script);
  r = harness::Allocate(*script, {"onload-0"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Mounts(*r), Strings{"/usr/bin/onload>/opt/onload/usr/bin/onload:ro"});
  EXPECT_TRUE(Envs(*r).empty());
  std::filesystem::remove(root_ / "usr/bin/onload");
  harness::Rescan(*script);
  EXPECT_EQ(Reason(*script, "onload-0"),
            "the onload script is not in /usr/bin, /opt/onload/usr/bin");
  devplug::testing::WriteFile(root_ / "opt/onload/usr/bin/onload", "#!/bin/sh\n");
  harness::Rescan(*script);
  EXPECT_EQ(Mounts(*harness::Allocate(*script, {"onload-0"})),
            Strings{"/opt/onload/usr/bin/onload>/opt/onload/usr/bin/onload:ro"});
}

// nic mode's attach_command: the pod from pod_of, the NICs, and the
// command's verdict.
class SolarflareAttachTest : public SolarflareModuleTest {
 protected:
  void SetUp() override {
    SolarflareModuleTest::SetUp();
    if (IsSkipped()) return;
    out_ = root_.path() + "/attach.env";
    cmd_ = root_.path() + "/attach.sh";
    devplug::testing::WriteFile(cmd_,
                                "#!/bin/sh\nenv | grep ^DEVPLUG_ | sort > " + out_ +
                                    "\n"
                                    "[ -e " +
                                    root_.path() +
                                    "/fail ] && { echo 'moving' ; "
                                    "echo 'ip: netns kube-7 not found' >&2; echo done; exit 2; }\n"
                                    "[ -e " +
                                    root_.path() + "/hang ] && sleep 30\nexit 0\n");
    chmod(cmd_.c_str(), 0755);
  }
  ModuleInstance::Options WithPods() {
    ModuleInstance::Options o;
    o.pods = devplug::testing::PodsFrom([this](const std::string& id,
                                               std::optional<std::chrono::steady_clock::time_point>,
                                               PodHolder* holder) {
      if (id != kA || lookup_rc_ == -ENOTUNIQ) return lookup_rc_;
      *holder = {"team-a", "trader-0", "0f1e2d3c-aaaa-bbbb-cccc-000000000001", "engine"};
      return 0;
    });
    return o;
  }
  Strings Seen() {
    Strings lines;
    std::istringstream in(devplug::testing::ReadFile(out_));
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  }

  std::string out_, cmd_;
  int lookup_rc_ = -ENOENT;
};

TEST_F(SolarflareAttachTest, TheCommandLearnsThePodAndItsNics) {
  auto inst = Open("mode = \"nic\"\nattach_command = \"" + cmd_ + "\"\n", kNic, WithPods());
  ASSERT_TRUE(inst);
  EXPECT_TRUE(inst->runs_pre_start());
  ASSERT_TRUE(harness::PreStart(*inst, {kA, kB}).ok());
  EXPECT_EQ(Seen(),
            (Strings{"DEVPLUG_CONTAINER=engine", "DEVPLUG_DEVICE_IDS=0000:3b:00.0,0000:3b:00.1",
                     "DEVPLUG_IFNAMES=ens1f0np0,ens1f1np1", "DEVPLUG_POD_NAME=trader-0",
                     "DEVPLUG_POD_NAMESPACE=team-a",
                     "DEVPLUG_POD_UID=0f1e2d3c-aaaa-bbbb-cccc-000000000001",
                     "DEVPLUG_RESOURCE=amd.com/onload-nic"}));
  // A pod the kubelet does not list (an init container): no DEVPLUG_POD_*.
  ASSERT_TRUE(harness::PreStart(*inst, {kX3}).ok());
  EXPECT_EQ(Seen(), (Strings{"DEVPLUG_DEVICE_IDS=0000:5e:00.0", "DEVPLUG_IFNAMES=ens2",
                             "DEVPLUG_RESOURCE=amd.com/onload-nic"}));
  // The kubelet cannot be asked: the same, and the command decides.
  lookup_rc_ = -EAGAIN;
  ASSERT_TRUE(harness::PreStart(*inst, {kB}).ok());
  EXPECT_EQ(Seen().size(), 3u);
}

// A NIC listed under two pods names no holder: the command never runs (it
// would move the NIC into whichever pod came first) and the start fails.
TEST_F(SolarflareAttachTest, AnAmbiguousHolderFailsTheStartWithoutRunningTheCommand) {
  auto inst = Open("mode = \"nic\"\nattach_command = \"" + cmd_ + "\"\n", kNic, WithPods());
  ASSERT_TRUE(inst);
  lookup_rc_ = -ENOTUNIQ;
  Status st = harness::PreStart(*inst, {kA});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("under more than one pod"), std::string::npos) << st.message();
  EXPECT_FALSE(std::filesystem::exists(out_));
}

// The attach command runs on the instance's slow lane
// (kConcurrentSlowCalls): while it takes its time, scans and
// GetPreferredAllocation of other NICs go on and finish first.
TEST_F(SolarflareAttachTest, ScansGoOnWhileTheAttachCommandRuns) {
  auto inst = Open("mode = \"nic\"\nattach_command = \"" + cmd_ + "\"\nattach_timeout = \"2s\"\n",
                   kNic, WithPods());
  ASSERT_TRUE(inst);
  ASSERT_TRUE(inst->slow_lane());
  devplug::testing::WriteFile(root_ / "hang", "");
  std::atomic<bool> attached{false};
  Status st;
  std::thread start([&] {
    st = harness::PreStart(*inst, {kA});
    attached = true;
  });
  for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       !std::filesystem::exists(out_) && std::chrono::steady_clock::now() < end;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  harness::Rescan(*inst);
  auto p = harness::Prefer(*inst, {kA, kB}, {}, 1);
  EXPECT_TRUE(p.ok()) << p.status().message();
  EXPECT_FALSE(attached.load()) << "the worker waited for the attach command";
  start.join();
  EXPECT_FALSE(st.ok());  // killed at attach_timeout
  std::filesystem::remove(root_ / "hang");
}

TEST_F(SolarflareAttachTest, AFailureOrTimeoutFailsTheStartWithTheLastStderrLine) {
  auto inst =
      Open("mode = \"nic\"\nattach_command = \"" + cmd_ + "\"\nattach_timeout = \"500ms\"\n", kNic,
           WithPods());
  ASSERT_TRUE(inst);
  devplug::testing::WriteFile(root_ / "fail", "");
  Status st = harness::PreStart(*inst, {kA});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("attach 0000:3b:00.0 to team-a/trader-0/engine: " + cmd_ +
                              " exited with status 2: ip: netns kube-7 not found"),
            std::string::npos)
      << st.message();
  std::filesystem::remove(root_ / "fail");
  devplug::testing::WriteFile(root_ / "hang", "");
  st = harness::PreStart(*inst, {kA});
  EXPECT_NE(st.message().find(cmd_ + " timed out after 500ms"), std::string::npos) << st.message();
  // A NIC that is gone fails at once.
  std::filesystem::remove(root_ / "hang");
  fx_.RemoveNic(kB, "ens1f1np1");
  harness::Rescan(*inst);
  st = harness::PreStart(*inst, {kB});
  EXPECT_NE(st.message().find("0000:3b:00.1: NIC gone"), std::string::npos) << st.message();
}

TEST_F(SolarflareModuleTest, VirtualInterfacesAndOtherModulesCauseNoRescan) {
  auto inst = Open("shares = 1\n");
  ASSERT_TRUE(inst);
  auto event = [](std::string subsystem, std::string syspath) {
    udev::Event e;
    e.action = "add";
    e.subsystem = std::move(subsystem);
    e.syspath = std::move(syspath);
    e.sysname = e.syspath.substr(e.syspath.rfind('/') + 1);
    return e;
  };
  // No event scan ran yet, so an accepted event would scan at once, inside
  // the task; a call queued behind it on the worker is the barrier.
  const uint64_t scans = inst->scans();
  inst->OnUdevEvents({event("net", "/sys/devices/virtual/net/cali12ab34cd"),
                      event("module", "/sys/module/nf_conntrack")});
  harness::Settle(*inst);
  EXPECT_EQ(inst->scans(), scans);
  inst->OnUdevEvents({event("net", "/sys/devices/pci0000:3a/0000:3b:00.0/net/ens1f0np0")});
  harness::Settle(*inst);
  EXPECT_EQ(inst->scans(), scans + 1);
  // Event scans are rate-limited: this one may come a little later.
  inst->OnUdevEvents({event("module", "/sys/module/onload")});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (inst->scans() < scans + 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(inst->scans(), scans + 2);
}

TEST_F(SolarflareModuleTest, BadKeysNameFileLineAndKey) {
  struct Case {
    std::string body;
    std::string error;
  } cases[] = {
      {"mode = \"exclusive\"\n", "module.toml:4: resource[0].mode: must be \"shared\" or \"nic\""},
      {"mode = \"nic\"\nshares = 4\n",
       "module.toml:5: resource[0].shares: applies to mode = \"shared\" only"},
      {"shares = 0\n", "module.toml:4: resource[0].shares: must be between 1 and 10000"},
      {"vendors = [\"solarflare\"]\n",
       "module.toml:4: resource[0].vendors: \"solarflare\" is not a 16-bit PCI vendor ID"},
      {"drivers = []\n", "module.toml:4: resource[0].drivers: is empty"},
      {"addresses = [\"3b:00\"]\n",
       "module.toml:4: resource[0].addresses: \"3b:00\" is not a PCI address"},
      {"devices = [\"dev/onload\"]\n",
       "module.toml:4: resource[0].devices: \"dev/onload\" must be an absolute path"},
      {"lib_dir = \"lib64\"\n",
       "module.toml:4: resource[0].lib_dir: \"lib64\" must be an absolute path"},
      {"onload_script = true\n", "module.toml:4: resource[0].onload_script: needs preload = false"},
      {"libraries = [\"libonload_ext.so\"]\n",
       "module.toml:4: resource[0].libraries: no entry matches libonload.so"},
      {"envs = {LD_PRELOAD = \"/x.so\"}\n", "module.toml:4: resource[0].envs: sets LD_PRELOAD"},
      {"envs = {EF_POLL_USEC = 100}\n", "resource[0].envs.EF_POLL_USEC: must be a string"},
      {"attach_command = \"/usr/bin/attach\"\n",
       "module.toml:4: resource[0].attach_command: applies to mode = \"nic\" only"},
      {"mode = \"nic\"\nattach_command = \"attach\"\n",
       "module.toml:5: resource[0].attach_command: \"attach\" must be an absolute path"},
      {"mode = \"nic\"\nattach_command = \"/a\"\nattach_timeout = \"40s\"\n",
       "module.toml:6: resource[0].attach_timeout: \"40s\" is over the maximum of 29s"},
      {"mode = \"nic\"\nattach_timeout = \"5s\"\n",
       "module.toml:5: resource[0].attach_timeout: applies only with attach_command"},
      {"require_link = \"yes\"\n", "module.toml:4: resource[0].require_link: must be a boolean"},
  };
  for (const Case& c : cases) {
    auto inst = harness::Open("solarflare", kShared, root_.path(), c.body);
    ASSERT_FALSE(inst.ok()) << c.body;
    EXPECT_NE(inst.status().message().find(c.error), std::string::npos) << c.body << "\n"
                                                                        << inst.status().message();
  }
}

// This machine has no Onload: the shared devices exist and say why they are
// Unhealthy; nic mode finds no NIC among the real interfaces.
TEST(SolarflareRealTest, ThisMachineHasNoOnload) {
  if (std::filesystem::exists("/sys/module/onload")) GTEST_SKIP() << "this machine has Onload";
  auto shared = harness::Open("solarflare", kShared, "/", "shares = 2\n");
  ASSERT_TRUE(shared.ok()) << shared.status().message();
  ASSERT_EQ((*shared)->devices()->size(), 2u);
  EXPECT_FALSE((*shared)->devices()->front().healthy);
  EXPECT_EQ((*shared)->devices()->front().health_reason,
            "onload driver not loaded (/sys/module/onload missing)");
  // Every real interface is looked at: only Solarflare/Xilinx NICs count.
  auto nic = harness::Open("solarflare", kNic, "/", "mode = \"nic\"\n");
  ASSERT_TRUE(nic.ok()) << nic.status().message();
  EXPECT_TRUE((*nic)->devices()->empty());
  // Taking this machine's own NIC drivers, its PCI NICs are found.
  Strings want;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/net")) {
    std::error_code ec;
    auto dev = std::filesystem::read_symlink(e.path() / "device", ec);
    if (ec || !devplug::common::IsPciAddress(dev.filename().string())) continue;
    if (devplug::testing::ReadFile(e.path() / "type") != "1\n") continue;
    if (std::filesystem::is_symlink("/sys/bus/pci/devices/" + dev.filename().string() + "/driver",
                                    ec))
      want.push_back(dev.filename());
  }
  if (want.empty()) return;
  std::sort(want.begin(), want.end());
  want.erase(std::unique(want.begin(), want.end()), want.end());
  std::string drivers, vendors;
  for (const std::string& a : want) {
    auto drv =
        std::filesystem::read_symlink("/sys/bus/pci/devices/" + a + "/driver").filename().string();
    auto vendor = devplug::testing::ReadFile("/sys/bus/pci/devices/" + a + "/vendor");
    drivers += "\"" + drv + "\",";
    vendors += "\"" + vendor.substr(0, vendor.find('\n')) + "\",";
  }
  auto own =
      harness::Open("solarflare", kNic, "/",
                    "mode = \"nic\"\ndrivers = [" + drivers + "]\nvendors = [" + vendors + "]\n");
  ASSERT_TRUE(own.ok()) << own.status().message();
  EXPECT_EQ(Ids(*(*own)->devices()), want);
}

}  // namespace
}  // namespace devplug::modules
