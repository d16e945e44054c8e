// The generic module (modules/generic/README.md): a glob over 1,000 device nodes,
// and how fast a node made or removed reaches the kubelet.
//
//  - scan: one list_devices() of "/dev/bench/node*" over 1,000 character
//    nodes (each with its /sys/dev/char link, as on a real node) through the
//    real loader plus the agent's copy and diff (ModuleInstance rescan).
//  - end to end: devplugd with resync off and the kubelet simulator;
//    * a literal path's node removed / made again without any uevent (rm,
//      mknod): seen through the agent's inotify path watch;
//    * the same with a real kernel uevent for the node (tun or kvm) written
//      right after the rm;
//    * a node added to / removed from the 1,000-node glob without a uevent.
//    Each times the change until the simulated kubelet holds the new list.
//
//   devplug_generic_bench [--nodes 1000] [--scans 50] [--events 100]   (needs root)
//
// The fixture goes to $TMPDIR, or /dev/shm when TMPDIR is not set.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_module.h"
#include "kubelet_sim.h"
#include "test_util.h"

namespace {

using devplug::bench::Ms;
using devplug::bench::Stats;
using devplug::bench::Summarize;
using devplug::bench::TimedRescan;
using devplug::modules::ModuleInstance;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr char kGlob[] = "bench.example/glob";
constexpr char kLiteral[] = "bench.example/literal";
constexpr unsigned kMajor = 240;  // a local/experimental char major

std::string NodeName(int i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "node%04d", i);
  return buf;
}

bool MakeNode(const std::string& root, int i) {
  const std::string name = NodeName(i);
  if (!devplug::testing::MakeCharDevice(root + "/dev/bench/" + name, kMajor, i)) return false;
  const std::string sys = "/sys/devices/virtual/bench/" + name;
  fs::create_directories(root + sys);
  std::ofstream(root + sys + "/dev") << kMajor << ":" << i << "\n";
  fs::create_directories(root + "/sys/dev/char");
  std::error_code ec;
  fs::create_symlink("../.." + sys.substr(4),
                     root + "/sys/dev/char/" + std::to_string(kMajor) + ":" + std::to_string(i),
                     ec);
  return true;
}

std::unique_ptr<ModuleInstance> Open(const std::string& root) {
  return devplug::bench::OpenModule(
      "generic",
      std::string("name = \"") + kGlob +
          "\"\nmodule = \"generic\"\npaths = [\"/dev/bench/node*\"]\n",
      root);
}

struct EndToEnd {
  Stats rm, mknod, rm_uevent, glob_add, glob_rm;
  size_t timeouts = 0;
  std::string misc;  // the real misc device used for uevents
};

EndToEnd RunAgent(const std::string& dir, const std::string& root, int nodes, int events) {
  EndToEnd out;
  auto misc = devplug::testing::RealMiscDevice();
  if (!misc) return out;
  out.misc = misc->node;
  // The literal path is the real misc device's node, in the fixture.
  if (!devplug::testing::MakeCharDevice(root + misc->node, misc->major, misc->minor)) return out;
  const std::string plugins = dir + "/p", cfg = dir + "/generic.toml";
  std::ofstream(cfg) << "[agent]\nplugin_dir = \"" << plugins << "\"\nmodule_dir = \""
                     << DEVPLUG_BENCH_MODULE_DIR << "\"\nhost_root = \"" << root
                     << "\"\nlog_level = \"warn\"\nresync_interval = \"0s\"\n"
                     << "udev_source = \"kernel\"\ncontrol_socket = \"\"\n"
                     << "[[resource]]\nname = \"" << kLiteral
                     << "\"\nmodule = \"generic\"\npaths = [\"" << misc->node << "\"]\n"
                     << "[[resource]]\nname = \"" << kGlob
                     << "\"\nmodule = \"generic\"\npaths = [\"/dev/bench/node*\"]\n";
  devplug::sim::KubeletSim::Options o;
  o.dir = plugins;
  o.owns_dir = true;
  o.checkpoint_noise = false;
  devplug::sim::KubeletSim sim(o);
  if (!sim.Start().ok()) return out;
  const pid_t agent =
      devplug::testing::SpawnProcess({DEVPLUG_BENCH_DEVPLUGD, "--config", cfg}, dir + "/agent.log");
  auto state_is = [&](const char* name, size_t n, size_t healthy, std::chrono::milliseconds t) {
    return sim.WaitUntil(
        [&](const auto& rs) {
          auto it = rs.find(name);
          return it != rs.end() && it->second.connected && it->second.devices.size() == n &&
                 it->second.healthy() == healthy;
        },
        t);
  };
  if (!state_is(kLiteral, 1, 1, 30s) ||
      !state_is(kGlob, static_cast<size_t>(nodes), static_cast<size_t>(nodes), 30s)) {
    std::fprintf(stderr, "agent did not list the fixture; see %s/agent.log\n", dir.c_str());
    devplug::testing::StopProcess(agent, SIGTERM);
    return out;
  }
  std::this_thread::sleep_for(200ms);
  const std::string lit = root + misc->node;
  std::vector<double> rm, mk, rm_ev, gadd, grm;
  auto timed = [&](std::vector<double>& into, auto&& change, const char* name, size_t n,
                   size_t healthy) {
    const auto t0 = Clock::now();
    change();
    if (state_is(name, n, healthy, 5s))
      into.push_back(Ms(Clock::now() - t0));
    else
      out.timeouts++;
    std::this_thread::sleep_for(10ms);
  };
  const auto remake = [&] { devplug::testing::MakeCharDevice(lit, misc->major, misc->minor); };
  for (int i = 0; i < events; i++) {
    timed(
        rm, [&] { std::remove(lit.c_str()); }, kLiteral, 1, 0);
    timed(mk, remake, kLiteral, 1, 1);
    timed(
        rm_ev,
        [&] {
          std::remove(lit.c_str());
          std::ofstream(misc->uevent) << "change";
        },
        kLiteral, 1, 0);
    remake();
    state_is(kLiteral, 1, 1, 5s);
    const size_t n = static_cast<size_t>(nodes);
    timed(
        gadd, [&] { MakeNode(root, nodes); }, kGlob, n + 1, n + 1);
    timed(
        grm, [&] { std::remove((root + "/dev/bench/" + NodeName(nodes)).c_str()); }, kGlob, n, n);
  }
  devplug::testing::StopProcess(agent, SIGTERM);
  sim.Stop();
  out.rm = Summarize(rm);
  out.mknod = Summarize(mk);
  out.rm_uevent = Summarize(rm_ev);
  out.glob_add = Summarize(gadd);
  out.glob_rm = Summarize(grm);
  return out;
}

