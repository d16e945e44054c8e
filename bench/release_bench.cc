// Pod identity and release benchmark: what release tracking costs the
// kubelet's shared PodResources API, what pod_of costs a PreStartContainer
// in devplugd (one fresh List), and how soon a
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
  const std::string holder_log = dir + "/holder.log";
  std::string cfg = "[agent]\nplugin_dir = \"" + plugins + "\"\nlog_level = \"warn\"\n" +
                    "resync_interval = \"0s\"\npod_resources_socket = \"" + pods_socket +
                    "\"\npod_resources_poll = \"" + std::to_string(poll_ms) +
                    "ms\"\nrelease_grace = \"" + std::to_string(grace_ms) +
                    "ms\"\nkubelet_settle = \"0s\"\n";
  for (int i = 0; i < resources; ++i)
    cfg += "[[resource]]\nname = \"bench.example/r" + std::to_string(i) + "\"\nmodule = \"" +
           DEVPLUG_BENCH_FAKE_MODULE_DIR "/fake_release.so\"\ncount = 4\nrelease_log = \"" + log +
           "\"\n";
  // Two more, untracked: one whose pre_start() asks pod_of() for every
  // device, one whose pre_start() does not.
  for (const char* asks : {"true", "false"})
    cfg += std::string("[[resource]]\nname = \"bench.example/asks-") + asks + "\"\nmodule = \"" +
           DEVPLUG_BENCH_FAKE_MODULE_DIR "/fake_release.so\"\ncount = 1\nshared = true\n" +
           "log_holder = " + asks + "\nrelease_log = \"" + holder_log + "\"\n";
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
  if (!sim.WaitUntil([&](const auto& rs) { return static_cast<int>(rs.size()) == resources + 2; },
                     30s))
    return fail("resources did not register");
  // One pod per resource holds fake-0: every resource tracks a device.
  for (int i = 0; i < resources; ++i) {
    const std::string name = "bench.example/r" + std::to_string(i);
    v1beta1::ContainerAllocateResponse resp;
    if (!sim.Allocate(name, {"fake-0"}, &resp).ok() ||
        !sim.PreStartContainer(name, {"fake-0"}).ok())
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

  // 2. pod_of as devplugd answers it: PreStartContainer of a container
  // whose module asks pod_of() in pre_start(), against one that does not;
  // the difference is pod_of's cost, a fresh List included (an answer must
  // come from a List sent after the PreStart began). Paced below the
  // kubelet's 100 QPS, which every agent on the node shares.
  const std::string asks = "bench.example/asks-true", silent = "bench.example/asks-false";
  for (const std::string& name : {asks, silent}) {
    v1beta1::ContainerAllocateResponse resp;
    if (!sim.Allocate(name, {"fake-0"}, &resp).ok()) return fail("Allocate failed");
  }
  sim.BindPod("bench", "holder", "main", asks, {"fake-0"});
  constexpr int kPreStarts = 200;
  std::vector<double> with_us, without_us;
  const uint64_t lists_at = sim.pod_resources_lists() + sim.pod_resources_refused();
  auto prestart = [&](const std::string& name, std::vector<double>& out) {
    const auto t = Clock::now();
    const bool ok = sim.PreStartContainer(name, {"fake-0"}).ok();
    out.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    return ok;
  };
  for (int i = 0; i < kPreStarts; ++i) {
    if (!prestart(asks, with_us) || !prestart(silent, without_us))
      return fail("PreStartContainer failed");
    std::this_thread::sleep_for(15ms);
  }
  // Tracking polls of the other resources count too: at most a few.
  const uint64_t pod_of_lists = sim.pod_resources_lists() + sim.pod_resources_refused() - lists_at;
  size_t answered = 0;
  {
    std::ifstream in(holder_log);
    for (std::string line; std::getline(in, line);)
      answered += line == "holder fake-0 bench/holder/main";
  }
  const devplug::bench::Stats with = devplug::bench::Summarize(with_us);
  const devplug::bench::Stats without = devplug::bench::Summarize(without_us);

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
  std::printf(
      "devplugd release tracking: %d resources, one device held in each; "
      "pod_resources_poll %d ms, release_grace %d ms; %u cores\n\n",
      resources, poll_ms, grace_ms, std::thread::hardware_concurrency());
  std::printf("| measurement                               | value          | target          |\n");
  std::printf(
      "|-------------------------------------------|----------------|-----------------|-------\n");
  std::printf(
      "| Lists per poll period, steady state       | %6.2f         | <= 1            | %s\n",
      per_period, mark(per_period <= 1.0));
  std::printf("| Lists in %2d s                             | %6llu         |                 |\n",
              seconds, static_cast<unsigned long long>(lists));
  std::printf(
      "| PreStart with pod_of, p50 / p99 (devplugd)| %5.0f / %5.0f us | p50 <= 2000 us | %s\n",
      with.p50, with.p99, mark(with.p50 <= 2000));
  std::printf(
      "| PreStart without pod_of, p50 / p99        | %5.0f / %5.0f us |                 |\n",
      without.p50, without.p99);
  std::printf(
      "| pod_of answers naming the holder          | %4zu / %-4d    | all             | %s\n",
      answered, kPreStarts, mark(answered == static_cast<size_t>(kPreStarts)));
  std::printf("| Lists during %3d such PreStarts           | %6llu         | <= %d + polls   |\n",
              kPreStarts, static_cast<unsigned long long>(pod_of_lists), kPreStarts);
  std::printf(
      "| pods gone -> %2zu/%-2d devices released      | %6.0f ms      | <= %4.0f ms      | %s\n",
      released, resources, release_ms, bound_ms,
      mark(released == static_cast<size_t>(resources) && release_ms <= bound_ms));
  return 0;
}
