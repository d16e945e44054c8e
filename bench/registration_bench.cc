// Kubelet restarts, both ways of registering: devplugd with one resource
// against the kubelet simulator, which is stopped and started again (its
// kubelet.sock made anew, every plugin connection closed, the device-plugins
// folder wiped; plugins_registry left alone, as the kubelet does).
//
// Timed from the simulator's start returning (kubelet.sock is there, the
// plugin watcher has walked its folder) to the simulator holding the
// resource's device list on a new stream. Counted: the sockets devplugd
// made anew, and the CPU time devplugd spent over all the restarts (what a
// restart costs it).
// Prints a table; exits 0 whatever the numbers.
//
//   devplug_registration_bench [--restarts 30]
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_agent.h"
#include "bench_proc.h"
#include "bench_stats.h"
#include "kubelet_sim.h"
#include "test_util.h"

namespace {

using Clock = std::chrono::steady_clock;
using devplug::bench::CpuSeconds;
using devplug::bench::Ms;
using devplug::bench::Stats;
using devplug::bench::Summarize;
using namespace std::chrono_literals;

constexpr char kName[] = "devices.example.com/bench";

struct Result {
  Stats again;
  int sockets_made = 0;
  double cpu_ms = 0;
};

Result Run(bool watcher, int restarts) {
  Result out;
  devplug::testing::TempDir dir;
  const std::string plugins = dir.path() + "/p", registry = dir.path() + "/plugins_registry",
                    cfg = dir.path() + "/devplug.toml";
  std::ofstream(cfg) << devplug::bench::AgentTable(plugins, dir.path()) << "control_socket = \"\"\n"
                     << (watcher ? "registration = \"plugin-watcher\"\nplugins_registry_dir = \"" +
                                       registry + "\"\n"
                                 : std::string())
                     << "[[resource]]\nname = \"" << kName << "\"\nmodule = \"kvm\"\n"
                     << "shares = 10\ndevice = \"/dev/null\"\n";
  devplug::sim::KubeletSim::Options o = devplug::bench::SimOptions(plugins);
  if (watcher) o.plugins_registry = registry;
  devplug::sim::KubeletSim sim(o);
  if (!sim.Start().ok()) return out;
  const pid_t agent = devplug::testing::SpawnProcess({DEVPLUG_BENCH_DEVPLUGD, "--config", cfg},
                                                     dir.path() + "/agent.log");
  const std::string socket =
      (watcher ? registry : plugins) + "/devplug-devices.example.com_bench.sock";
  auto registered = [&](uint64_t n) { return sim.WaitForResource(kName, n, 10s); };
  if (!registered(1)) {
    std::fprintf(stderr, "devplugd did not register; see %s/agent.log\n", dir.path().c_str());
    devplug::testing::StopProcess(agent, SIGTERM);
    return out;
  }
  std::vector<double> samples;
  size_t timeouts = 0;
  const double cpu0 = CpuSeconds(agent) * 1000.0;
  for (int i = 0; i < restarts; ++i) {
    const auto before = devplug::testing::FileIdentity(socket);
    sim.Stop();
    std::this_thread::sleep_for(100ms);  // the kubelet is away a moment
    if (!sim.Start().ok()) break;
    const auto t0 = Clock::now();
    if (registered(static_cast<uint64_t>(i) + 2))
      samples.push_back(Ms(Clock::now() - t0));
    else
      ++timeouts;
    if (devplug::testing::FileIdentity(socket) != before) ++out.sockets_made;
    std::this_thread::sleep_for(200ms);  // settle before the next one
  }
  out.cpu_ms = CpuSeconds(agent) * 1000.0 - cpu0;
  out.again = Summarize(samples, timeouts);
  devplug::testing::StopProcess(agent, SIGTERM);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kubelet restart benchmark"};
  int restarts = 30;
  app.add_option("--restarts", restarts, "kubelet restarts per mode")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const Result direct = Run(false, restarts), watched = Run(true, restarts);
  std::printf("\n| measurement | p50 | p99 | max | target |\n|---|---|---|---|---|\n");
  devplug::bench::PrintRow("kubelet restart -> listed again, Register on kubelet.sock",
                           direct.again, "", 0);
  devplug::bench::PrintRow("kubelet restart -> listed again, plugin watcher", watched.again,
                           "p99 <= 1 s (one reconcile)", 1000.0);
  std::printf("\n| over %d restarts | sockets made anew | devplugd CPU |\n|---|---|---|\n",
              restarts);
  std::printf("| Register on kubelet.sock | %d | %.0f ms |\n", direct.sockets_made, direct.cpu_ms);
  std::printf("| plugin watcher | %d (target 0) | %.0f ms |\n", watched.sockets_made,
              watched.cpu_ms);
  if (direct.again.timeouts || watched.again.timeouts)
    std::printf("\n%zu + %zu restarts not listed again within 10 s\n", direct.again.timeouts,
                watched.again.timeouts);
  return 0;
}
