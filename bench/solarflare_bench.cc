// solarflare benchmark: a rescan of a node with many Solarflare NICs among
// the hundreds of virtual interfaces a busy Kubernetes node has, an Allocate
// of a shared Onload device, and nic mode's PreStartContainer (the pod's
// lookup in PodResources plus running the attach command), both through gRPC
// from the kubelet simulator to devplugd and back. The fixture has the
// kernel's net and PCI layout (tests/support/onload_fixture.h) on tmpfs.
// Prints a table; exits 0 whatever the numbers.
//
//   devplug_solarflare_bench [--nics 16] [--veths 500] [--runs 300]
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_agent.h"
#include "bench_module.h"
#include "bench_stats.h"
#include "kubelet_sim.h"
#include "onload_fixture.h"
#include "test_util.h"

namespace {

using Clock = std::chrono::steady_clock;
using devplug::bench::Ms;
using devplug::bench::Stats;
using devplug::bench::Summarize;
using namespace std::chrono_literals;

constexpr char kShared[] = "amd.com/onload";
constexpr char kNic[] = "amd.com/onload-nic";

std::string Address(int i) {
  char a[32];
  std::snprintf(a, sizeof a, "0000:%02x:00.%d", 0x10 + i / 2, i % 2);
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"solarflare benchmark"};
  int nics = 16, veths = 500, runs = 300;
  app.add_option("--nics", nics, "Solarflare NICs in the fixture")->capture_default_str();
  app.add_option("--veths", veths, "virtual interfaces beside them")->capture_default_str();
  app.add_option("--runs", runs, "samples per measurement")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!devplug::testing::IsRoot()) {
    std::fprintf(stderr, "needs root (mknod)\n");
    return 1;
  }
  devplug::bench::PreferTmpfsForFixtures();
  devplug::testing::TempDir dir;
  const std::string root = dir.path() + "/host";
  devplug::testing::OnloadFixture fx(root);
  if (!fx.Install()) return 1;
  for (int i = 0; i < nics; ++i)
    fx.AddNic({.address = Address(i),
               .ifname = "ens" + std::to_string(i),
               .numa_node = i % 2,
               .onload_index = i});
  for (int i = 0; i < veths; ++i) fx.AddVirtual("veth" + std::to_string(i));
  std::printf("fixture: %d Solarflare NICs and %d virtual interfaces under %s\n", nics, veths,
              root.c_str());

  // 1. Rescans in process (the module's cost, through the real worker).
  Stats rescan;
  {
    auto inst = devplug::bench::OpenModule(
        "solarflare",
        std::string("name = \"") + kNic +
            "\"\nmodule = \"solarflare\"\nmode = \"nic\"\nrequire_link = true\n",
        root);
    if (!inst || inst->devices()->size() != static_cast<size_t>(nics)) {
      std::fprintf(stderr, "the module did not list %d NICs\n", nics);
      return 1;
    }
    std::vector<double> s;
    for (int i = 0; i < runs; ++i) s.push_back(devplug::bench::TimedRescan(*inst));
    rescan = Summarize(s);
  }

  // 2. and 3. through devplugd.
  const std::string attach = dir.path() + "/attach.sh";
  devplug::testing::WriteFile(attach, "#!/bin/sh\nexit 0\n");
  chmod(attach.c_str(), 0755);
  const std::string plugins = dir.path() + "/p", cfg = dir.path() + "/devplug.toml",
                    pods = dir.path() + "/pod-resources.sock";
  std::ofstream(cfg) << devplug::bench::AgentTable(plugins, root)
                     << "control_socket = \"\"\npod_resources_socket = \"" << pods << "\"\n"
                     << "[[resource]]\nname = \"" << kShared << "\"\nmodule = \"solarflare\"\n"
                     << "[[resource]]\nname = \"" << kNic << "\"\nmodule = \"solarflare\"\n"
                     << "mode = \"nic\"\nattach_command = \"" << attach << "\"\n";
  devplug::sim::KubeletSim::Options o = devplug::bench::SimOptions(plugins);
  o.pod_resources_socket = pods;
  o.pod_resources_qps = 1e6;
  o.pod_resources_burst = 1000000;
  devplug::sim::KubeletSim sim(o);
  if (!sim.Start().ok()) return 1;
  const pid_t agent = devplug::testing::SpawnProcess({DEVPLUG_BENCH_DEVPLUGD, "--config", cfg},
                                                     dir.path() + "/agent.log");
  const bool up = sim.WaitUntil(
      [&](const auto& rs) {
        auto a = rs.find(kShared), b = rs.find(kNic);
        return a != rs.end() && a->second.connected && a->second.healthy() == 100 &&
               b != rs.end() && b->second.connected &&
               b->second.healthy() == static_cast<size_t>(nics);
      },
      30s);
  if (!up) {
    std::fprintf(stderr, "agent did not list the devices; see %s/agent.log\n", dir.path().c_str());
    devplug::testing::StopProcess(agent, SIGTERM);
    return 1;
  }
  size_t failed = 0;
  std::vector<double> s;
  for (int i = 0; i < runs; ++i) {
    v1beta1::ContainerAllocateResponse resp;
    const auto t0 = Clock::now();
    grpc::Status st = sim.Allocate(kShared, {"onload-" + std::to_string(i % 100)}, &resp);
    if (st.ok() && resp.mounts_size() == 6)
      s.push_back(Ms(Clock::now() - t0));
    else
      ++failed;
  }
  const Stats allocate = Summarize(s, failed);
  for (int i = 0; i < nics; ++i)
    sim.BindPod("bench", "pod-" + std::to_string(i), "main", kNic, {Address(i)});
  s.clear();
  size_t prestart_failed = 0;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = Clock::now();
    grpc::Status st = sim.PreStartContainer(kNic, {Address(i % nics)});
    if (st.ok())
      s.push_back(Ms(Clock::now() - t0));
    else
      ++prestart_failed;
  }
  const Stats prestart = Summarize(s, prestart_failed);
  devplug::testing::StopProcess(agent, SIGTERM);

  std::printf("\n| measurement | p50 | p99 | max | target |\n|---|---|---|---|---|\n");
  devplug::bench::PrintRow(
      "rescan, " + std::to_string(nics) + " NICs + " + std::to_string(veths) + " veths", rescan,
      "p99 <= 2 ms", 2.0);
  devplug::bench::PrintRow("Allocate, shared, via gRPC", allocate, "p99 <= 1 ms", 1.0);
  devplug::bench::PrintRow("PreStartContainer, nic mode: pod lookup + attach command, via gRPC",
                           prestart, "p99 <= 10 ms", 10.0);
  if (failed || prestart_failed)
    std::printf("\n%zu Allocate and %zu PreStartContainer calls failed\n", failed, prestart_failed);
  return 0;
}
