// The vfio module at SR-IOV scale: a fixture node with 4,096 VFs (32 PFs x
// 128 VFs on two NUMA nodes, one IOMMU group each, every /dev/vfio node
// present), shaped like real sysfs.
//
//  - scan: one list_devices() through the real loader plus the agent's copy
//    and diff of the 4,096-device list (ModuleInstance rescan).
//  - preferred: GetPreferredAllocation over all 4,096 for 8 and 2,048.
//  - end to end: devplugd with resync off; unbind (or bind) one VF in the
//    fixture, write "change" to a real PCI uevent file, and time until the
//    simulated kubelet holds the new list. Also the size of that
//    ListAndWatch message against the kubelet's 4 MiB limit.
//
//   devplug_vfio_bench [--vfs 4096] [--scans 50] [--events 50]   (needs root)
//
// The fixture goes to $TMPDIR, or /dev/shm when TMPDIR is not set.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_module.h"
#include "config/config.h"
#include "kubelet_sim.h"
#include "modules/loaded_module.h"
#include "modules/module_instance.h"
#include "sysfs_fixture.h"
#include "test_util.h"

namespace {

using devplug::bench::Ms;
using devplug::bench::Stats;
using devplug::bench::Summarize;
using devplug::bench::TimedRescan;

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using devplug::modules::ModuleInstance;

constexpr char kName[] = "bench.example/vf";

std::string VfAddress(int pf, int k) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0000:%02x:%02x.%d", 0x20 + pf, 1 + k / 8, k % 8);
  return buf;
}

void BuildNode(const std::string& root, int vfs) {
  devplug::testing::SysfsFixture fx(root);
  fx.AddVfioContainer();
  const int per_pf = 128, pfs = (vfs + per_pf - 1) / per_pf;
  int group = 1000;
  for (int pf = 0; pf < pfs; pf++) {
    devplug::testing::PciSpec spec;
    char addr[32];
    std::snprintf(addr, sizeof(addr), "0000:%02x:00.0", 0x20 + pf);
    spec.address = addr;
    spec.device = 0x1592;
    spec.driver = "ice";
    spec.numa_node = pf < pfs / 2 ? 0 : 1;
    spec.iommu_group = group++;
    std::vector<devplug::testing::PciSpec> list;
    for (int k = 0; k < per_pf && pf * per_pf + k < vfs; k++) {
      devplug::testing::PciSpec vf;
      vf.address = VfAddress(pf, k);
      vf.driver = "vfio-pci";
      vf.numa_node = spec.numa_node;
      vf.iommu_group = group++;
      fx.AddVfioGroup(vf.iommu_group);
      list.push_back(vf);
    }
    fx.AddSriov(spec, list);
  }
}

std::unique_ptr<ModuleInstance> Open(const std::string& root) {
  return devplug::bench::OpenModule(
      "vfio", std::string("name = \"") + kName + "\"\nmodule = \"vfio\"\nvendor = \"8086\"\n",
      root);
}

double TimedPrefer(ModuleInstance& inst, const std::vector<std::string>& all, int size) {
  std::promise<void> done;
  const auto t0 = Clock::now();
  inst.PreferredAllocation(all, {}, size, [&](auto) { done.set_value(); });
  done.get_future().get();
  return Ms(Clock::now() - t0);
}

struct EndToEnd {
  Stats stats;
  size_t message_bytes = 0;
  size_t timeouts = 0;
};

