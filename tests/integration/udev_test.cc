// Hotplug end to end with real kernel uevents: a fixture-tree change plus a
// real event must reach the kubelet's view without any polling (every agent
// here runs with resync_interval = "0s").
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "agent_fixture.h"
#include "gpu_fixture.h"
#include "onload_fixture.h"
#include "sysfs_fixture.h"
#include "udev/udev_monitor.h"
#include "udevd.h"

namespace devplug {
namespace {

constexpr char kDir[] = "test.example/dir";

// Writes an action to a sysfs uevent file: the kernel emits that uevent.
bool Trigger(const std::string& uevent_file, const char* action = "change") {
  std::ofstream out(uevent_file);
  out << action;
  out.flush();
  return static_cast<bool>(out);
}

// A real PCI function of this machine ("" without a PCI bus): writing to
// its uevent file makes the kernel send a real pci event naming it.
std::string FirstPciAddress() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/bus/pci/devices", ec))
    return e.path().filename().string();
  return {};
}

bool CanTrigger(const std::string& uevent_file) {
  return testing::IsRoot() && access(uevent_file.c_str(), W_OK) == 0;
}

int Sh(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

class UdevTest : public AgentTest {
 protected:
  // The kvm module serving a real misc device of this machine (kvm, or tun
  // where there is no kvm): its node in the fixture tree, real uevents.
  bool UseMiscDevice() {
    misc_ = testing::RealMiscDevice();
    return misc_.has_value();
  }
  std::string MiscResource(int shares) const {
    return Resource(kKvm, "kvm",
                    "shares = " + std::to_string(shares) + "\ndevice = \"" + misc_->node + "\"");
  }
  bool MakeMiscNode() {
    return testing::MakeCharDevice(host_root() + misc_->node, misc_->major, misc_->minor);
  }
  void RemoveMiscNode() { std::remove((host_root() + misc_->node).c_str()); }
  bool TriggerMisc() { return Trigger(misc_->uevent); }

  std::optional<testing::MiscDevice> misc_;

  std::vector<std::string> Ids(const std::string& name) {
    std::vector<std::string> ids;
    const auto r = sim_->resource(name);
    for (const auto& d : r->devices) ids.push_back(d.id());
    return ids;
  }
};

TEST_F(UdevTest, MiscNodeRemovedAndRestoredFlipsHealthOnRealMiscEvents) {
  if (!testing::IsRoot()) GTEST_SKIP() << "writing uevent files needs root";
  ASSERT_TRUE(UseMiscDevice()) << "no /sys/class/misc/kvm or /sys/class/misc/tun";
  ASSERT_TRUE(MakeMiscNode());
  StartSim();
  StartAgent(MiscResource(3), "0s", "udev_source = \"kernel\"");
  ASSERT_TRUE(Registered(kKvm));
  ASSERT_TRUE(HealthyIs(kKvm, 3, 3));
  ASSERT_TRUE(agent_->WaitForLog("listening for kernel events on subsystems misc", kWait));

  // A real uevent makes the module rescan.
  const std::string event_rescans =
      "devplug_rescans_total{cause=\"event\",resource=\"" + std::string(kKvm) + "\"} ";
  const double before = Metric(event_rescans);
  ASSERT_TRUE(TriggerMisc());
  ASSERT_TRUE(Eventually([&] { return Metric(event_rescans) > before; })) << "no event rescan";

  // A node removed or made without a uevent (rm, mknod) is seen through the
  // path watch (ABI 1.3), not at the next resync (60 s here).
  RemoveMiscNode();
  ASSERT_TRUE(HealthyIs(kKvm, 3, 0));
  ASSERT_TRUE(MakeMiscNode());
  ASSERT_TRUE(HealthyIs(kKvm, 3, 3));
  // Health changes are new snapshots on the same stream.
  EXPECT_EQ(sim_->resource(kKvm)->registrations, 1u);
  // The metrics counted the events, the watch's rescans and the flips.
  auto m =
      testing::RunProcess({testing::DevplugctlPath(), "metrics", "--socket", control_socket()});
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("devplug_uevents_total{subsystem=\"misc\"} "), std::string::npos)
      << m.output;
  EXPECT_EQ(m.output.find("devplug_uevents_total{subsystem=\"misc\"} 0"), std::string::npos)
      << m.output;
  EXPECT_NE(m.output.find("devplug_health_transitions_total{resource=\"" + std::string(kKvm) +
                          "\",to=\"Unhealthy\"} 3"),
            std::string::npos)
      << m.output;
  EXPECT_GE(Metric("devplug_rescans_total{cause=\"path\",resource=\"" + std::string(kKvm) + "\"} "),
            2.0)
      << m.output;
}

// The generic module hears the real misc uevents of its node (tun, or kvm):
// the kernel's event for the node's own name makes it rescan.
TEST_F(UdevTest, GenericRescansOnRealMiscEventsOfItsNode) {
  if (!testing::IsRoot()) GTEST_SKIP() << "writing uevent files needs root";
  ASSERT_TRUE(UseMiscDevice()) << "no /sys/class/misc/kvm or /sys/class/misc/tun";
  ASSERT_TRUE(MakeMiscNode());
  constexpr char kGeneric[] = "example.com/misc";
  StartSim();
  StartAgent(Resource(kGeneric, "generic", "paths = [\"" + misc_->node + "\"]\nshares = 2"), "0s",
             "udev_source = \"kernel\"");
  ASSERT_TRUE(Registered(kGeneric));
  ASSERT_TRUE(HealthyIs(kGeneric, 2, 2));
  ASSERT_TRUE(agent_->WaitForLog("listening for kernel events on subsystems", kWait));
  const std::string event_rescans =
      "devplug_rescans_total{cause=\"event\",resource=\"" + std::string(kGeneric) + "\"} ";
  const double before = Metric(event_rescans);
  ASSERT_GE(before, 0.0);
  ASSERT_TRUE(TriggerMisc());
  ASSERT_TRUE(Eventually([&] { return Metric(event_rescans) > before; })) << "no event rescan";
}

TEST_F(UdevTest, EventStormEndsInTheRightState) {
  if (!testing::IsRoot()) GTEST_SKIP() << "writing uevent files needs root";
  ASSERT_TRUE(UseMiscDevice()) << "no /sys/class/misc/kvm or /sys/class/misc/tun";
  ASSERT_TRUE(MakeMiscNode());
  StartSim();
  StartAgent(MiscResource(2), "0s", "udev_source = \"kernel\"");
  ASSERT_TRUE(Registered(kKvm));
  ASSERT_TRUE(HealthyIs(kKvm, 2, 2));
  for (int i = 0; i < 1000; ++i) {
    if (i == 500) RemoveMiscNode();
    ASSERT_TRUE(TriggerMisc());
  }
  ASSERT_TRUE(HealthyIs(kKvm, 2, 0));
  // Far fewer snapshots than events: only changes are pushed.
  EXPECT_LE(sim_->resource(kKvm)->snapshots, 3u);
}

TEST_F(UdevTest, VethPairsAppearAndLeaveOnRealNetEvents) {
  if (!testing::IsRoot() || Sh("command -v ip >/dev/null") != 0)
    GTEST_SKIP() << "needs root and iproute2";
  // Interface names: at most 15 characters, unique per run.
  const std::string tag = "dpv" + std::to_string(std::random_device{}() % 100000);
  const std::string a = tag + "a", b = tag + "b";
  if (Sh("ip link add " + a + " type veth peer name " + b + " 2>/dev/null") != 0)
    GTEST_SKIP() << "cannot create veth pairs here";
  Sh("ip link del " + a + " 2>/dev/null");

  StartSim();
  // host_root "/" for this resource: the module reads the real /sys/class/net.
  WriteFile(config_path(),
            "[agent]\nplugin_dir = \"" + plugin_dir() + "\"\nmodule_dir = \"" +
                testing::ModuleDir() +
                "\"\nlog_level = \"debug\"\nresync_interval = \"0s\"\nudev_source = \"kernel\"\n" +
                Resource(kDir, FakeModule("fake_dir"),
                         "dir = \"/sys/class/net\"\nprefix = \"" + tag + "\""));
  agent_ = std::make_unique<AgentProcess>(std::vector<std::string>{"--config", config_path()});
  ASSERT_TRUE(Registered(kDir));
  EXPECT_TRUE(sim_->resource(kDir)->devices.empty());
  ASSERT_TRUE(agent_->WaitForLog("listening for kernel events", kWait));

  ASSERT_EQ(Sh("ip link add " + a + " type veth peer name " + b), 0);
  const bool appeared = HealthyIs(kDir, 2, 2);
  const std::vector<std::string> ids = appeared ? Ids(kDir) : std::vector<std::string>{};
  Sh("ip link del " + a + " 2>/dev/null");
  ASSERT_TRUE(appeared);
  EXPECT_EQ(ids, (std::vector<std::string>{a, b}));
  ASSERT_TRUE(HealthyIs(kDir, 0, 0));
}

TEST_F(UdevTest, FixtureChangePlusRealPciEvent) {
  const std::string pci_uevent = "/sys/bus/pci/devices/" + FirstPciAddress() + "/uevent";
  if (!CanTrigger(pci_uevent)) GTEST_SKIP() << "needs root and a PCI device";
  std::filesystem::create_directories(host_root() + "/fixture");
  StartSim();
  StartAgent(Resource(kDir, FakeModule("fake_dir"), "dir = \"/fixture\""), "0s",
             "udev_source = \"kernel\"");
  ASSERT_TRUE(Registered(kDir));
  ASSERT_TRUE(agent_->WaitForLog("listening for kernel events on subsystems net,pci", kWait));

  WriteFile(host_root() + "/fixture/vf0", "ok");
  WriteFile(host_root() + "/fixture/vf1", "bad");
  ASSERT_TRUE(Trigger(pci_uevent));
  ASSERT_TRUE(HealthyIs(kDir, 2, 1));
  WriteFile(host_root() + "/fixture/vf1", "ok");
  ASSERT_TRUE(Trigger(pci_uevent));
  ASSERT_TRUE(HealthyIs(kDir, 2, 2));  // recovery
  std::remove((host_root() + "/fixture/vf0").c_str());
  ASSERT_TRUE(Trigger(pci_uevent));
  ASSERT_TRUE(HealthyIs(kDir, 1, 1));
  EXPECT_EQ(Ids(kDir), std::vector<std::string>{"vf1"});
}

// vfio: an unbind in the fixture plus a real PCI uevent makes the function
// leave the kubelet's list at once (resync is off); a bind brings it back.
TEST_F(UdevTest, VfioUnbindAndBindWithARealPciEvent) {
  const std::string pci_uevent = "/sys/bus/pci/devices/" + FirstPciAddress() + "/uevent";
  if (!CanTrigger(pci_uevent)) GTEST_SKIP() << "needs root and a PCI device";
  testing::SysfsFixture fx(host_root());
  ASSERT_TRUE(fx.AddVfioContainer());
  for (int k = 0; k < 2; k++) {
    fx.AddPci({.address = "0000:3b:02." + std::to_string(k),
               .vendor = 0x8086,
               .device = 0x1889,
               .class_code = 0x020000,
               .driver = "vfio-pci",
               .numa_node = 0,
               .iommu_group = 30 + k,
               .parent = {},
               .net = {}});
    ASSERT_TRUE(fx.AddVfioGroup(30 + k));
  }
  constexpr char kVf[] = "intel.com/vf";
  StartSim();
  StartAgent(Resource(kVf, "vfio", "vendor = \"8086\""), "0s", "udev_source = \"kernel\"");
  ASSERT_TRUE(Registered(kVf));
  ASSERT_TRUE(HealthyIs(kVf, 2, 2));
  ASSERT_TRUE(agent_->WaitForLog("listening for kernel events on subsystems", kWait));

  fx.Unbind("0000:3b:02.1");
  ASSERT_TRUE(Trigger(pci_uevent));
  ASSERT_TRUE(HealthyIs(kVf, 1, 1));
  EXPECT_EQ(Ids(kVf), std::vector<std::string>{"0000:3b:02.0"});

  fx.Bind("0000:3b:02.1", "vfio-pci");
  fx.RemoveVfioGroup(30);
  ASSERT_TRUE(Trigger(pci_uevent));
  ASSERT_TRUE(HealthyIs(kVf, 2, 1));
  ASSERT_TRUE(fx.AddVfioGroup(30));
  ASSERT_TRUE(Trigger(pci_uevent));
  ASSERT_TRUE(HealthyIs(kVf, 2, 2));  // recovery
}

// rdma over RoCE: a port state follows its net device, and a link change
// raises no uevent, only an rtnetlink message. With the port poll and the
// resync off, `ip link set down` on the adapter's (veth) interface must
// still reach the kubelet at once.
TEST_F(UdevTest, RdmaRoceLinkChangeThroughRtnetlink) {
  if (!testing::IsRoot() || Sh("command -v ip >/dev/null") != 0)
    GTEST_SKIP() << "needs root and ip(8)";
  const std::string a = "dpr" + std::to_string(getpid() % 100000), b = a + "p";
  if (Sh("ip link add " + a + " type veth peer name " + b) != 0)
    GTEST_SKIP() << "cannot create veth pairs here";
  Sh("ip link set " + a + " up && ip link set " + b + " up");
  testing::SysfsFixture fx(host_root());
  fx.AddPci({.address = "0000:af:00.0",
             .vendor = 0x8086,
             .device = 0x1592,
             .class_code = 0x020000,
             .driver = "ice",
             .numa_node = 1,
             .iommu_group = 5,
             .parent = {},
             .net = {a}});
  ASSERT_TRUE(fx.AddRdma({.ibdev = "irdma0",
                          .pci = "0000:af:00.0",
                          .port_states = {4},
                          .link_layer = "Ethernet",
                          .uverbs = 0,
                          .first_umad = 0}));
  constexpr char kRoce[] = "rdma.example/roce";
  StartSim();
  StartAgent(Resource(kRoce, "rdma", "mode = \"exclusive\"\nport_poll_ms = 0"), "0s",
             "udev_source = \"kernel\"");
  const bool registered = Registered(kRoce) && HealthyIs(kRoce, 1, 1);
  fx.SetPortState("irdma0", 1, 1);
  Sh("ip link set " + a + " down");
  const bool down = registered && HealthyIs(kRoce, 1, 0);
  fx.SetPortState("irdma0", 1, 4);
  Sh("ip link set " + a + " up");
  const bool up = down && HealthyIs(kRoce, 1, 1);
  Sh("ip link del " + a + " 2>/dev/null");
  EXPECT_TRUE(registered);
  EXPECT_TRUE(down);
  EXPECT_TRUE(up);
}

// solarflare: rmmod onload (in the fixture) plus the real pci event of
// this machine's device reaches the kubelet at once, and modprobe brings
// the shares back; the veth pairs a Kubernetes node makes all day (real
// net events of virtual interfaces) cause no rescan at all.
TEST_F(UdevTest, SolarflareOnloadUnloadAndLoadOnRealEvents) {
  const std::string address = FirstPciAddress();
  const std::string uevent = "/sys/bus/pci/devices/" + address + "/uevent";
  if (!CanTrigger(uevent) || Sh("command -v ip >/dev/null") != 0)
    GTEST_SKIP() << "needs root, a PCI device and ip(8)";
  testing::OnloadFixture fx(host_root());
  ASSERT_TRUE(fx.Install());
  fx.AddNic({.address = "0000:3b:00.0", .ifname = "ens1f0np0"});
  constexpr char kOnload[] = "amd.com/onload";
  StartSim();
  StartAgent(Resource(kOnload, "solarflare", "shares = 2"), "0s", "udev_source = \"kernel\"");
  ASSERT_TRUE(Registered(kOnload));
  ASSERT_TRUE(HealthyIs(kOnload, 2, 2));
  const double scans =
      Metric("devplug_rescans_total{cause=\"event\",resource=\"amd.com/onload\"} ");
  const std::string a = "dps" + std::to_string(getpid() % 100000), b = a + "p";
  if (Sh("ip link add " + a + " type veth peer name " + b) == 0) {
    Sh("ip link del " + a);
    // The pci event after them is the barrier: once it has been scanned,
    // the net events before it have been looked at too.
    ASSERT_TRUE(Trigger(uevent));
    ASSERT_TRUE(Eventually([&] {
      return Metric("devplug_rescans_total{cause=\"event\",resource=\"amd.com/onload\"} ") >=
             scans + 1;
    }));
    EXPECT_EQ(Metric("devplug_rescans_total{cause=\"event\",resource=\"amd.com/onload\"} "),
              scans + 1);
  }
  fx.Unload();
  ASSERT_TRUE(Trigger(uevent));
  ASSERT_TRUE(HealthyIs(kOnload, 2, 0));
  ASSERT_TRUE(fx.Load());
  ASSERT_TRUE(Trigger(uevent));
  ASSERT_TRUE(HealthyIs(kOnload, 2, 2));
}

// solarflare with require_link: carrier changes raise no uevent, only an
// rtnetlink message. The fixture NIC's interface carries the name of a real
// veth; `ip link set down` on it must reach the kubelet with the resync off.
TEST_F(UdevTest, SolarflareCarrierThroughRtnetlink) {
  if (!testing::IsRoot() || Sh("command -v ip >/dev/null") != 0)
    GTEST_SKIP() << "needs root and ip(8)";
  const std::string a = "dpo" + std::to_string(getpid() % 100000), b = a + "p";
  if (Sh("ip link add " + a + " type veth peer name " + b) != 0)
    GTEST_SKIP() << "cannot create veth pairs here";
  Sh("ip link set " + a + " up && ip link set " + b + " up");
  testing::OnloadFixture fx(host_root());
  ASSERT_TRUE(fx.Install());
  fx.AddNic({.address = "0000:3b:00.0", .ifname = a});
  constexpr char kNic[] = "amd.com/onload-nic";
  StartSim();
  StartAgent(Resource(kNic, "solarflare", "mode = \"nic\"\nrequire_link = true"), "0s",
             "udev_source = \"kernel\"");
  const bool registered = Registered(kNic) && HealthyIs(kNic, 1, 1);
  fx.SetCarrier(a, false);
  Sh("ip link set " + a + " down");
  const bool down = registered && HealthyIs(kNic, 1, 0);
  fx.SetCarrier(a, true);
  Sh("ip link set " + a + " up");
  const bool up = down && HealthyIs(kNic, 1, 1);
  Sh("ip link del " + a + " 2>/dev/null");
  EXPECT_TRUE(registered);
  EXPECT_TRUE(down);
  EXPECT_TRUE(up);
}

// nvidia: a GPU marked Unhealthy by a critical XID comes back on a PCI
// event for its address (reset, re-bind, or an operator's "change"). The
// fixture GPU sits at a real PCI address of this machine so that a real
// uevent names it.
TEST_F(UdevTest, NvidiaXidRecoversOnARealPciEvent) {
  const std::string address = FirstPciAddress();
  const std::string uevent = "/sys/bus/pci/devices/" + address + "/uevent";
  if (!CanTrigger(uevent)) GTEST_SKIP() << "needs root and a PCI device";
  testing::GpuFixture gpu(host_root(), dir_ / "nvml");
  const std::string uuid = "GPU-5ca1ab1e-0000-4000-8000-000000000000";
  ASSERT_TRUE(gpu.Build({{uuid, address, 0, -1, "NVIDIA L4"}}));
  constexpr char kGpu[] = "nvidia.com/gpu";
  StartSim();
  StartAgent(
      Resource(kGpu, "nvidia", "nvml_library = \"" + testing::FakeModuleDir() + "/fake_nvml.so\""),
      "0s", "udev_source = \"kernel\"");
  ASSERT_TRUE(Registered(kGpu));
  ASSERT_TRUE(HealthyIs(kGpu, 1, 1));
  gpu.Xid(0, 48);  // double-bit ECC error
  ASSERT_TRUE(HealthyIs(kGpu, 1, 0));
  ASSERT_TRUE(Trigger(uevent));
  ASSERT_TRUE(HealthyIs(kGpu, 1, 1));
  EXPECT_TRUE(agent_->WaitForLog(uuid + ": change event; XID cleared", kWait)) << agent_->Log();
}

TEST_F(UdevTest, AutoPicksKernelWithoutUdevd) {
  if (!testing::IsRoot()) GTEST_SKIP() << "needs root";
  if (udev::UdevdRunning()) GTEST_SKIP() << "a udevd runs on this host";
  StartSim();
  StartAgent(Resource(kKvm, "kvm", "shares = 1"), "0s", "udev_source = \"auto\"");
  ASSERT_TRUE(Registered(kKvm));
  EXPECT_TRUE(agent_->WaitForLog(
      "listening for kernel events on subsystems misc (udev_source auto)", kWait))
      << agent_->Log();
}

TEST_F(UdevTest, UdevSourceThroughSystemdUdevd) {
  if (!testing::IsRoot()) GTEST_SKIP() << "writing uevent files needs root";
  ASSERT_TRUE(UseMiscDevice()) << "no /sys/class/misc/kvm or /sys/class/misc/tun";
  testing::Udevd udevd;
  if (!udevd.ready()) GTEST_SKIP() << "systemd-udevd could not be started here";
  // What "auto" asks: the real udevd answers on its control socket.
  EXPECT_TRUE(udev::UdevdRunning(udevd.control_path()));
  ASSERT_TRUE(MakeMiscNode());
  StartSim();
  StartAgent(MiscResource(2), "0s", "udev_source = \"udev\"");
  ASSERT_TRUE(Registered(kKvm));
  ASSERT_TRUE(agent_->WaitForLog("listening for udev events on subsystems misc", kWait));
  RemoveMiscNode();
  ASSERT_TRUE(TriggerMisc());
  ASSERT_TRUE(HealthyIs(kKvm, 2, 0));
  ASSERT_TRUE(MakeMiscNode());
  ASSERT_TRUE(TriggerMisc());
  ASSERT_TRUE(HealthyIs(kKvm, 2, 2));
}

}  // namespace
}  // namespace devplug
