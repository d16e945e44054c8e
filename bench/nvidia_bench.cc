// GetPreferredAllocation of the nvidia module: 4 of 8 GPUs with a full
// NVLink topology (every pair linked, as behind NVSwitches) and with two
// NVLink islands of four, through the fake libnvidia-ml.
//
//  - in process: ModuleInstance::PreferredAllocation round trip (worker
//    thread hop, module call, answer);
//  - through devplugd: the kubelet simulator's GetPreferredAllocation gRPC
//    call over the resource's Unix socket.
//
//   devplug_nvidia_bench [--calls 2000]   (needs root for the device nodes)
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "config/config.h"
#include "gpu_fixture.h"
#include "bench_stats.h"
#include "kubelet_sim.h"
#include "modules/loaded_module.h"
#include "modules/module_instance.h"
#include "test_util.h"

namespace {

using devplug::bench::Stats;
using devplug::bench::Summarize;

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr char kName[] = "nvidia.com/gpu";



double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

std::vector<devplug::testing::FakeGpu> Gpus() {
  std::vector<devplug::testing::FakeGpu> g;
  for (int i = 0; i < 8; i++) {
    char uuid[64], pci[16];
    std::snprintf(uuid, sizeof(uuid), "GPU-%08d-0000-4000-8000-00000000000%d", i, i);
    std::snprintf(pci, sizeof(pci), "0000:%02x:00.0", 0x10 + i * 0x10);
    g.push_back({uuid, pci, static_cast<unsigned>(i), i / 4, "NVIDIA H100 80GB HBM3"});
  }
  return g;
}

std::vector<std::string> Topology(bool full) {
  std::vector<std::string> lines;
  for (int i = 0; i < 8; i++)
    for (int j = i + 1; j < 8; j++)
      if (full || i / 4 == j / 4) lines.push_back("nvlink " + std::to_string(i) + " " + std::to_string(j) + " 2");
  return lines;
}

std::string Body(const std::string& lib) { return "nvml_library = \"" + lib + "\"\n"; }

Stats InProcess(const std::string& root, const std::vector<std::string>& ids, int calls,
                const std::string& lib) {
  auto cfg = devplug::config::LoadString(std::string("[[resource]]\nname = \"") + kName +
                                             "\"\nmodule = \"nvidia\"\n" + Body(lib),
                                         "bench.toml", {});
  auto m = devplug::modules::LoadedModule::Load(std::string(DEVPLUG_BENCH_MODULE_DIR) + "/nvidia.so");
  if (!cfg.ok() || !m.ok()) return {};
  devplug::modules::ModuleInstance::Options o;
  o.host_root = root;
  auto inst = devplug::modules::ModuleInstance::Create(*m, cfg->resources.at(0), std::move(o));
  if (!inst.ok()) {
    std::fprintf(stderr, "%s\n", inst.status().message().c_str());
    return {};
  }
  std::vector<double> us;
  for (int i = 0; i < calls; i++) {
    std::promise<void> done;
    const auto t0 = Clock::now();
    (*inst)->PreferredAllocation(ids, {}, 4, [&](auto) { done.set_value(); });
    done.get_future().get();
    us.push_back(Us(Clock::now() - t0));
  }
  return Summarize(us);
}

Stats ThroughAgent(const std::string& dir, const std::string& root,
                   const std::vector<std::string>& ids, int calls, const std::string& lib) {
  const std::string plugins = dir + "/p", cfg = dir + "/nvidia.toml";
  std::ofstream(cfg) << "[agent]\nplugin_dir = \"" << plugins << "\"\nmodule_dir = \""
                     << DEVPLUG_BENCH_MODULE_DIR << "\"\nhost_root = \"" << root
                     << "\"\nlog_level = \"warn\"\nresync_interval = \"0s\"\n[[resource]]\nname = \""
                     << kName << "\"\nmodule = \"nvidia\"\n" << Body(lib);
  devplug::sim::KubeletSim::Options o;
  o.dir = plugins;
  o.owns_dir = true;  // a temporary directory
  o.checkpoint_noise = false;
  devplug::sim::KubeletSim sim(o);
  if (!sim.Start().ok()) return {};
  const pid_t agent =
      devplug::testing::SpawnProcess({DEVPLUG_BENCH_DEVPLUGD, "--config", cfg}, dir + "/agent.log");
  std::vector<double> us;
  if (sim.WaitUntil([](const auto& rs) { return rs.count(kName) && rs.at(kName).healthy() == 8; },
                    30s)) {
    std::vector<std::string> out;
    for (int i = 0; i < calls; i++) {
      const auto t0 = Clock::now();
      if (!sim.GetPreferredAllocation(kName, ids, {}, 4, &out).ok()) continue;
      us.push_back(Us(Clock::now() - t0));
    }
  } else {
    std::fprintf(stderr, "agent did not register 8 GPUs; see %s/agent.log\n", dir.c_str());
  }
  devplug::testing::StopProcess(agent, SIGTERM);
  sim.Stop();
  return Summarize(us);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nvidia GetPreferredAllocation"};
  int calls = 2000;
  app.add_option("--calls", calls, "calls per measurement");
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    std::fprintf(stderr, "needs root (mknod for /dev/nvidia* fixtures)\n");
    return 1;
  }
  const std::string lib = std::string(DEVPLUG_BENCH_FAKE_MODULE_DIR) + "/fake_nvml.so";
  std::printf("| topology (4 of 8 GPUs) | path | p50 | p99 | max | target |\n|---|---|---|---|---|---|\n");
  for (bool full : {true, false}) {
    devplug::testing::TempDir tmp;
    devplug::testing::GpuFixture fx(tmp / "host", tmp / "nvml");
    const auto gpus = Gpus();
    if (!fx.Build(gpus, Topology(full))) {
      std::fprintf(stderr, "fixture failed\n");
      return 1;
    }
    std::vector<std::string> ids;
    for (const auto& g : gpus) ids.push_back(g.uuid);
    const char* name = full ? "full NVLink (all pairs)" : "two NVLink islands";
    const Stats in = InProcess(tmp / "host", ids, calls, lib);
    std::printf("| %s | module (in process) | %.0f us | %.0f us | %.0f us | <= 1 ms |\n", name,
                in.p50, in.p99, in.max);
    const Stats grpc = ThroughAgent(tmp.path(), tmp / "host", ids, calls, lib);
    std::printf("| %s | gRPC through devplugd | %.0f us | %.0f us | %.0f us | <= 1 ms |\n", name,
                grpc.p50, grpc.p99, grpc.max);
  }
  return 0;
}