void Row(const char* what, const Stats& s, const char* target, double limit_ms) {
  const std::string verdict =
      limit_ms <= 0 ? "" : std::string(" (") + devplug::bench::Verdict(s.p99 <= limit_ms) + ")";
  std::printf("| %s (n=%zu) | %.2f ms | %.2f ms | %.2f ms | %s%s |\n", what, s.n, s.p50, s.p99,
              s.max, target, verdict.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"generic module: globs and node removal"};
  int nodes = 1000, scans = 50, events = 100;
  app.add_option("--nodes", nodes, "character nodes the glob matches")->check(CLI::Range(1, 4000));
  app.add_option("--scans", scans, "in-process rescans to time");
  app.add_option("--events", events, "end-to-end changes of each kind to time (0: skip)");
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    std::fprintf(stderr, "needs root (mknod, uevent files)\n");
    return 1;
  }
  devplug::bench::PreferTmpfsForFixtures();
  devplug::testing::TempDir tmp;
  const std::string root = tmp / "host";
  const auto b0 = Clock::now();
  for (int i = 0; i < nodes; i++)
    if (!MakeNode(root, i)) {
      std::fprintf(stderr, "mknod failed\n");
      return 1;
    }
  std::printf("fixture: %d nodes built in %.0f ms under %s\n", nodes, Ms(Clock::now() - b0),
              root.c_str());
  auto inst = Open(root);
  if (!inst || inst->devices()->size() != static_cast<size_t>(nodes)) {
    std::fprintf(stderr, "generic module did not list %d nodes\n", nodes);
    return 1;
  }
  std::vector<double> scan_ms;
  for (int i = 0; i < scans; i++) scan_ms.push_back(TimedRescan(*inst));
  inst.reset();
  const EndToEnd e2e = events > 0 ? RunAgent(tmp.path(), root, nodes, events) : EndToEnd{};

  std::printf("\n| measurement | p50 | p99 | max | target |\n|---|---|---|---|---|\n");
  char what[128];
  std::snprintf(what, sizeof(what), "glob over %d nodes: scan + agent snapshot (in process)",
                nodes);
  Row(what, Summarize(scan_ms), "<= 5 ms", 5);
  if (e2e.rm.n > 0) {
    Row(("rm " + e2e.misc + ", no uevent -> kubelet").c_str(), e2e.rm, "<= 5 ms p99", 5);
    Row(("mknod " + e2e.misc + ", no uevent -> kubelet").c_str(), e2e.mknod, "-", 0);
    Row(("rm " + e2e.misc + " + real uevent -> kubelet").c_str(), e2e.rm_uevent, "<= 5 ms p99", 5);
    Row("glob: node added, no uevent -> kubelet", e2e.glob_add, "-", 0);
    Row("glob: node removed, no uevent -> kubelet", e2e.glob_rm, "<= 5 ms p99", 5);
    std::printf("\n%zu timeouts (5 s each)\n", e2e.timeouts);
  } else if (events > 0) {
    std::printf("\nend to end skipped: no writable misc device uevent\n");
  }
  return 0;
}
