// The nvidia module through the fake libnvidia-ml (which, like the
// driver's, serialises its calls behind one lock held across event waits):
//
//  1. GetPreferredAllocation, 4 of 8 GPUs with a full NVLink topology (every
//     pair linked, as behind NVSwitches) and with two NVLink islands of
//     four: in process (ModuleInstance::PreferredAllocation round trip:
//     worker thread hop, module call, answer) and through devplugd (the
//     kubelet simulator's gRPC call over the resource's Unix socket);
//  2. GetPreferredAllocation over 56 MIG devices (8 GPUs x 7 1g.10gb), in
//     process;
//  3. start (devplugd spawned -> every resource registered with all its
//     devices) and stop (SIGTERM -> exit) with 1, 2 and 4 nvidia resources
//     sharing one NVML session.
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

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "bench_agent.h"
#include "bench_module.h"
#include "bench_stats.h"
#include "gpu_fixture.h"
#include "kubelet_sim.h"
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
      if (full || i / 4 == j / 4)
        lines.push_back("nvlink " + std::to_string(i) + " " + std::to_string(j) + " 2");
  return lines;
}

std::string Body(const std::string& lib) { return "nvml_library = \"" + lib + "\"\n"; }

Stats InProcess(const std::string& root, const std::vector<std::string>& ids, int calls,
                const std::string& lib, const std::string& extra = "",
                const std::vector<std::string>& must = {}) {
  auto inst = devplug::bench::OpenModule(
      "nvidia", std::string("name = \"") + kName + "\"\nmodule = \"nvidia\"\n" + Body(lib) + extra,
      root);
  if (!inst) {
    std::fprintf(stderr, "the nvidia module did not start on the fixture\n");
    return {};
  }
  std::vector<double> us;
  for (int i = 0; i < calls; i++) {
    std::promise<void> done;
    const auto t0 = Clock::now();
    inst->PreferredAllocation(ids, must, 4, [&](auto) { done.set_value(); });
    done.get_future().get();
    us.push_back(Us(Clock::now() - t0));
  }
  return Summarize(us);
}

