// Pod identity and release benchmark: what release tracking costs the
// kubelet's shared PodResources API, how fast pod_of answers, and how soon a
// device is released after its pod is gone. devplugd serves several
// resources of the test module fake_release against the kubelet simulator's
// PodResources API. Prints a table; exits 0 whatever the numbers.
//
//   devplug_release_bench [--resources 8] [--poll-ms 500] [--grace-ms 1000] [--seconds 10]
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_stats.h"
#include "kubelet/pod_resources.h"
#include "kubelet_sim.h"
#include "test_util.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

size_t Lines(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind("release", 0) == 0;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"devplugd release-tracking benchmark"};
  int resources = 8, poll_ms = 500, grace_ms = 1000, seconds = 10;
  app.add_option("--resources", resources, "tracked resources")->capture_default_str();
  app.add_option("--poll-ms", poll_ms, "pod_resources_poll")->capture_default_str();
  app.add_option("--grace-ms", grace_ms, "release_grace")->capture_default_str();
  app.add_option("--seconds", seconds, "steady state to count Lists over")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  char tmpl[] = "/tmp/devplug-release-bench.XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string plugins = dir + "/p", pods_socket = dir + "/pod-resources/kubelet.sock";
  const std::string log = dir + "/release.log";
  std::string cfg = "[agent]\nplugin_dir = \"" + plugins + "\"\nlog_level = \"warn\"\n" +
                    "resync_interval = \"0s\"\npod_resources_socket = \"" + pods_socket +
                    "\"\npod_resources_poll = \"" + std::to_string(poll_ms) +
                    "ms\"\nrelease_grace = \"" + std::to_string(grace_ms) +
                    "ms\"\nkubelet_settle = \"0s\"\n";
  for (int i = 0; i < resources; ++i)
    cfg += "[[resource]]\nname = \"bench.example/r" + std::to_string(i) + "\"\nmodule = \"" +
           DEVPLUG_BENCH_FAKE_MODULE_DIR "/fake_release.so\"\ncount = 4\nrelease_log = \"" + log +
           "\"\n";
  std::ofstream(dir + "/devplug.toml") << cfg;

  devplug::sim::KubeletSim::Options o;
  o.dir = plugins;
  o.owns_dir = true;  // a temporary directory
  o.checkpoint_noise = false;
  o.pod_resources_socket = pods_socket;
  devplug::sim::KubeletSim sim(o);
  if (!sim.Start().ok()) return 1;
  const pid_t agent = devplug::testing::SpawnProcess(
      {DEVPLUG_BENCH_DEVPLUGD, "--config", dir + "/devplug.toml"}, dir + "/agent.log");
  auto fail = [&](const char* what) {
    std::fprintf(stderr, "%s; see %s/agent.log\n", what, dir.c_str());
    devplug::testing::StopProcess(agent, SIGTERM);
    return 1;
  };
  if (!sim.WaitUntil([&](const auto& rs) { return static_cast<int>(rs.size()) == resources; },
                     30s))
    return fail("resources did not register");
  // One pod per resource holds fake-0: every resource tracks a device.
  for (int i = 0; i < resources; ++i) {
    const std::string name = "bench.example/r" + std::to_string(i);
    v1beta1::ContainerAllocateResponse resp;
    if (!sim.Allocate(name, {"fake-0"}, &resp).ok() || !sim.PreStartContainer(name, {"fake-0"}).ok())
      return fail("Allocate failed");
    sim.BindPod("bench", "pod-" + std::to_string(i), "main", name, {"fake-0"});
  }

  // 1. Steady state: Lists per poll period, whatever the number of resources.
  std::this_thread::sleep_for(2 * std::chrono::milliseconds(poll_ms));
  const uint64_t lists_before = sim.pod_resources_lists() + sim.pod_resources_refused();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  const uint64_t lists = sim.pod_resources_lists() + sim.pod_resources_refused() - lists_before;
  const double periods = seconds * 1000.0 / poll_ms;
  const double per_period = lists / periods;

  // 2. pod_of: answers from a snapshot at most 1 s old, without a List.
  devplug::kubelet::PodResourcesClient::Options co;
  co.socket = pods_socket;
  devplug::kubelet::PodResourcesClient client(co);
  if (!client.Get(0ms).ok()) return fail("no List");
  std::vector<double> pod_of_us;
  for (int i = 0; i < 20000; ++i) {
    const auto t = Clock::now();
    auto s = client.Get(1s);
    const bool found = s.ok() && (*s)->Find("bench.example/r" + std::to_string(i % resources),
                                            "fake-0") != nullptr;
    pod_of_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    if (!found) return fail("pod_of found nobody");
  }
  const uint64_t client_lists = client.lists();
  const devplug::bench::Stats pod_of = devplug::bench::Summarize(pod_of_us);

  // 3. Pods gone -> every device released.
  const auto gone = Clock::now();
  for (int i = 0; i < resources; ++i) sim.DeletePod("bench", "pod-" + std::to_string(i));
  while (Lines(log) < static_cast<size_t>(resources) && Clock::now() - gone < 60s)
    std::this_thread::sleep_for(5ms);
  const double release_ms = std::chrono::duration<double, std::milli>(Clock::now() - gone).count();
  const size_t released = Lines(log);

  devplug::testing::StopProcess(agent, SIGTERM);
  sim.Stop();
  fs::remove_all(dir);

  const double bound_ms = poll_ms + grace_ms + 1000.0;
  constexpr auto mark = devplug::bench::Verdict;
  std::printf("devplugd release tracking: %d resources, one device held in each; "
              "pod_resources_poll %d ms, release_grace %d ms; %u cores\n\n",
              resources, poll_ms, grace_ms, std::thread::hardware_concurrency());
  std::printf("| measurement                               | value          | target          |\n");
  std::printf("|-------------------------------------------|----------------|-----------------|-------\n");
  std::printf("| Lists per poll period, steady state       | %6.2f         | <= 1            | %s\n",
              per_period, mark(per_period <= 1.0));
  std::printf("| Lists in %2d s                             | %6llu         |                 |\n",
              seconds, static_cast<unsigned long long>(lists));
  std::printf("| pod_of from a fresh snapshot, p50 / p99   | %5.2f / %5.2f us | p99 <= 1000 us | %s\n",
              pod_of.p50, pod_of.p99, mark(pod_of.p99 <= 1000));
  std::printf("| Lists made for 20000 pod_of answers       | %6llu         | 1 (the first)   | %s\n",
              static_cast<unsigned long long>(client_lists), mark(client_lists == 1));
  std::printf("| pods gone -> %2zu/%-2d devices released      | %6.0f ms      | <= %4.0f ms      | %s\n",
              released, resources, release_ms, bound_ms,
              mark(released == static_cast<size_t>(resources) && release_ms <= bound_ms));
  return 0;
}