EndToEnd RunAgent(const std::string& dir, const std::string& root, int vfs, int events) {
  EndToEnd out;
  std::string uevent;
  for (const auto& e : fs::directory_iterator("/sys/bus/pci/devices")) {
    uevent = e.path().string() + "/uevent";
    break;
  }
  if (uevent.empty() || access(uevent.c_str(), W_OK) != 0) return out;
  const std::string plugins = dir + "/p", cfg = dir + "/vfio.toml";
  std::ofstream(cfg) << "[agent]\nplugin_dir = \"" << plugins << "\"\nmodule_dir = \""
                     << DEVPLUG_BENCH_MODULE_DIR << "\"\nhost_root = \"" << root
                     << "\"\nlog_level = \"warn\"\nresync_interval = \"0s\"\n"
                     << "udev_source = \"kernel\"\n[[resource]]\nname = \"" << kName
                     << "\"\nmodule = \"vfio\"\nvendor = \"8086\"\n";
  devplug::sim::KubeletSim::Options o;
  o.dir = plugins;
  o.owns_dir = true;  // a temporary directory
  o.checkpoint_noise = false;
  devplug::sim::KubeletSim sim(o);
  if (!sim.Start().ok()) return out;
  const pid_t agent =
      devplug::testing::SpawnProcess({DEVPLUG_BENCH_DEVPLUGD, "--config", cfg}, dir + "/agent.log");
  auto count_is = [&](size_t n, std::chrono::milliseconds timeout) {
    return sim.WaitUntil(
        [&](const auto& rs) {
          auto it = rs.find(kName);
          return it != rs.end() && it->second.connected && it->second.devices.size() == n;
        },
        timeout);
  };
  if (!count_is(static_cast<size_t>(vfs), 60s)) {
    std::fprintf(stderr, "agent did not list %d VFs; see %s/agent.log\n", vfs, dir.c_str());
    devplug::testing::StopProcess(agent, SIGTERM);
    return out;
  }
  {
    v1beta1::ListAndWatchResponse msg;
    const auto view = sim.resource(kName);
    for (const auto& d : view->devices) *msg.add_devices() = d;
    out.message_bytes = msg.ByteSizeLong();
  }
  std::this_thread::sleep_for(200ms);
  devplug::testing::SysfsFixture fx(root);
  const std::string victim = VfAddress(0, 7);
  std::vector<double> ms;
  bool bound = true;
  for (int i = 0; i < events; i++) {
    if (bound)
      fx.Unbind(victim);
    else
      fx.Bind(victim, "vfio-pci");
    bound = !bound;
    const auto t0 = Clock::now();
    std::ofstream(uevent) << "change";
    if (count_is(static_cast<size_t>(vfs - (bound ? 0 : 1)), 5s))
      ms.push_back(Ms(Clock::now() - t0));
    else
      out.timeouts++;
    std::this_thread::sleep_for(20ms);
  }
  devplug::testing::StopProcess(agent, SIGTERM);
  sim.Stop();
  out.stats = Summarize(ms);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vfio module at SR-IOV scale"};
  int vfs = 4096, scans = 50, events = 50;
  app.add_option("--vfs", vfs, "virtual functions in the fixture")->check(CLI::Range(1, 8192));
  app.add_option("--scans", scans, "in-process rescans to time");
  app.add_option("--events", events, "end-to-end hotplug events to time (0: skip)");
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    std::fprintf(stderr, "needs root (mknod for /dev/vfio nodes, PCI uevents)\n");
    return 1;
  }
  devplug::bench::PreferTmpfsForFixtures();
  devplug::testing::TempDir tmp;
  const std::string root = tmp / "host";
  const auto b0 = Clock::now();
  BuildNode(root, vfs);
  std::printf("fixture: %d VFs built in %.0f ms under %s\n", vfs, Ms(Clock::now() - b0),
              root.c_str());

  auto inst = Open(root);
  if (!inst || inst->devices()->size() != static_cast<size_t>(vfs)) {
    std::fprintf(stderr, "vfio module did not list %d VFs\n", vfs);
    return 1;
  }
  std::vector<double> scan_ms;
  for (int i = 0; i < scans; i++) scan_ms.push_back(TimedRescan(*inst));
  std::vector<std::string> all;
  const auto listed = inst->devices();  // held: the range-for must not outlive it
  for (const auto& d : *listed) all.push_back(d.id);
  std::vector<double> p8, p2k;
  for (int i = 0; i < 20; i++) {
    p8.push_back(TimedPrefer(*inst, all, 8));
    p2k.push_back(TimedPrefer(*inst, all, vfs / 2));
  }
  inst.reset();

  const EndToEnd e2e = events > 0 ? RunAgent(tmp.path(), root, vfs, events) : EndToEnd{};
  const Stats scan = Summarize(scan_ms), pref8 = Summarize(p8), pref2k = Summarize(p2k);

  std::printf("\n| measurement (%d VFs) | p50 | p99 | max | target |\n|---|---|---|---|---|\n",
              vfs);
  std::printf(
      "| scan + agent snapshot (in process, n=%zu) | %.2f ms | %.2f ms | %.2f ms | <= 20 ms |\n",
      scan.n, scan.p50, scan.p99, scan.max);
  std::printf("| GetPreferredAllocation of 8 (n=%zu) | %.2f ms | %.2f ms | %.2f ms | - |\n",
              pref8.n, pref8.p50, pref8.p99, pref8.max);
  std::printf("| GetPreferredAllocation of %d (n=%zu) | %.2f ms | %.2f ms | %.2f ms | - |\n",
              vfs / 2, pref2k.n, pref2k.p50, pref2k.p99, pref2k.max);
  if (e2e.stats.n > 0)
    std::printf(
        "| unbind + real uevent -> kubelet snapshot (n=%zu, %zu timeouts) | %.2f ms | %.2f ms "
        "| %.2f ms | - |\n",
        e2e.stats.n, e2e.timeouts, e2e.stats.p50, e2e.stats.p99, e2e.stats.max);
  if (e2e.message_bytes > 0)
    std::printf(
        "\nListAndWatch message for %d VFs: %zu bytes (%.1f%% of the kubelet's 4 MiB limit)\n", vfs,
        e2e.message_bytes, 100.0 * static_cast<double>(e2e.message_bytes) / (4 << 20));
  return 0;
}
