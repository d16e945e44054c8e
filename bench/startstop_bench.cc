// Start and exit as a user sees them, beside a Go device plugin: devplugd
// serving one kvm resource of 110 shares, and bench/goplugin (grpc-go and the
// kubelet's own Go API) serving 110 shares of the same node, each against the
// kubelet simulator in this process (devplugd both without CAP_SYS_NICE, as
// deployed, and with it); and, for exit only, a bare gRPC C++
// server (agent_bench's), which registers nothing: what the gRPC C++
// runtime's own threads cost a process at exit. The Go plugin watches its
// folder for a new kubelet.sock (fsnotify), as one that registers again
// after a kubelet restart must; devplugd holds two inotify instances.
//
//   start: posix_spawn -> registered, with its first device list received;
//   exit:  kill(SIGTERM) -> the parent's waitpid() returns, either 50 ms
//          after the first list (a quick restart) or 1 s after it (a plugin
//          that has settled: the kubelet's stream is open and idle).
//
// Each is measured on a quiet machine and under a CPU load this bench makes
// itself (one busy process per core, as a build on every core is), runs
// alternating between the two plugins so that the machine's drift hits
// both alike. Prints medians and p90s, and how many threads each holds at
// the SIGTERM (each one is scheduled once more before the process is gone);
// exits 0 whatever the numbers.
//
//   devplug_startstop_bench [--runs 15] [--go-plugin PATH]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_agent.h"
#include "kubelet_sim.h"
#include "test_util.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// One busy process per core until Stop(): the load a build puts on a node.
class CpuLoad {
 public:
  void Start() {
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        volatile unsigned long x = 0;
        for (;;) x = x + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  void Stop() {
    for (pid_t p : pids_) devplug::testing::StopProcess(p, SIGKILL);
    pids_.clear();
  }
  ~CpuLoad() { Stop(); }

 private:
  std::vector<pid_t> pids_;
};

struct Plugin {
  std::string name;               // row label
  std::string resource;           // what it registers ("": nothing; `socket` tells it is up)
  std::vector<std::string> argv;  // how to start it
  std::string socket;             // where it serves, when it registers nothing
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"start and exit of devplugd beside a Go device plugin"};
  int runs = 15;
  std::string go_plugin = DEVPLUG_BENCH_GOPLUGIN;
  app.add_option("--runs", runs, "starts per plugin, condition and exit case")
      ->capture_default_str();
  app.add_option("--go-plugin", go_plugin, "the Go plugin's binary (bench/goplugin)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  char tmpl[] = "/tmp/devplug-bench.XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string plugins = dir + "/p";
  // The Go plugin hands out the same node as devplugd's kvm resource.
  const std::string host_root = devplug::bench::KvmHostRoot(dir);
  const std::string config = dir + "/devplug.toml";
  std::ofstream(config) << devplug::bench::AgentTable(plugins, host_root)
                        << "[[resource]]\nname = \"bench.example/kvm\"\nmodule = \"kvm\"\n"
                        << "shares = 110\n";

  // devplugd as its systemd unit and DaemonSet run it, without
  // CAP_SYS_NICE, and with it: then a stop runs at nice -10
  // (util/exit_priority.h).
  std::vector<Plugin> plugins_to_run{
      {"devplugd",
       "bench.example/kvm",
       {"/usr/bin/setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice",
        DEVPLUG_BENCH_DEVPLUGD, "--config", config},
       ""},
      {"devplugd+SYS_NICE", "bench.example/kvm", {DEVPLUG_BENCH_DEVPLUGD, "--config", config}, ""}};
  const bool have_go = access(go_plugin.c_str(), X_OK) == 0;
  if (have_go)
    plugins_to_run.push_back(
        {"Go plugin",
         "bench.example/go",
         {go_plugin, "-dir", plugins, "-resource", "bench.example/go", "-node",
          host_root == "/" ? "/dev/kvm" : host_root + "/dev/kvm", "-count", "110"},
         ""});

  // A bare gRPC C++ server (agent_bench's, answering Allocate), which
  // registers nothing: what the gRPC C++ runtime alone costs at exit.
  const std::string bare_socket = dir + "/bare.sock";
  plugins_to_run.push_back(
      {"bare gRPC", "", {DEVPLUG_BENCH_AGENT_BENCH, "--echo-server", bare_socket}, bare_socket});

  devplug::sim::KubeletSim sim(devplug::bench::SimOptions(plugins));
  if (!sim.Start().ok()) return 1;

  std::map<std::string, uint64_t> registrations;
  // Starts `p`; the start time to its first device list.
  auto start = [&](const Plugin& p, double* ms) -> pid_t {
    const uint64_t want = ++registrations[p.resource];
    const auto t0 = Clock::now();
    if (!p.socket.empty()) fs::remove(p.socket);
    const pid_t pid = devplug::testing::SpawnProcess(p.argv, dir + "/plugin.log");
    if (p.resource.empty()) {
      for (int i = 0; i < 3000 && !fs::exists(p.socket); ++i) std::this_thread::sleep_for(1ms);
      *ms = Ms(Clock::now() - t0);
      return pid;
    }
    const bool ok = sim.WaitUntil(
        [&](const auto& rs) {
          auto it = rs.find(p.resource);
          return it != rs.end() && it->second.registrations >= want && it->second.connected &&
                 it->second.devices.size() == 110;
        },
        30s);
    *ms = Ms(Clock::now() - t0);
    if (!ok) {
      std::fprintf(stderr, "%s did not register; see %s/plugin.log\n", p.name.c_str(), dir.c_str());
      std::exit(1);
    }
    return pid;
  };
  // Threads the process holds when it is told to stop: each must be
  // scheduled once more to die before the parent's waitpid() returns.
  std::map<std::string, int> threads;
  auto count_threads = [](pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
    return 0;
  };
  auto stop = [&](pid_t pid) {
    const auto t0 = Clock::now();
    devplug::testing::StopProcess(pid, SIGTERM);
    return Ms(Clock::now() - t0);
  };

  struct Series {
    std::vector<double> start, exit_quick, exit_settled;
  };
  std::map<std::pair<std::string, bool>, Series> results;  // (plugin, loaded)
  CpuLoad load;
  for (const bool loaded : {false, true}) {
    if (loaded) load.Start();
    for (int i = 0; i < runs; ++i) {
      for (const Plugin& p : plugins_to_run) {
        Series& s = results[{p.name, loaded}];
        double ms = 0;
        pid_t pid = start(p, &ms);
        s.start.push_back(ms);
        std::this_thread::sleep_for(50ms);
        s.exit_quick.push_back(stop(pid));
        pid = start(p, &ms);
        s.start.push_back(ms);
        std::this_thread::sleep_for(1s);
        threads[p.name] = std::max(threads[p.name], count_threads(pid));
        s.exit_settled.push_back(stop(pid));
      }
    }
    load.Stop();
  }
  sim.Stop();
  fs::remove_all(dir);

  std::printf(
      "start and exit, %d runs per row (%u cores); one resource of 110 shares; "
      "loaded = %u busy processes\n\n",
      runs, std::thread::hardware_concurrency(), std::max(1u, std::thread::hardware_concurrency()));
  std::printf(
      "| plugin            | machine | measurement                     | median    | p90       "
      "|\n");
  std::printf(
      "|-------------------|---------|---------------------------------|-----------|-----------"
      "|\n");
  for (const bool loaded : {false, true}) {
    for (const Plugin& p : plugins_to_run) {
      const Series& s = results[{p.name, loaded}];
      auto row = [&](const char* what, const std::vector<double>& v) {
        std::printf("| %-17s | %-7s | %-31s | %6.1f ms | %6.1f ms |\n", p.name.c_str(),
                    loaded ? "loaded" : "quiet", what, Quantile(v, 0.5), Quantile(v, 0.9));
      };
      if (!p.resource.empty()) row("spawn -> registered, first list", s.start);
      row("SIGTERM -> exit, 50 ms after", s.exit_quick);
      row("SIGTERM -> exit, 1 s after", s.exit_settled);
    }
  }
  std::printf("\nthreads at SIGTERM, 1 s after the first list (most seen):");
  for (const Plugin& p : plugins_to_run) std::printf(" %s %d;", p.name.c_str(), threads[p.name]);
  std::printf("\n");
  if (!have_go)
    std::printf("\n(no Go plugin at %s: cmake --build <dir> --target devplug_goplugin builds it)\n",
                go_plugin.c_str());
  return 0;
}
