// fpga-opae benchmark: a rescan of many ports, and PreStartContainer on a
// port that already holds its accelerator (every container restart),
// through gRPC from the kubelet simulator to devplugd and back. The fixture
// has the kernel's DFL layout (tests/support/fpga_fixture.h) on tmpfs.
// Prints a table; exits 0 whatever the numbers.
//
//   devplug_fpga_bench [--cards 16] [--ports 4] [--runs 300]
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_agent.h"
#include "bench_module.h"
#include "bench_stats.h"
#include "fpga_fixture.h"
#include "kubelet_sim.h"
#include "test_util.h"

namespace {

using Clock = std::chrono::steady_clock;
using devplug::bench::Ms;
using devplug::bench::Stats;
using devplug::bench::Summarize;
using namespace std::chrono_literals;

constexpr char kName[] = "fpga.example.com/nlb3";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fpga-opae benchmark"};
  int cards = 16, ports = 4, runs = 300;
  app.add_option("--cards", cards, "FPGA cards in the fixture")->capture_default_str();
  app.add_option("--ports", ports, "ports per card")->capture_default_str();
  app.add_option("--runs", runs, "samples per measurement")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!devplug::testing::IsRoot()) {
    std::fprintf(stderr, "needs root (mknod)\n");
    return 1;
  }
  devplug::bench::PreferTmpfsForFixtures();
  devplug::testing::TempDir dir;
  const std::string root = dir.path() + "/host";
  devplug::testing::FpgaFixture fx(root);
  int port = 0;
  for (int c = 0; c < cards; ++c) {
    devplug::testing::FpgaCardSpec card;
    char pf[32], bridge[32];
    std::snprintf(pf, sizeof pf, "0000:%02x:00.0", 0x10 + 2 * c);
    std::snprintf(bridge, sizeof bridge, "0000:%02x:00.0", 0x0f + 2 * c);
    card.pf = pf;
    card.bridge = bridge;
    card.numa_node = c % 2;
    card.region = 2 * c;
    card.fme = c;
    card.ports.clear();
    for (int p = 0; p < ports; ++p) card.ports.push_back({port++, p, devplug::testing::kNlb3});
    fx.AddCard(card);
  }
  const int total = cards * ports;
  std::printf("fixture: %d cards x %d ports = %d ports under %s\n", cards, ports, total,
              root.c_str());
  const std::string body = std::string("name = \"") + kName +
                           "\"\nmodule = \"fpga-opae\"\nmode = \"region\"\nafu_id = \"" +
                           devplug::testing::kNlb3 + "\"\ninterface_id = \"" +
                           devplug::testing::kInterface + "\"\n";

  // 1. Rescans in process (the module's cost, through the real worker).
  Stats rescan;
  {
    auto inst = devplug::bench::OpenModule("fpga-opae", body, root);
    if (!inst || inst->devices()->size() != static_cast<size_t>(total)) {
      std::fprintf(stderr, "the module did not list %d ports\n", total);
      return 1;
    }
    std::vector<double> s;
    for (int i = 0; i < runs; ++i) s.push_back(devplug::bench::TimedRescan(*inst));
    rescan = Summarize(s);
  }

  // 2. PreStartContainer over gRPC on a port already programmed.
  const std::string plugins = dir.path() + "/p", cfg = dir.path() + "/devplug.toml";
  std::ofstream(cfg) << devplug::bench::AgentTable(plugins, root)
                     << "control_socket = \"\"\n[[resource]]\n"
                     << body;
  devplug::sim::KubeletSim sim(devplug::bench::SimOptions(plugins));
  if (!sim.Start().ok()) return 1;
  const pid_t agent = devplug::testing::SpawnProcess({DEVPLUG_BENCH_DEVPLUGD, "--config", cfg},
                                                     dir.path() + "/agent.log");
  const bool up = sim.WaitUntil(
      [&](const auto& rs) {
        auto it = rs.find(kName);
        return it != rs.end() && it->second.connected &&
               it->second.healthy() == static_cast<size_t>(total);
      },
      30s);
  if (!up) {
    std::fprintf(stderr, "agent did not list the ports; see %s/agent.log\n", dir.path().c_str());
    devplug::testing::StopProcess(agent, SIGTERM);
    return 1;
  }
  std::vector<double> s;
  size_t failed = 0;
  for (int i = 0; i < runs; ++i) {
    const std::string id = "dfl-port." + std::to_string(i % total);
    const auto t0 = Clock::now();
    grpc::Status st = sim.PreStartContainer(kName, {id});
    if (st.ok())
      s.push_back(Ms(Clock::now() - t0));
    else
      ++failed;
  }
  const Stats prestart = Summarize(s, failed);
  devplug::testing::StopProcess(agent, SIGTERM);

  std::printf("\n| measurement | p50 | p99 | max | target |\n|---|---|---|---|---|\n");
  devplug::bench::PrintRow("rescan of " + std::to_string(total) + " ports", rescan, "p99 <= 2 ms",
                           2.0);
  devplug::bench::PrintRow("PreStartContainer, port already programmed, via gRPC", prestart,
                           "p99 <= 1 ms", 1.0);
  if (failed) std::printf("\n%zu PreStartContainer calls failed\n", failed);
  return 0;
}