Stats ThroughAgent(const std::string& dir, const std::string& root,
                   const std::vector<std::string>& ids, int calls, const std::string& lib) {
  const std::string plugins = dir + "/p", cfg = dir + "/nvidia.toml";
  std::ofstream(cfg) << devplug::bench::AgentTable(plugins, root) << "[[resource]]\nname = \""
                     << kName << "\"\nmodule = \"nvidia\"\n"
                     << Body(lib);
  devplug::sim::KubeletSim sim(devplug::bench::SimOptions(plugins));
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

// Eight H100s: GPUs 0-1 split into 7 x 1g.10gb, 2-3 into 2 x 3g.40gb, 4-5
// into 3 x 2g.20gb, 6-7 whole.
struct MixedNode {
  std::vector<devplug::testing::FakeGpu> gpus;
  std::vector<devplug::testing::FakeMig> migs;
};

MixedNode Mixed(bool all_small) {
  MixedNode n;
  n.gpus = Gpus();
  for (auto& g : n.gpus) g.mib = devplug::testing::kH100Mib;
  int k = 0;
  auto uuid = [&] {
    char u[64];
    std::snprintf(u, sizeof(u), "MIG-%08d-0000-4000-8000-000000000000", k++);
    return std::string(u);
  };
  for (int g = 0; g < 8; g++) {
    if (all_small || g < 2) {
      for (unsigned gi = 7; gi < 14; gi++)
        n.migs.push_back(devplug::testing::Mig1g10gb(g, uuid(), gi));
    } else if (g < 4) {
      for (unsigned gi : {1u, 2u}) n.migs.push_back(devplug::testing::Mig3g40gb(g, uuid(), gi));
    } else if (g < 6) {
      for (unsigned gi : {3u, 4u, 5u}) n.migs.push_back({g, uuid(), gi, 0, 2, 2, 19968});
    }
  }
  return n;
}

struct StartStop {
  std::vector<double> start_ms, stop_ms;
};

// devplugd with the first n of: mig-1g.10gb (14 devices), mig-3g.40gb (4),
// mig-2g.20gb (6), whole GPUs (2).
StartStop Lifecycle(const std::string& dir, const std::string& root, const std::string& lib, int n,
                    int runs) {
  struct Res {
    const char* name;
    const char* body;
    size_t devices;
  } all[] = {{"nvidia.com/mig-1g.10gb", "mig = \"only\"\nmig_profile = \"1g.10gb\"\n", 14},
             {"nvidia.com/mig-3g.40gb", "mig = \"only\"\nmig_profile = \"3g.40gb\"\n", 4},
             {"nvidia.com/mig-2g.20gb", "mig = \"only\"\nmig_profile = \"2g.20gb\"\n", 6},
             {"nvidia.com/gpu", "", 2}};
  const std::string plugins = dir + "/p", cfg = dir + "/lifecycle.toml";
  {
    std::ofstream out(cfg);
    out << devplug::bench::AgentTable(plugins, root);
    for (int i = 0; i < n; i++)
      out << "[[resource]]\nname = \"" << all[i].name << "\"\nmodule = \"nvidia\"\n"
          << Body(lib) << "device_list_strategy = \"volume-mounts\"\n"
          << all[i].body;
  }
  StartStop out;
  for (int run = 0; run < runs; run++) {
    devplug::sim::KubeletSim sim(devplug::bench::SimOptions(plugins));
    if (!sim.Start().ok()) return {};
    const auto t0 = Clock::now();
    const pid_t agent = devplug::testing::SpawnProcess({DEVPLUG_BENCH_DEVPLUGD, "--config", cfg},
                                                       dir + "/lifecycle.log");
    const bool up = sim.WaitUntil(
        [&](const auto& rs) {
          for (int i = 0; i < n; i++)
            if (!rs.count(all[i].name) || rs.at(all[i].name).healthy() != all[i].devices)
              return false;
          return true;
        },
        30s);
    if (!up) {
      std::fprintf(stderr, "%d resources did not register; see %s/lifecycle.log\n", n, dir.c_str());
      devplug::testing::StopProcess(agent, SIGKILL);
      return {};
    }
    out.start_ms.push_back(Us(Clock::now() - t0) / 1000);
    const auto t1 = Clock::now();
    devplug::testing::StopProcess(agent, SIGTERM);
    out.stop_ms.push_back(Us(Clock::now() - t1) / 1000);
    sim.Stop();
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nvidia GetPreferredAllocation"};
  int calls = 2000;
  app.add_option("--calls", calls, "calls per measurement");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);  // the in-process instances' discovery lines
  if (geteuid() != 0) {
    std::fprintf(stderr, "needs root (mknod for /dev/nvidia* fixtures)\n");
    return 1;
  }
  const std::string lib = std::string(DEVPLUG_BENCH_FAKE_MODULE_DIR) + "/fake_nvml.so";
  std::printf(
      "| topology (4 of 8 GPUs) | path | p50 | p99 | max | target |\n|---|---|---|---|---|---|\n");
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

  {
    devplug::testing::TempDir tmp;
    devplug::testing::GpuFixture fx(tmp / "host", tmp / "nvml");
    const MixedNode node = Mixed(true);
    std::vector<int> enabled = {0, 1, 2, 3, 4, 5, 6, 7};
    if (!fx.Build(node.gpus) || !fx.Mig(node.gpus, enabled, node.migs)) {
      std::fprintf(stderr, "fixture failed\n");
      return 1;
    }
    std::vector<std::string> ids;
    for (const auto& m : node.migs) ids.push_back(m.uuid);
    std::printf(
        "\n| MIG (56 x 1g.10gb on 8 GPUs) | path | p50 | p99 | max | target |\n"
        "|---|---|---|---|---|---|\n");
    const Stats free4 = InProcess(tmp / "host", ids, calls, lib, "mig = \"only\"\n");
    std::printf("| 4 of 56 | module (in process) | %.0f us | %.0f us | %.0f us | <= 1 ms p99 |\n",
                free4.p50, free4.p99, free4.max);
    const Stats with = InProcess(tmp / "host", ids, calls, lib, "mig = \"only\"\n", {ids[30]});
    std::printf(
        "| 4 of 56, 1 must_include | module (in process) | %.0f us | %.0f us | %.0f us | <= 1 ms "
        "p99 |\n",
        with.p50, with.p99, with.max);
  }

  {
    devplug::testing::TempDir tmp;
    devplug::testing::GpuFixture fx(tmp / "host", tmp / "nvml");
    const MixedNode node = Mixed(false);
    if (!fx.Build(node.gpus) || !fx.Mig(node.gpus, {0, 1, 2, 3, 4, 5}, node.migs)) {
      std::fprintf(stderr, "fixture failed\n");
      return 1;
    }
    const int runs = 7;
    std::printf(
        "\n| nvidia resources (one devplugd, %d runs) | start p50 | start max | stop p50 | "
        "stop max | target |\n|---|---|---|---|---|---|\n",
        runs);
    for (int n : {1, 2, 4}) {
      StartStop r = Lifecycle(tmp.path(), tmp / "host", lib, n, runs);
      if (r.start_ms.empty()) return 1;
      const Stats start = Summarize(r.start_ms), stop = Summarize(r.stop_ms);
      std::printf(
          "| %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms | start <= 1 resource + 10 ms, "
          "stop <= 5 ms |\n",
          n, start.p50, start.max, stop.p50, stop.max);
    }
  }
  return 0;
}
