// The udev monitor against real kernel uevents, and the event pipeline of a
// module instance (rate-limited rescans, hooks).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "modules/loaded_module.h"
#include "modules/module_instance.h"
#include "test_util.h"
#include "udev/udev_monitor.h"

namespace devplug {
namespace {

using namespace std::chrono_literals;

constexpr char kLoUevent[] = "/sys/class/net/lo/uevent";

bool Trigger(const char* file) {
  std::ofstream out(file);
  out << "change";
  out.flush();
  return static_cast<bool>(out);
}

// Collects events for up to `timeout` until `want` matched.
std::vector<udev::Event> Collect(udev::Monitor& m, std::chrono::milliseconds timeout,
                                 const std::function<bool(const udev::Event&)>& want) {
  std::vector<udev::Event> all;
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{m.fd(), POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    bool overflow = false;
    for (auto& e : m.Drain(&overflow)) {
      const bool done = want(e);
      all.push_back(std::move(e));
      if (done) return all;
    }
  }
  return all;
}

TEST(UdevMonitorTest, KernelSourceDeliversFilteredRealEvents) {
  if (!testing::IsRoot()) GTEST_SKIP() << "writing uevent files needs root";
  const auto misc = testing::RealMiscDevice();
  ASSERT_TRUE(misc.has_value()) << "no /sys/class/misc/kvm or /sys/class/misc/tun";
  ASSERT_EQ(access(kLoUevent, W_OK), 0) << kLoUevent;
  auto m = udev::Monitor::Create(config::UdevSource::kKernel, {"misc"});
  ASSERT_TRUE(m.ok()) << m.status().message();
  // A net event first: filtered out in the kernel, never seen.
  ASSERT_TRUE(Trigger(kLoUevent));
  ASSERT_TRUE(Trigger(misc->uevent.c_str()));
  auto events = Collect(**m, 10s, [&](const udev::Event& e) { return e.sysname == misc->name; });
  ASSERT_FALSE(events.empty());
  const udev::Event& e = events.back();
  EXPECT_EQ(e.sysname, misc->name);
  EXPECT_EQ(e.action, "change");
  EXPECT_EQ(e.subsystem, "misc");
  EXPECT_EQ(e.syspath, misc->syspath);
  EXPECT_GT(e.seqnum, 0u);
  for (const auto& x : events) EXPECT_EQ(x.subsystem, "misc") << x.syspath;
}

// udevd's control socket is SOCK_SEQPACKET. A stream connect to it fails
// with EPROTOTYPE, which once made "auto" pick "kernel" beside a running
// udevd.
TEST(UdevMonitorTest, UdevdRunningConnectsAsUdevadmDoes) {
  testing::TempDir dir;
  const int seqpacket = testing::ListenUnix(dir / "control", SOCK_SEQPACKET);
  const int stream = testing::ListenUnix(dir / "stream", SOCK_STREAM);
  ASSERT_GE(seqpacket, 0);
  ASSERT_GE(stream, 0);
  EXPECT_TRUE(udev::UdevdRunning(dir / "control"));
  EXPECT_FALSE(udev::UdevdRunning(dir / "stream"));
  EXPECT_FALSE(udev::UdevdRunning(dir / "missing"));
  close(seqpacket);
  EXPECT_FALSE(udev::UdevdRunning(dir / "control")) << "a stale socket file is no udevd";
  close(stream);
}

TEST(UdevMonitorTest, AutoWithoutUdevdMeansKernel) {
  if (udev::UdevdRunning()) GTEST_SKIP() << "a udevd runs here";
  EXPECT_EQ(udev::ResolveSource(config::UdevSource::kAuto), config::UdevSource::kKernel);
  EXPECT_EQ(udev::ResolveSource(config::UdevSource::kUdev), config::UdevSource::kUdev);
}

udev::Event Ev(const std::string& sysname) {
  udev::Event e;
  e.action = "change";
  e.subsystem = "misc";
  e.sysname = sysname;
  e.syspath = "/sys/devices/virtual/misc/" + sysname;
  return e;
}

std::unique_ptr<modules::ModuleInstance> KvmInstance(const std::string& host_root) {
  auto m = modules::LoadedModule::Load(testing::ModuleDir() + "/kvm.so");
  EXPECT_TRUE(m.ok());
  auto cfg = config::LoadString(
      "[[resource]]\nname = \"devices.kubevirt.io/kvm\"\nmodule = \"kvm\"\nshares = 1\n", "t", {});
  modules::ModuleInstance::Options o;
  o.host_root = host_root;
  auto inst = modules::ModuleInstance::Create(*m, cfg->resources[0], std::move(o));
  EXPECT_TRUE(inst.ok());
  return std::move(*inst);
}

void Drain(modules::ModuleInstance& inst) {
  std::promise<void> p;
  inst.PreStart({}, [&](Status) { p.set_value(); });
  p.get_future().get();
}

TEST(EventPipelineTest, HookFiltersEventsOfOtherDevices) {
  testing::TempDir root;
  auto inst = KvmInstance(root.path());
  const uint64_t before = inst->scans();
  inst->OnUdevEvents({Ev("tun"), Ev("fuse"), Ev("loop-control")});
  Drain(*inst);
  EXPECT_EQ(inst->scans(), before);  // kvm's hook said: not mine
  inst->OnUdevEvents({Ev("kvm")});
  Drain(*inst);
  EXPECT_EQ(inst->scans(), before + 1);
}

TEST(EventPipelineTest, AStormCostsBoundedRescansAndEndsRight) {
  testing::TempDir root;
  auto inst = KvmInstance(root.path());
  EXPECT_FALSE(inst->devices()->at(0).healthy);
  const uint64_t before = inst->scans();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    // Late in the storm the device appears (as root; else the state stays).
    if (i == 990 && testing::IsRoot()) {
      ASSERT_TRUE(testing::MakeCharDevice(root / "dev/kvm", 10, 232));
    }
    inst->OnUdevEvents({Ev("kvm")});
    if (i % 10 == 0) std::this_thread::sleep_for(1ms);  // spread over ~100 ms
  }
  const auto storm = std::chrono::steady_clock::now() - start;
  // The last event is followed by a scan at most one interval later: wait
  // for its result (a busy machine may take longer than the interval).
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (inst->devices()->at(0).healthy != testing::IsRoot() &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  Drain(*inst);
  const uint64_t scans = inst->scans() - before;
  const uint64_t bound = 2 + storm / modules::ModuleInstance::kMinEventScanInterval;
  EXPECT_GE(scans, 1u);
  EXPECT_LE(scans, bound) << "storm took "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(storm).count()
                          << " ms";
  EXPECT_EQ(inst->devices()->at(0).healthy, testing::IsRoot());
}

}  // namespace
}  // namespace devplug
