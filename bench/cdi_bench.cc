// Devices by CDI name, measured: (1) rewriting a resource's spec for 110
// devices, as the module's worker does before a new list reaches the
// kubelet (render + write + rename; the list alternates between two that
// differ, so every call writes), also the rendering alone, and what a
// module's own Allocate answer adds (its allocation spec); (2) Allocate
// through devplugd for a resource with cdi = "cri" against the same
// resource with cdi "off", served by one devplugd, calls alternating
// between the two sockets so that machine noise hits both alike.
// Prints a table; exits 0 whatever the numbers.
//
//   devplug_cdi_bench [--rewrites 2000] [--calls 5000]
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <CLI/CLI.hpp>

#include "bench_agent.h"
#include "bench_stats.h"
#include "cdi/resource_cdi.h"
#include "cdi/spec.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "kubelet_sim.h"
#include "test_util.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using devplug::bench::Ms;
using devplug::bench::PrintRow;
using devplug::bench::Summarize;

devplug::DeviceList Devices(size_t n, bool variant) {
  devplug::DeviceList list;
  for (size_t i = 0; i < n; ++i) {
    devplug::Device d;
    d.id = "kvm-" + std::to_string(i);
    d.healthy = true;
    d.recipe.device_nodes.push_back({"/dev/kvm", "/dev/kvm", "rw"});
    if (variant && i == n - 1) d.recipe.envs.emplace_back("BENCH", "1");
    list.push_back(std::move(d));
  }
  std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return list;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"devplug CDI benchmark"};
  int rewrites = 2000, calls = 5000;
  app.add_option("--rewrites", rewrites, "spec rewrites to time");
  app.add_option("--calls", calls, "Allocate calls per socket");
  CLI11_PARSE(app, argc, argv);

  devplug::testing::TempDir tmp;
  const std::string dir = tmp.path();
  std::printf("| measurement | p50 | p99 | max | target |\n|---|---|---|---|---|\n");

  // 1. The spec for 110 devices. /dev/kvm is looked up on the host (or is
  // missing: the lookup's cost is paid either way).
  {
    auto cdi = *devplug::cdi::ResourceCdi::Make({.resource = "bench.example/kvm",
                                                 .mode = devplug::CdiMode::kCri,
                                                 .dir = dir + "/cdi",
                                                 .host_root = "/"});
    const auto a = Devices(110, false), b = Devices(110, true);
    cdi->Publish(a);  // creates the folder
    std::vector<double> write_ms, render_ms;
    for (int i = 0; i < rewrites; ++i) {
      auto t = Clock::now();
      cdi->Publish(i % 2 ? a : b);
      write_ms.push_back(Ms(Clock::now() - t));
      t = Clock::now();
      // As Publish renders: each distinct node looked up once.
      std::optional<std::optional<devplug::cdi::NodeInfo>> kvm;
      const auto r = devplug::cdi::Render(cdi->kind(), i % 2 ? a : b, [&](const std::string& p) {
        if (!kvm) kvm = devplug::cdi::LookUpNode("/", p);
        return *kvm;
      });
      render_ms.push_back(Ms(Clock::now() - t));
      if (r.devices.size() != 110) return 1;
    }
    if (!cdi->problem().empty()) {
      std::fprintf(stderr, "spec write failed: %s\n", cdi->problem().c_str());
      return 1;
    }
    PrintRow("spec rewrite, 110 devices (render, write, rename)", Summarize(write_ms), "<= 1 ms",
             1.0, /*by_p50=*/true);
    PrintRow("spec render only, 110 devices", Summarize(render_ms), "", 0);

    // What Allocate adds when the module answers for itself (its
    // allocate(), macvtap's /dev/tap<N>): the allocation's spec and the
    // index written before the answer. Eight IDs handed out in turn, so
    // each call also removes the spec of the ID's previous holder, as a
    // busy node's would.
    std::vector<double> alloc_ms;
    devplug::Recipe own;
    own.device_nodes.push_back({"/dev/kvm", "/dev/kvm", "rw"});
    own.envs.emplace_back("BENCH_TAP", "x");
    for (int i = 0; i < rewrites; ++i) {
      v1beta1::ContainerAllocateResponse resp;
      const std::vector<std::string> ids = {"kvm-" + std::to_string(i % 8)};
      const auto t = Clock::now();
      cdi->Answer(ids, own, /*default_recipe=*/false, &resp);
      alloc_ms.push_back(Ms(Clock::now() - t));
      if (resp.cdi_devices_size() != 1) {
        std::fprintf(stderr, "no allocation spec: %s\n", cdi->problem().c_str());
        return 1;
      }
    }
    PrintRow("allocation spec for a module's own answer (render, index, write)",
             Summarize(alloc_ms), "", 0);
  }

  // 2. Allocate with and without CDI names, one devplugd.
  const std::string plugins = dir + "/plugins";
  std::filesystem::create_directories(plugins);
  const std::string host_root = devplug::bench::KvmHostRoot(dir);
  std::string cfg =
      devplug::bench::AgentTable(plugins, host_root) + "cdi_dir = \"" + dir + "/agent-cdi\"\n";
  cfg += "[[resource]]\nname = \"bench.example/plain\"\nmodule = \"kvm\"\nshares = 110\n";
  cfg +=
      "[[resource]]\nname = \"bench.example/cdi\"\nmodule = \"kvm\"\nshares = 110\ncdi = \"cri\"\n";
  std::ofstream(dir + "/devplug.toml") << cfg;
  devplug::sim::KubeletSim sim(devplug::bench::SimOptions(plugins));
  if (!sim.Start().ok()) return 1;
  pid_t agent = devplug::testing::SpawnProcess(
      {DEVPLUG_BENCH_DEVPLUGD, "--config", dir + "/devplug.toml"}, dir + "/agent.log");
  if (!sim.WaitForResource("bench.example/plain", 1, 30s) ||
      !sim.WaitForResource("bench.example/cdi", 1, 30s)) {
    std::fprintf(stderr, "devplugd did not register; see %s/agent.log\n", dir.c_str());
    return 1;
  }
  const auto stub_for = devplug::bench::DevicePluginStub;

  auto plain = stub_for(plugins + "/devplug-bench.example_plain.sock");
  auto with = stub_for(plugins + "/devplug-bench.example_cdi.sock");
  v1beta1::AllocateRequest req;
  req.add_container_requests()->add_devices_ids("kvm-0");
  auto call = [&](v1beta1::DevicePlugin::Stub& stub, int want_names) {
    grpc::ClientContext ctx;
    v1beta1::AllocateResponse resp;
    return stub.Allocate(&ctx, req, &resp).ok() && resp.container_responses_size() == 1 &&
           resp.container_responses(0).cdi_devices_size() == want_names;
  };
  for (int i = 0; i < 200; ++i) call(*plain, 0), call(*with, 1);  // warm-up
  std::vector<double> us[2];
  for (int i = 0; i < calls; ++i) {
    for (int k = 0; k < 2; ++k) {
      const auto t = Clock::now();
      if (!call(k == 0 ? *plain : *with, k)) {
        std::fprintf(stderr, "Allocate failed (%s)\n", k == 0 ? "plain" : "cdi");
        return 1;
      }
      us[k].push_back(Ms(Clock::now() - t));
    }
  }
  devplug::testing::StopProcess(agent, SIGTERM);
  const auto p = Summarize(us[0]), c = Summarize(us[1]);
  PrintRow("Allocate, cdi \"off\"", p, "", 0);
  char target[64];
  std::snprintf(target, sizeof target, "p50 <= %.3f ms (+10%%)", p.p50 * 1.1);
  PrintRow("Allocate, cdi \"cri\"", c, target, p.p50 * 1.1, /*by_p50=*/true);
  std::printf("\nAllocate p50 with CDI names: %+.1f%% against without\n",
              (c.p50 / p.p50 - 1) * 100);
  return 0;
}
