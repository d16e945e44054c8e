// devplugctl: operator tools for devplug.
//
//   devplugctl simulate-kubelet  run the kubelet's side of the device plugin
//                                protocol in a directory (and of DRA, with
//                                its plugin watcher) and print what plugins
//                                register and report
//   devplugctl demo              run devplugd against a simulated kubelet in a
//                                temporary directory, end to end
//   devplugctl inspect-module    load a module as devplugd does; print what it
//                                is and the devices it finds
//   devplugctl status            what a running devplugd serves (control socket)
//   devplugctl metrics           its metrics, in the Prometheus text format
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <CLI/CLI.hpp>

#include "inspect_module.h"
#include "kubelet_sim.h"
#include "ops/log.h"
#include "status.h"
#include "status_cli.h"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using devplug::sim::KubeletSim;
using devplug::sim::ResourceView;
namespace fs = std::filesystem;

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

void PrintLine(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

void PrintResources(const KubeletSim& sim) {
  std::printf("\n%-32s %-44s %8s %8s\n", "RESOURCE", "SOCKET", "DEVICES", "HEALTHY");
  for (const std::string& name : sim.resource_names()) {
    auto r = sim.resource(name);
    std::printf("%-32s %-44s %8zu %8zu\n", name.c_str(), r->endpoint.c_str(), r->devices.size(),
                r->healthy());
  }
  std::printf("\n");
  std::fflush(stdout);
}

// Allocates `count` healthy devices of one resource, like the kubelet does for
// one container, and prints the answer. Returns false if Allocate failed.
bool AllocateOne(KubeletSim& sim, const std::string& name, int count, bool record = false) {
  auto r = sim.resource(name);
  std::vector<std::string> ids;
  for (const auto& d : r->devices)
    if (d.health() == "Healthy" && static_cast<int>(ids.size()) < count) ids.push_back(d.id());
  if (ids.empty()) {
    std::printf("%s: no healthy device to allocate\n", name.c_str());
    return true;
  }
  v1beta1::ContainerAllocateResponse resp;
  grpc::Status st = sim.Allocate(name, ids, &resp);
  std::string joined;
  for (const auto& id : ids) joined += (joined.empty() ? "" : ",") + id;
  if (!st.ok()) {
    std::printf("Allocate %s [%s] failed: %s\n", name.c_str(), joined.c_str(),
                st.error_message().c_str());
  } else {
    std::printf("Allocate %s [%s] ->\n%s\n", name.c_str(), joined.c_str(), ToJson(resp).c_str());
    // Like the kubelet: the allocation shows in PodResources (pod
    // devplug-sim/<resource>) from Allocate on, so a module that asks who
    // holds a device in PreStartContainer finds the pod; then
    // PreStartContainer when asked for.
    if (record) {
      std::string pod = name;
      for (char& c : pod)
        if (c == '/' || c == '.' || c == '_') c = '-';
      sim.BindPod("devplug-sim", pod, "main", name, ids);
    }
    if (r->options.pre_start_required()) {
      grpc::Status ps = sim.PreStartContainer(name, ids);
      std::printf("PreStartContainer %s [%s]: %s\n", name.c_str(), joined.c_str(),
                  ps.ok() ? "OK" : ps.error_message().c_str());
    }
  }
  std::fflush(stdout);
  return st.ok();
}

// --allocate-rate: Allocate calls at a steady rate for every device plugin
// resource, as pods admitted one after another, from its first device list
// on; each resource's answered and failed calls are counted, and printed at
// the end. A restart of devplugd measured from outside: every Allocate that
// finds nobody serving fails.
class AllocateLoop {
 public:
  AllocateLoop(KubeletSim& sim, int per_second) : sim_(sim), period_(1000000 / per_second) {
    thread_ = std::thread([this] { Run(); });
  }
  ~AllocateLoop() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Prints each resource's counts; the number of failed calls.
  int Report() const {
    int failed = 0;
    for (const auto& [name, c] : counts_) {
      std::printf("allocate-rate: %s: %d answered, %d failed%s%s\n", name.c_str(), c.answered,
                  c.failed, c.failed > 0 ? "; the first: " : "", c.first_error.c_str());
      failed += c.failed;
    }
    std::fflush(stdout);
    return failed;
  }

 private:
  struct Counts {
    int answered = 0, failed = 0;
    std::string first_error;
  };
  void Run() {
    auto next = std::chrono::steady_clock::now();
    while (!stop_ && !g_stop) {
      for (const std::string& name : sim_.resource_names()) {
        auto r = sim_.resource(name);
        if (!counts_.count(name) && (!r->connected || r->stream_snapshots == 0)) continue;
        std::string id;
        for (const auto& d : r->devices)
          if (d.health() == "Healthy") {
            id = d.id();
            break;
          }
        if (id.empty()) continue;  // as the kubelet: nothing healthy, no pod admitted
        v1beta1::ContainerAllocateResponse resp;
        const grpc::Status st = sim_.Allocate(name, {id}, &resp);
        Counts& c = counts_[name];
        if (st.ok()) {
          ++c.answered;
        } else if (c.failed++ == 0) {
          c.first_error = st.error_message();
        }
      }
      next += period_;
      std::this_thread::sleep_until(next);
    }
  }
  KubeletSim& sim_;
  const std::chrono::microseconds period_;
  std::atomic<bool> stop_{false};
  std::map<std::string, Counts> counts_;  // the thread's until Stop()
  std::thread thread_;
};

// A claim the simulated kubelet prepares with a DRA driver: what the
// kubelet sends, {namespace, uid, name}, and the driver it is allocated to.
struct DraClaim {
  std::string driver;
  std::array<std::string, 3> ref;  // namespace, uid, name
  bool tried = false;              // NodePrepareResources called
  bool prepared = false;           // ... and it succeeded, not unprepared since
};

// "<driver>=<namespace>/<name>/<uid>"; the error names what is wrong.
std::optional<DraClaim> ParseDraClaim(const std::string& arg, std::string* error) {
  const size_t eq = arg.find('=');
  std::vector<std::string> parts;
  if (eq != std::string::npos) {
    size_t from = eq + 1;
    for (size_t slash; (slash = arg.find('/', from)) != std::string::npos; from = slash + 1)
      parts.push_back(arg.substr(from, slash - from));
    parts.push_back(arg.substr(from));
  }
  if (eq == std::string::npos || eq == 0 || parts.size() != 3 ||
      std::any_of(parts.begin(), parts.end(), [](const std::string& p) { return p.empty(); })) {
    *error = "--prepare \"" + arg + "\": expected <driver>=<namespace>/<claim name>/<claim uid>";
    return std::nullopt;
  }
  return DraClaim{arg.substr(0, eq), {parts[0], parts[2], parts[1]}, false, false};
}

std::string ClaimName(const DraClaim& c) { return c.ref[0] + "/" + c.ref[2]; }

// Why the driver's answer for the claim `uid` is a failure ("": it is not).
template <typename Response>
std::string ClaimError(const grpc::Status& st, const Response& resp, const std::string& uid) {
  if (!st.ok()) return st.error_message();
  const auto it = resp.claims().find(uid);
  return it == resp.claims().end() ? "no answer for the claim's UID" : it->second.error();
}

// NodePrepareResources of one claim, as the kubelet calls it before the
// pod's containers start; prints the answer. False when it failed.
bool PrepareClaim(KubeletSim& sim, DraClaim& c) {
  c.tried = true;
  devplug::sim::drav1::NodePrepareResourcesResponse resp;
  const grpc::Status st = sim.NodePrepareResources(c.driver, {c.ref}, &resp);
  const std::string error = ClaimError(st, resp, c.ref[1]);
  if (!error.empty()) {
    std::printf("NodePrepareResources %s (%s) failed: %s\n", ClaimName(c).c_str(), c.driver.c_str(),
                error.c_str());
  } else {
    c.prepared = true;
    std::printf("NodePrepareResources %s (%s) ->\n%s\n", ClaimName(c).c_str(), c.driver.c_str(),
                ToJson(resp.claims().at(c.ref[1])).c_str());
  }
  std::fflush(stdout);
  return error.empty();
}

// NodeUnprepareResources, as the kubelet calls it after the pod ended.
bool UnprepareClaim(KubeletSim& sim, DraClaim& c) {
  devplug::sim::drav1::NodeUnprepareResourcesResponse resp;
  const grpc::Status st = sim.NodeUnprepareResources(c.driver, {c.ref}, &resp);
  const std::string error = ClaimError(st, resp, c.ref[1]);
  c.prepared = false;
  std::printf("NodeUnprepareResources %s (%s): %s\n", ClaimName(c).c_str(), c.driver.c_str(),
              error.empty() ? "OK" : error.c_str());
  std::fflush(stdout);
  return error.empty();
}

int SimulateKubelet(const std::string& dir, const std::string& pod_resources,
                    const std::string& plugins_registry, int allocate, int allocate_rate,
                    const std::vector<std::string>& prepare, double unprepare_after_s,
                    double duration_s, bool quiet) {
  std::vector<DraClaim> claims;
  for (const std::string& arg : prepare) {
    std::string error;
    auto c = ParseDraClaim(arg, &error);
    if (!c) {
      std::fprintf(stderr, "devplugctl: %s\n", error.c_str());
      return 1;
    }
    claims.push_back(*c);
  }
  if (!claims.empty() && plugins_registry.empty()) {
    std::fprintf(stderr,
                 "devplugctl: --prepare needs --plugins-registry: DRA drivers register there\n");
    return 1;
  }
  KubeletSim::Options o;
  o.dir = dir;
  o.pod_resources_socket = pod_resources;
  o.plugins_registry = plugins_registry;
  o.strict = true;
  if (!quiet) o.on_event = PrintLine;
  KubeletSim sim(o);
  if (devplug::Status st = sim.Start(); !st.ok()) {
    std::fprintf(stderr, "devplugctl: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("simulated kubelet serving %s/kubelet.sock%s%s; Ctrl-C to stop\n", dir.c_str(),
              plugins_registry.empty() ? "" : ", plugin watcher on ", plugins_registry.c_str());
  std::fflush(stdout);
  std::set<std::string> allocated;
  int failed = 0;
  std::optional<AllocateLoop> loop;
  if (allocate_rate > 0) loop.emplace(sim, allocate_rate);
  const auto now = [] { return std::chrono::steady_clock::now(); };
  const auto after = [&](double s) {
    return now() + std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  };
  const auto end = after(duration_s);
  // With --unprepare-after: when the last claim was prepared, plus that.
  std::optional<std::chrono::steady_clock::time_point> unprepare_at;
  bool unprepared = false;
  while (!g_stop && (duration_s <= 0 || now() < end)) {
    std::this_thread::sleep_for(100ms);
    for (DraClaim& c : claims) {
      if (c.tried) continue;
      auto d = sim.dra_driver(c.driver);
      if (!d || !d->registered) continue;
      if (!PrepareClaim(sim, c)) ++failed;
      if (unprepare_after_s > 0 &&
          std::all_of(claims.begin(), claims.end(), [](const DraClaim& x) { return x.tried; }))
        unprepare_at = after(unprepare_after_s);
    }
    if (unprepare_at && !unprepared && now() >= *unprepare_at) {
      unprepared = true;
      for (DraClaim& c : claims)
        if (c.prepared && !UnprepareClaim(sim, c)) ++failed;
    }
    if (allocate <= 0) continue;
    for (const std::string& name : sim.resource_names()) {
      auto r = sim.resource(name);
      if (allocated.count(name) || !r->connected || r->stream_snapshots == 0) continue;
      allocated.insert(name);
      AllocateOne(sim, name, allocate, !pod_resources.empty());
    }
  }
  if (loop) {
    loop->Stop();
    failed += loop->Report();
  }
  // The pods end with the simulated kubelet: what it prepared is unprepared.
  for (DraClaim& c : claims) {
    if (c.prepared && !UnprepareClaim(sim, c)) ++failed;
    if (!c.tried) {
      std::printf("%s: DRA driver %s did not register\n", ClaimName(c).c_str(), c.driver.c_str());
      ++failed;
    }
  }
  sim.Stop();
  for (const std::string& v : sim.violations()) std::printf("violation: %s\n", v.c_str());
  if (!sim.violations().empty()) return 2;
  return failed == 0 ? 0 : 3;
}

std::string SelfDir() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

int Demo(std::string agent, std::string module_dir, const std::string& config) {
  const std::string self = SelfDir();
  if (agent.empty()) agent = self + "/devplugd";
  if (module_dir.empty()) {
    // In a build tree the modules sit beside the agent/ folder.
    module_dir = fs::exists(self + "/../modules/kvm.so")
                     ? fs::canonical(self + "/../modules").string()
                     : std::string(DEVPLUG_MODULE_DIR);
  }
  char tmpl[] = "/tmp/devplug-demo.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;

  std::printf("== devplug demo: devplugd against a simulated kubelet in %s\n", dir.c_str());
  KubeletSim::Options o;
  o.dir = dir;
  o.owns_dir = true;  // our temporary directory
  o.on_event = PrintLine;
  KubeletSim sim(o);
  if (devplug::Status st = sim.Start(); !st.ok()) {
    std::fprintf(stderr, "devplugctl: %s\n", st.message().c_str());
    return 1;
  }

  // Beside the plugin directory, not in it: a restarting kubelet wipes that.
  const std::string control = dir + ".control.sock";
  std::vector<std::string> args{agent,      "--plugin-dir",     dir,    "--module-dir",
                                module_dir, "--control-socket", control};
  if (config.empty())
    args.push_back("--builtin-config");
  else
    args.insert(args.end(), {"--config", config});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::printf("== starting:");
  for (const auto& a : args) std::printf(" %s", a.c_str());
  std::printf("\n");
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid;
  if (int rc = posix_spawn(&pid, agent.c_str(), nullptr, nullptr, argv.data(), environ); rc != 0) {
    std::fprintf(stderr, "devplugctl: cannot start %s: %s\n", agent.c_str(), std::strerror(rc));
    return 1;
  }
  int failures = 0;
  auto all_registered = [&](uint64_t n) {
    return sim.WaitUntil(
        [&](const auto& rs) {
          if (rs.empty()) return false;
          for (const auto& [name, r] : rs)
            if (r.registrations < n || !r.connected || r.stream_snapshots == 0) return false;
          return true;
        },
        15s);
  };
  if (!all_registered(1)) {
    std::printf("== no resource registered within 15 s\n");
    ++failures;
  } else {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - t0);
    std::this_thread::sleep_for(300ms);  // let any further resources arrive
    std::printf("== registered within %lld ms of start:\n", static_cast<long long>(ms.count()));
    PrintResources(sim);
    for (const std::string& name : sim.resource_names())
      if (!AllocateOne(sim, name, 1)) ++failures;

    std::printf("\n== restarting the simulated kubelet (it wipes the sockets)\n");
    std::fflush(stdout);
    const auto t1 = std::chrono::steady_clock::now();
    if (devplug::Status st = sim.Restart(200ms); !st.ok()) {
      std::printf("restart failed: %s\n", st.message().c_str());
      ++failures;
    } else if (!all_registered(2)) {
      std::printf("== resources did not register again\n");
      ++failures;
    } else {
      const auto ms2 = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - t1);
      std::printf("== every resource registered again (%lld ms incl. 200 ms kubelet downtime)\n",
                  static_cast<long long>(ms2.count()));
      PrintResources(sim);
    }
    std::printf("== what devplugd says (devplugctl status --socket %s)\n\n", control.c_str());
    std::fflush(stdout);
    devplug::ctl::StatusOptions so;
    so.socket = control;
    // The kubelet's side can see the registration a moment before devplugd
    // has read the kubelet's answer to it.
    for (int i = 0; i < 100 && devplug::ctl::StatusExitCode(so) != 0; ++i)
      std::this_thread::sleep_for(50ms);
    if (int rc = devplug::ctl::PrintStatus(so); rc != 0) {
      std::printf("== devplugctl status: exit status %d\n", rc);
      ++failures;
    }
    std::printf("\n");
  }

  std::printf("== stopping devplugd (SIGTERM)\n");
  std::fflush(stdout);
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("== devplugd exited %s\n", clean ? "cleanly (status 0)" : "with an error");
  if (!clean) ++failures;
  sim.Stop();
  for (const std::string& v : sim.violations()) {
    std::printf("protocol violation: %s\n", v.c_str());
    ++failures;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::printf("== demo %s\n", failures == 0 ? "OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"devplugctl: operator tools for devplug"};
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", std::string("devplugctl ") + DEVPLUG_VERSION);

  auto* sim = app.add_subcommand("simulate-kubelet",
                                 "Serve kubelet.sock in a directory like the kubelet does and "
                                 "print every registration and device list");
  std::string dir, pod_resources, plugins_registry;
  int allocate = 0, allocate_rate = 0;
  std::vector<std::string> prepare;
  double duration = 0, unprepare_after = 0;
  bool quiet = false;
  sim->add_option("--dir", dir,
                  "Device plugin directory (required; refused while a live kubelet serves "
                  "kubelet.sock there; no socket or checkpoint it did not create is touched)")
      ->required();
  sim->add_option("--pod-resources", pod_resources,
                  "Also serve the PodResources API (List, GetAllocatableResources) on this "
                  "socket; allocations made with --allocate show there");
  sim->add_option("--plugins-registry", plugins_registry,
                  "Also run the kubelet's plugin watcher on this folder (the kubelet's "
                  "<root-dir>/plugins_registry): probe every socket that appears there (GetInfo, "
                  "validation, NotifyRegistrationStatus) and connect device plugins; sockets there "
                  "are never removed");
  sim->add_option("--allocate", allocate,
                  "After a resource's first device list, Allocate this many healthy devices "
                  "and print the answer");
  sim->add_option(
         "--allocate-rate", allocate_rate,
         "Call Allocate this many times a second for every resource with a healthy "
         "device, from its first device list on (one device each), and print at the end how many "
         "were answered and how many failed (any failed: exit status 3)")
      ->check(CLI::Range(1, 1000));
  sim->add_option(
      "--prepare", prepare,
      "With --plugins-registry: once DRA driver <driver> registers, call its "
      "NodePrepareResources for the claim, as the kubelet does before a pod starts, and "
      "print the answer; NodeUnprepareResources at the end. The claim must be "
      "allocated to the driver on the API server devplugd reads "
      "(<driver>=<namespace>/<claim name>/<claim uid>; repeatable)");
  sim->add_option("--unprepare-after", unprepare_after,
                  "Unprepare the --prepare claims this many seconds after they are prepared "
                  "(default: at the end)");
  sim->add_option("--duration", duration, "Stop after this many seconds (default: until Ctrl-C)");
  sim->add_flag("-q,--quiet", quiet, "Print only violations");

  auto* demo =
      app.add_subcommand("demo",
                         "Run devplugd (built-in kvm configuration) against a simulated "
                         "kubelet in a temporary directory and show what the kubelet sees");
  std::string agent, module_dir, config;
  demo->add_option("--agent", agent, "devplugd binary (default: beside devplugctl)");
  demo->add_option("--module-dir", module_dir, "Module directory (default: the build tree's)");
  demo->add_option("--config", config, "Use this configuration instead of the built-in one");

  auto* inspect =
      app.add_subcommand("inspect-module",
                         "Load a module the way devplugd does, print its name, versions, hooks, "
                         "keys and subsystems, create it and list the devices it finds");
  devplug::ctl::InspectOptions io;
  inspect->add_option("module", io.path, "Module file (.so)")->required();
  inspect->add_option("settings", io.settings, "key=value settings of its [[resource]] table");
  inspect->add_option("--host-root", io.host_root, "Host root for /sys, /dev lookups")
      ->capture_default_str();
  inspect->add_flag("--all", io.all_devices, "List every device (default: the first 20)");

  devplug::ctl::StatusCommands status;
  devplug::ctl::AddStatusCommands(app, &status);

  CLI11_PARSE(app, argc, argv);
  if (int rc = devplug::ctl::RunStatusCommands(status); rc >= 0) return rc;
  devplug::SetupLogging("devplugctl");  // module and agent-library logs go to stderr
  if (*inspect) return devplug::ctl::InspectModule(io);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  if (*sim)
    return SimulateKubelet(dir, pod_resources, plugins_registry, allocate, allocate_rate, prepare,
                           unprepare_after, duration, quiet);
  return Demo(agent, module_dir, config);
}
