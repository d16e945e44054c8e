// Hotplug latency and idle cost of devplugd, with real kernel uevents.
//
// Trigger -> kubelet-side snapshot: flip a fixture /dev/kvm (remove or
// create the node), write "change" to /sys/class/misc/kvm/uevent, and time
// until the simulated kubelet receives the device list with the new health.
// Measured for the "kernel" source and, where systemd-udevd can be started,
// for the "udev" source (which adds udevd's own processing).
// Idle: the agent's CPU time and per-thread wake-ups (context switches)
// while nothing happens, with the resync timer off.
//
//   devplug_udev_bench [--events 200] [--idle-seconds 60]   (needs root)
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_proc.h"
#include "bench_stats.h"
#include "kubelet_sim.h"
#include "test_util.h"
#include "udevd.h"

namespace {

using devplug::bench::CpuSeconds;
using devplug::bench::Stats;
using devplug::bench::Summarize;

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr char kUevent[] = "/sys/class/misc/kvm/uevent";
constexpr char kName[] = "bench.example/kvm";

struct ThreadTicks {
  std::string name;
  long switches = 0;
};
std::map<int, ThreadTicks> Threads(pid_t pid);

struct Idle {
  double cpu_s = 0;
  std::vector<std::pair<std::string, long>> wakeups;  // per thread
};

// Starts an agent on `source`, flips the node `events` times; then, with the
// kubelet still there, watches it idle for `idle_s` seconds.
Stats Measure(const std::string& dir, const std::string& source, int events, int idle_s,
              Idle* idle) {
  const std::string plugins = dir + "/p-" + source, host = dir + "/host";
  const std::string node = host + "/dev/kvm";
  fs::create_directories(host + "/dev");
  unlink(node.c_str());
  mknod(node.c_str(), S_IFCHR | 0600, makedev(10, 232));
  const std::string cfg = dir + "/" + source + ".toml";
  std::ofstream(cfg) << "[agent]\nplugin_dir = \"" << plugins << "\"\nmodule_dir = \""
                     << DEVPLUG_BENCH_MODULE_DIR << "\"\nhost_root = \"" << host
                     << "\"\nlog_level = \"warn\"\nresync_interval = \"0s\"\nudev_source = \""
                     << source << "\"\n[[resource]]\nname = \"" << kName
                     << "\"\nmodule = \"kvm\"\nshares = 4\n";
  devplug::sim::KubeletSim::Options o;
  o.dir = plugins;
  o.owns_dir = true;  // a temporary directory
  o.checkpoint_noise = false;
  devplug::sim::KubeletSim sim(o);
  if (!sim.Start().ok()) return {};
  const pid_t agent = devplug::testing::SpawnProcess({DEVPLUG_BENCH_DEVPLUGD, "--config", cfg},
                                                     dir + "/" + source + ".log");
  if (!sim.WaitForResource(kName, 1, 30s)) {
    std::fprintf(stderr, "agent did not register; see %s/%s.log\n", dir.c_str(), source.c_str());
    devplug::testing::StopProcess(agent, SIGTERM);
    return {};
  }
  std::this_thread::sleep_for(200ms);
  std::vector<double> ms;
  size_t timeouts = 0;
  bool healthy = true;
  for (int i = 0; i < events; ++i) {
    if (healthy)
      unlink(node.c_str());
    else
      mknod(node.c_str(), S_IFCHR | 0600, makedev(10, 232));
    healthy = !healthy;
    const size_t want = healthy ? 4 : 0;
    const auto t0 = Clock::now();
    {
      std::ofstream u(kUevent);
      u << "change";
    }
    const bool seen = sim.WaitUntil(
        [&](const auto& rs) {
          auto it = rs.find(kName);
          return it != rs.end() && it->second.healthy() == want;
        },
        5s);
    if (seen)
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    else
      ++timeouts;
    // Space the triggers: this measures single events, not the storm
    // rate limit (one event scan per 5 ms at most).
    std::this_thread::sleep_for(20ms);
  }
  if (idle != nullptr && idle_s > 0) {
    std::this_thread::sleep_for(1s);
    const double cpu0 = CpuSeconds(agent);
    auto before = Threads(agent);
    std::this_thread::sleep_for(std::chrono::seconds(idle_s));
    idle->cpu_s = CpuSeconds(agent) - cpu0;
    for (const auto& [tid, t] : Threads(agent))
      idle->wakeups.emplace_back(t.name,
                                 t.switches - (before.count(tid) ? before[tid].switches : 0));
  }
  devplug::testing::StopProcess(agent, SIGTERM);
  sim.Stop();
  return Summarize(ms, timeouts);
}

std::map<int, ThreadTicks> Threads(pid_t pid) {
  std::map<int, ThreadTicks> out;
  const std::string base = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& e : fs::directory_iterator(base)) {
    ThreadTicks t;
    std::ifstream comm(e.path() / "comm");
    std::getline(comm, t.name);
    std::ifstream st(e.path() / "status");
    std::string line;
    while (std::getline(st, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0 ||
          line.rfind("nonvoluntary_ctxt_switches:", 0) == 0)
        t.switches += std::stol(line.substr(line.find(':') + 1));
    }
    out[std::stoi(e.path().filename())] = t;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"devplugd hotplug benchmark"};
  int events = 200, idle = 60;
  app.add_option("--events", events, "node flips per source")->capture_default_str();
  app.add_option("--idle-seconds", idle, "idle measurement length")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0 || access(kUevent, W_OK) != 0) {
    std::fprintf(stderr, "needs root and a writable %s\n", kUevent);
    return 1;
  }
  char tmpl[] = "/tmp/devplug-udev-bench.XXXXXX";
  const std::string dir = mkdtemp(tmpl);

  Idle quiet;
  const Stats kernel = Measure(dir, "kernel", events, idle, &quiet);
  Stats udev;
  bool have_udevd = false;
  {
    devplug::testing::Udevd udevd;
    have_udevd = udevd.ready();
    if (have_udevd) udev = Measure(dir, "udev", events, 0, nullptr);
  }
  fs::remove_all(dir);

  std::printf("devplugd hotplug benchmark: kvm node flipped %d times per source, real uevents\n\n",
              events);
  std::printf("| source | events | p50 ms | p99 ms | max ms | missed | target p99 <= 5 ms |\n");
  std::printf("|--------|--------|--------|--------|--------|--------|--------------------|\n");
  auto row = [](const char* name, const Stats& s) {
    std::printf("| %-6s | %6zu | %6.2f | %6.2f | %6.2f | %6zu | %-18s |\n", name, s.n, s.p50, s.p99,
                s.max, s.timeouts, devplug::bench::Verdict(s.n && s.p99 <= 5));
  };
  row("kernel", kernel);
  if (have_udevd)
    row("udev", udev);
  else
    std::printf("| udev   | (systemd-udevd not available here)                          |\n");
  std::printf("\nidle %d s after the events, kubelet connected, resync off: CPU %.2f s\n", idle,
              quiet.cpu_s);
  std::printf("wake-ups (context switches) per thread:\n");
  for (const auto& [name, n] : quiet.wakeups) std::printf("  %-16s %6ld\n", name.c_str(), n);
  return 0;
}
