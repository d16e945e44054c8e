// cex benchmark: a rescan of 16 cards x 16 domains (the module's own cost,
// through the real worker), and PreStartContainer of a new container via
// gRPC from the kubelet simulator to devplugd and back: create the node,
// write and read back its four masks, find its /dev node. The fixture has
// the kernel's AP bus layout (tests/support/cex_fixture.h) on tmpfs; the
// zcrypt writes are the emulator's (modules/cex/emulator.h), so the second
// row times the module and the agent, not a kernel. Prints a table; exits 0
// whatever the numbers.
//
//   devplug_cex_bench [--cards 16] [--domains 16] [--runs 300]
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apbus.h"
#include "bench_agent.h"
#include "bench_module.h"
#include "bench_stats.h"
#include "cex_fixture.h"
#include "kubelet_sim.h"
#include "test_util.h"

namespace {

using Clock = std::chrono::steady_clock;
using devplug::bench::Ms;
using devplug::bench::Stats;
using devplug::bench::Summarize;
using namespace std::chrono_literals;

constexpr char kName[] = "cex.example.com/cca";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cex benchmark"};
  int cards = 16, domains = 16, runs = 300;
  app.add_option("--cards", cards, "crypto cards in the fixture")->capture_default_str();
  app.add_option("--domains", domains, "domains (queues) per card")->capture_default_str();
  app.add_option("--runs", runs, "samples per measurement")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!devplug::testing::IsRoot()) {
    std::fprintf(stderr, "needs root (mknod)\n");
    return 1;
  }
  devplug::bench::PreferTmpfsForFixtures();
  devplug::testing::TempDir dir;
  const std::string root = dir.path() + "/host";
  devplug::testing::CexFixture fx(root);
  std::vector<std::string> ids;
  for (int c = 0; c < cards; ++c) {
    devplug::testing::CexCardSpec card;
    card.adapter = c;
    card.queues.clear();
    for (int d = 0; d < domains; ++d) {
      card.queues.push_back({.domain = d});
      ids.push_back(devplug::testing::CexFixture::Hex(c, 2) + "." +
                    devplug::testing::CexFixture::Hex(d, 4));
    }
    fx.AddCard(card);
  }
  const int total = cards * domains;
  std::printf("fixture: %d cards x %d domains = %d APQNs under %s\n", cards, domains, total,
              root.c_str());
  const std::string body =
      std::string("name = \"") + kName + "\"\nmodule = \"cex\"\npoll_interval = \"0s\"\n";

  // 1. Rescans in process, with the installed module; and the AP bus walk
  // alone (ScanApBus), the part that reads sysfs.
  Stats walk;
  {
    const devplug::common::HostRoot host_root(root);
    std::vector<double> s;
    for (int i = 0; i < runs; ++i) {
      const auto t0 = Clock::now();
      const auto bus = devplug::cex::ScanApBus(host_root);
      s.push_back(Ms(Clock::now() - t0));
      if (bus.queues.size() != static_cast<size_t>(total)) {
        std::fprintf(stderr, "the walk found %zu queues\n", bus.queues.size());
        return 1;
      }
    }
    walk = Summarize(s);
  }
  Stats rescan;
  {
    auto inst = devplug::bench::OpenModule("cex", body, root);
    if (!inst || inst->devices()->size() != static_cast<size_t>(total)) {
      std::fprintf(stderr, "the module did not list %d APQNs\n", total);
      return 1;
    }
    std::vector<double> s;
    for (int i = 0; i < runs; ++i) s.push_back(devplug::bench::TimedRescan(*inst));
    rescan = Summarize(s);
  }

  // 2. PreStartContainer over gRPC, each on an APQN without a node yet
  // (a new container), then again on the same one (a container restart).
  const std::string plugins = dir.path() + "/p", cfg = dir.path() + "/devplug.toml";
  std::ofstream(cfg) << devplug::bench::AgentTable(plugins, root)
                     << "control_socket = \"\"\n[[resource]]\nname = \"" << kName
                     << "\"\nmodule = \"" << DEVPLUG_BENCH_FAKE_MODULE_DIR
                     << "/cex-fixture.so\"\npoll_interval = \"0s\"\n";
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
    std::fprintf(stderr, "agent did not list the APQNs; see %s/agent.log\n", dir.path().c_str());
    devplug::testing::StopProcess(agent, SIGTERM);
    return 1;
  }
  std::vector<double> fresh, again;
  size_t failed = 0;
  const int n = std::min(runs, total);  // one node each; the kernel has 256
  for (int i = 0; i < n; ++i) {
    for (std::vector<double>* into : {&fresh, &again}) {
      const auto t0 = Clock::now();
      grpc::Status st = sim.PreStartContainer(kName, {ids[static_cast<size_t>(i)]});
      if (st.ok())
        into->push_back(Ms(Clock::now() - t0));
      else
        ++failed;
    }
  }
  devplug::testing::StopProcess(agent, SIGTERM);

  std::printf("\n| measurement | p50 | p99 | max | target |\n|---|---|---|---|---|\n");
  devplug::bench::PrintRow(
      "rescan of " + std::to_string(cards) + " cards x " + std::to_string(domains) + " domains",
      rescan, "p99 <= 2 ms", 2.0);
  devplug::bench::PrintRow("  of which the AP bus walk (sysfs reads)", walk, "", 0.0);
  devplug::bench::PrintRow("PreStartContainer, new node (create, masks, /dev), via gRPC",
                           Summarize(fresh, failed), "p50 <= 10 ms", 10.0,
                           /*by_p50=*/true);
  devplug::bench::PrintRow("PreStartContainer, container restart (node reused), via gRPC",
                           Summarize(again), "", 0.0);
  if (failed) std::printf("\n%zu PreStartContainer calls failed\n", failed);
  return 0;
}
