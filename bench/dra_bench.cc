// DRA (api = "dra"), measured against a local API server (the test suite's
// fake, tests/support/fake_apiserver.py: Python on loopback, so its own
// per-request time is in every row):
//   1. NodePrepareResources through the simulator's DRA client: the claim's
//      GET, the module's allocate(), the claim's CDI spec, its device
//      metadata file and the checkpoint (fsync), for a claim of one share
//      of the kvm device (8 shares); how soon the claim's status.devices
//      is on the API server after; then NodeUnprepareResources of it;
//   2. a device node made under host_root (generic module, a glob watched
//      by inotify) -> the ResourceSlice on the API server lists it, polled
//      every millisecond; a literal node removed or made again -> the
//      simulator's DRAResourceHealth stream says Unhealthy or Healthy, and
//      (removed) the slice carries the taint;
//   3. what one DRA resource adds to devplugd's resident memory: devplugd
//      with a device plugin resource, then with a second one beside it, then
//      with a DRA resource of the same module and devices beside it instead,
//      then with two such DRA resources (the first one also loads libcurl
//      and OpenSSL, once per devplugd; the second shows what each further
//      DRA resource costs).
// Prints a table; exits 0 whatever the numbers (1 when something fails).
//
//   4. a reload while a prepare waits in a slow allocate(): the longest the
//      main loop leaves the control socket unanswered, and how soon the
//      kubelet's call is answered (UNAVAILABLE, instead of after the module);
//   5. SIGTERM -> exit with three DRA resources and an API server that
//      accepts connections and never answers.
//
//   6. spawn -> 1,000 devices (a generic glob) on the API server as 8
//      slices, each start with none there;
//   7. the requests and writes devplugd makes over 10 idle minutes after.
//
//   devplug_dra_bench [--claims 300] [--changes 50] [--reloads 5] [--exits 5]
//                     [--devices 1000] [--starts 5] [--idle 600]
//   (needs root: mknod)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_agent.h"
#include "bench_stats.h"
#include "kube/client.h"
#include "kubelet_sim.h"
#include "ops/control.h"
#include "test_util.h"

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
using namespace std::chrono_literals;
using devplug::bench::Ms;
using devplug::bench::PrintRow;
using devplug::bench::Summarize;
namespace fs = std::filesystem;

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";
constexpr char kClaims[] = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";

// The slice's device count of `driver` on node "bench" (-1: none there).
int SliceDevices(devplug::kube::Client& api, const std::string& driver) {
  auto l = api.List(kSlices, {"spec.nodeName=bench,spec.driver=" + driver, ""});
  if (!l.ok() || (*l)["items"].empty()) return -1;
  int n = 0;
  for (const Json& s : (*l)["items"]) n += static_cast<int>(s["spec"]["devices"].size());
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"devplug DRA benchmark"};
  int claims = 300, changes = 50, reloads = 5, exits = 5, many = 1000, starts = 5, idle = 600;
  app.add_option("--claims", claims, "claims prepared and unprepared");
  app.add_option("--changes", changes, "device nodes made and removed");
  app.add_option("--reloads", reloads, "reloads with a prepare in flight");
  app.add_option("--exits", exits, "exits with an API server that does not answer");
  app.add_option("--devices", many, "device nodes of the publish-at-start row");
  app.add_option("--starts", starts, "starts of devplugd with them");
  app.add_option("--idle", idle, "seconds the last of them is left idle (writes counted)");
  CLI11_PARSE(app, argc, argv);

  devplug::testing::TempDir tmp;
  const std::string dir = tmp.path();
  const auto api_server = devplug::testing::StartFakeApiServer(DEVPLUG_BENCH_FAKE_APISERVER,
                                                               dir + "/api.port", dir + "/api.log");
  if (api_server.pid < 0) {
    std::fprintf(stderr, "the fake API server did not start (%s/api.log)\n", dir.c_str());
    return 1;
  }
  const pid_t api_pid = api_server.pid;
  const std::string server = "http://127.0.0.1:" + api_server.port;
  devplug::kube::Client::Options co;
  co.credentials.server = server;
  devplug::kube::Client api(co);

  const std::string plugins = dir + "/p", registry = dir + "/registry";
  fs::create_directories(registry);
  const std::string host_root = devplug::bench::KvmHostRoot(dir);
  fs::create_directories(host_root + "/dev/bench");
  const std::string agent_keys =
      devplug::bench::AgentTable(plugins, host_root) + "plugins_registry_dir = \"" + registry +
      "\"\nnode_name = \"bench\"\napi_server = \"" + server + "\"\ndra_state_dir = \"" + dir +
      "/dra\"\ncdi_dir = \"/run/cdi\"\n";
  const std::string kvm_dp = "[[resource]]\nname = \"bench.example/kvm\"\nmodule = \"kvm\"\n";
  const std::string kvm_dra =
      "[[resource]]\nname = \"bench.example/drakvm\"\nmodule = \"kvm\"\nshares = 8\napi = "
      "\"dra\"\n";
  const std::string glob_dra =
      "[[resource]]\nname = \"bench.example/dranodes\"\nmodule = \"generic\"\npaths = "
      "[\"/dev/bench/node*\"]\napi = \"dra\"\n";
  // One literal node: removed, the module says "missing" (Unhealthy).
  const std::string health_dra =
      "[[resource]]\nname = \"bench.example/drahealth\"\nmodule = \"generic\"\npaths = "
      "[\"/dev/bench/health0\"]\napi = \"dra\"\n";
  if (!devplug::testing::MakeCharDevice(host_root + "/dev/bench/health0", 1, 3)) return 1;

  devplug::sim::KubeletSim::Options so = devplug::bench::SimOptions(plugins);
  so.plugins_registry = registry;
  so.reconcile_period = 100ms;
  devplug::sim::KubeletSim sim(so);
  if (!sim.Start().ok()) return 1;
  auto start = [&](const std::string& resources, const std::string& name) {
    std::ofstream(dir + "/" + name + ".toml") << agent_keys << resources;
    return devplug::testing::SpawnProcess(
        {DEVPLUG_BENCH_DEVPLUGD, "--config", dir + "/" + name + ".toml"},
        dir + "/" + name + ".log");
  };
  auto wait = [](auto&& pred, std::chrono::milliseconds t) {
    const auto end = Clock::now() + t;
    while (Clock::now() < end) {
      if (pred()) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  };

  std::printf("| measurement | p50 | p99 | max | target |\n|---|---|---|---|---|\n");

  // 3 first (a fresh devplugd each): resident memory with one device plugin
  // resource, then with a second one beside it, then with a DRA resource
  // (the same module, devices and shares) beside it instead.
  const std::string kvm_dp2 =
      "[[resource]]\nname = \"bench.example/dpkvm\"\nmodule = \"kvm\"\nshares = 8\n";
  const std::string kvm_dra2 =
      "[[resource]]\nname = \"bench.example/drakvm2\"\nmodule = \"kvm\"\nshares = 8\napi = "
      "\"dra\"\n";
  const char* const names[4] = {"mem-dp", "mem-dp2", "mem-dra", "mem-dra2"};
  const std::string extra[4] = {"", kvm_dp2, kvm_dra, kvm_dra + kvm_dra2};
  long rss[4] = {0, 0, 0, 0}, anon[4] = {0, 0, 0, 0};
  for (int k = 0; k < 4; ++k) {
    const std::string name = names[k];
    const pid_t agent = start(kvm_dp + extra[k], name);
    const bool up =
        sim.WaitForResource("bench.example/kvm", 1, 30s) &&
        (k != 1 || sim.WaitForResource("bench.example/dpkvm", 1, 30s)) &&
        (k < 2 || wait([&] { return SliceDevices(api, "drakvm.bench.example") == 1; }, 30s)) &&
        (k < 3 || wait([&] { return SliceDevices(api, "drakvm2.bench.example") == 1; }, 30s));
    std::this_thread::sleep_for(300ms);
    rss[k] = devplug::bench::StatusKb(agent, "VmRSS");
    anon[k] = devplug::bench::StatusKb(agent, "RssAnon");
    devplug::testing::StopProcess(agent, SIGTERM);
    if (!up) {
      std::fprintf(stderr, "devplugd did not start (%s/%s.log)\n", dir.c_str(), name.c_str());
      return 1;
    }
  }

  // 1 and 2: one devplugd with both DRA resources.
  const pid_t agent = start(kvm_dra + glob_dra + health_dra, "dra");
  auto* sim_ptr = &sim;
  if (!wait(
          [&] {
            auto d = sim_ptr->dra_driver("drakvm.bench.example");
            auto g = sim_ptr->dra_driver("dranodes.bench.example");
            auto h = sim_ptr->dra_driver("drahealth.bench.example");
            return d && d->registered && g && g->registered && h && h->registered &&
                   !h->health.empty();
          },
          30s) ||
      !wait([&] { return SliceDevices(api, "drakvm.bench.example") == 1; }, 30s)) {
    std::fprintf(stderr, "devplugd did not register; see %s/dra.log\n", dir.c_str());
    return 1;
  }
  std::vector<double> prep, unprep, status_ms;
  size_t status_timeouts = 0;
  for (int i = 0; i < claims; ++i) {
    Json claim = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata", {{"name", "c" + std::to_string(i)}, {"namespace", "default"}}},
        {"status",
         {{"allocation",
           {{"devices",
             {{"results", Json::array({{{"request", "r"},
                                        {"driver", "drakvm.bench.example"},
                                        {"pool", "bench"},
                                        {"device", "kvm"},
                                        {"shareID", "share-" + std::to_string(i)},
                                        {"consumedCapacity", {{"shares", "1"}}}}})}}}}}}}};
    auto made = api.Create(kClaims, claim);
    if (!made.ok()) return 1;
    const std::string uid = (*made)["metadata"]["uid"];
    const std::array<std::string, 3> ref{"default", uid, "c" + std::to_string(i)};
    devplug::sim::drav1::NodePrepareResourcesResponse p;
    auto t = Clock::now();
    grpc::Status st = sim.NodePrepareResources("drakvm.bench.example", {ref}, &p);
    prep.push_back(Ms(Clock::now() - t));
    if (!st.ok() || !p.claims().at(uid).error().empty()) {
      std::fprintf(stderr, "prepare failed: %s %s\n", st.error_message().c_str(),
                   st.ok() ? p.claims().at(uid).error().c_str() : "");
      return 1;
    }
    // devplugd writes the claim's status.devices after its answer, on a
    // lane of its own: how soon the API server has it, from the call.
    if (!wait(
            [&] {
              auto c = api.Get(std::string(kClaims) + "/c" + std::to_string(i));
              return c.ok() && c->contains("status") && (*c)["status"].contains("devices") &&
                     !(*c)["status"]["devices"].empty();
            },
            5s))
      ++status_timeouts;
    else
      status_ms.push_back(Ms(Clock::now() - t));
    devplug::sim::drav1::NodeUnprepareResourcesResponse u;
    t = Clock::now();
    st = sim.NodeUnprepareResources("drakvm.bench.example", {ref}, &u);
    unprep.push_back(Ms(Clock::now() - t));
    if (!st.ok() || !u.claims().at(uid).error().empty()) return 1;
  }
  PrintRow(
      "NodePrepareResources, 1 share of a device (claim GET, allocate, CDI spec, metadata file, "
      "checkpoint)",
      Summarize(prep), "p50 <= 5 ms", 5.0, /*by_p50=*/true);
  PrintRow("NodePrepareResources called -> the claim's status.devices on the API server",
           Summarize(status_ms, status_timeouts), "", 0);
  PrintRow("NodeUnprepareResources, 1 share (spec and metadata removed, checkpoint)",
           Summarize(unprep), "", 0);

  std::vector<double> slice_ms;
  size_t timeouts = 0;
  int have = SliceDevices(api, "dranodes.bench.example");
  if (have < 0) have = 0;
  for (int i = 0; i < changes; ++i) {
    const std::string node = host_root + "/dev/bench/node" + std::to_string(i % 4);
    const bool add = !fs::exists(node);
    const auto t = Clock::now();
    if (add) {
      if (!devplug::testing::MakeCharDevice(node, 1, 3)) return 1;
    } else {
      fs::remove(node);
    }
    const int want = have + (add ? 1 : -1);
    if (wait([&] { return SliceDevices(api, "dranodes.bench.example") == std::max(want, 0); },
             5s)) {
      slice_ms.push_back(Ms(Clock::now() - t));
      have = want;
    } else {
      ++timeouts;
      have = std::max(SliceDevices(api, "dranodes.bench.example"), 0);
    }
  }
  PrintRow("device node made or removed (inotify) -> ResourceSlice updated",
           Summarize(slice_ms, timeouts), "p50 <= 100 ms", 100.0, /*by_p50=*/true);

  // The one node of drahealth removed and made again: how soon the
  // kubelet's DRAResourceHealth stream (the simulator's) says Unhealthy,
  // then Healthy; and how soon the slice carries the taint.
  std::vector<double> health_ms, taint_ms;
  size_t health_timeouts = 0;
  auto stream_says = [&](const std::string& health) {
    auto d = sim_ptr->dra_driver("drahealth.bench.example");
    if (!d || d->health.size() != 1) return false;
    return d->health.begin()->second.first == health;
  };
  auto tainted = [&] {
    auto l = api.List(kSlices, {"spec.nodeName=bench,spec.driver=drahealth.bench.example", ""});
    if (!l.ok()) return false;
    for (const Json& sl : (*l)["items"])
      for (const Json& d : sl["spec"]["devices"])
        if (d.contains("taints")) return true;
    return false;
  };
  const std::string health_node = host_root + "/dev/bench/health0";
  for (int i = 0; i < changes; ++i) {
    const bool remove = fs::exists(health_node);
    const auto t = Clock::now();
    if (remove)
      fs::remove(health_node);
    else if (!devplug::testing::MakeCharDevice(health_node, 1, 3))
      return 1;
    if (!wait([&] { return stream_says(remove ? "Unhealthy" : "Healthy"); }, 5s)) {
      ++health_timeouts;
      continue;
    }
    health_ms.push_back(Ms(Clock::now() - t));
    if (remove && wait(tainted, 5s)) taint_ms.push_back(Ms(Clock::now() - t));
    if (!remove) wait([&] { return !tainted(); }, 5s);
  }
  PrintRow("device node removed or made -> the kubelet's health stream says so",
           Summarize(health_ms, health_timeouts), "p50 <= 10 ms", 10.0, /*by_p50=*/true);
  PrintRow("device node removed -> its taint in the ResourceSlice", Summarize(taint_ms),
           "p50 <= 100 ms", 100.0, /*by_p50=*/true);
  devplug::testing::StopProcess(agent, SIGTERM);

  // 4. A reload while a prepare waits in a slow allocate() (fake_release,
  //    allocate_delay_ms 1500): how long the main loop goes without
  //    answering the control socket, asked back to back from SIGHUP until
  //    the kubelet's call has its answer and a second more.
  std::vector<double> stall_ms, answered_ms;
  {
    const std::string control = dir + "/reload-control.sock";
    auto slow = [&](int count) {
      return "[[resource]]\nname = \"bench.example/slow\"\nmodule = \"" +
             std::string(DEVPLUG_BENCH_FAKE_MODULE_DIR) + "/fake_release.so\"\napi = \"dra\"\n" +
             "count = " + std::to_string(count) + "\nallocate_delay_ms = 1500\n";
    };
    const std::string keys = "control_socket = \"" + control + "\"\n";
    std::ofstream(dir + "/reload.toml") << agent_keys << keys << slow(2);
    const pid_t a = devplug::testing::SpawnProcess(
        {DEVPLUG_BENCH_DEVPLUGD, "--config", dir + "/reload.toml"}, dir + "/reload.log");
    if (!wait([&] { return SliceDevices(api, "slow.bench.example") == 2; }, 30s)) {
      std::fprintf(stderr, "devplugd did not publish; see %s/reload.log\n", dir.c_str());
      return 1;
    }
    for (int i = 0; i < reloads; ++i) {
      Json claim = {{"apiVersion", "resource.k8s.io/v1"},
                    {"kind", "ResourceClaim"},
                    {"metadata", {{"name", "slow" + std::to_string(i)}, {"namespace", "default"}}},
                    {"status",
                     {{"allocation",
                       {{"devices",
                         {{"results", Json::array({{{"request", "r"},
                                                    {"driver", "slow.bench.example"},
                                                    {"pool", "bench"},
                                                    {"device", "fake-0"}}})}}}}}}}};
      auto made = api.Create(kClaims, claim);
      if (!made.ok()) return 1;
      const std::array<std::string, 3> ref{"default", (*made)["metadata"]["uid"],
                                           "slow" + std::to_string(i)};
      std::atomic<bool> answered{false};
      std::thread kubelet([&] {
        devplug::sim::drav1::NodePrepareResourcesResponse r;
        (void)sim.NodePrepareResources("slow.bench.example", {ref}, &r);
        answered = true;
      });
      std::this_thread::sleep_for(300ms);  // the allocate() sleeps now
      std::ofstream(dir + "/reload.toml") << agent_keys << keys << slow(i % 2 ? 2 : 3);
      const auto t0 = Clock::now();
      kill(a, SIGHUP);
      double worst = 0;
      std::optional<Clock::time_point> done;
      while (!done || Clock::now() < *done + 1s) {
        const auto t = Clock::now();
        if (!devplug::ops::ControlRequest(control, "{\"status\": {}}", 5000ms).ok()) break;
        worst = std::max(worst, Ms(Clock::now() - t));
        if (!done && answered) {
          done = Clock::now();
          answered_ms.push_back(Ms(*done - t0));
        }
      }
      kubelet.join();
      stall_ms.push_back(worst);
      std::this_thread::sleep_for(1500ms);  // the allocate() ends
    }
    devplug::testing::StopProcess(a, SIGTERM);
  }
  PrintRow("reload with a prepare in flight: the longest control-socket answer (main loop stall)",
           Summarize(stall_ms), "<= 100 ms", 100.0);
  PrintRow("reload with a prepare in flight: SIGHUP -> the kubelet's call answered (UNAVAILABLE)",
           Summarize(answered_ms), "", 0);

  // 5. Exit with three DRA resources and an API server that accepts
  //    connections and never answers: SIGTERM -> the process reaped.
  std::vector<double> exit_ms;
  {
    const int silent = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (silent < 0 || bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(silent, 64) != 0 ||
        getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      return 1;
    std::string keys = agent_keys;
    keys.replace(keys.find(server), server.size(),
                 "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
    std::string three;
    for (int k = 0; k < 3; ++k)
      three += "[[resource]]\nname = \"bench.example/silent" + std::to_string(k) +
               "\"\nmodule = \"kvm\"\nshares = 2\napi = \"dra\"\n";
    std::ofstream(dir + "/silent.toml") << keys << "call_timeout = \"20s\"\n" << three;
    for (int i = 0; i < exits; ++i) {
      const pid_t a = devplug::testing::SpawnProcess(
          {DEVPLUG_BENCH_DEVPLUGD, "--config", dir + "/silent.toml"}, dir + "/silent.log");
      if (!wait(
              [&] {
                for (int k = 0; k < 3; ++k) {
                  auto d = sim_ptr->dra_driver("silent" + std::to_string(k) + ".bench.example");
                  if (!d || !d->registered || d->registrations < static_cast<uint64_t>(i + 1))
                    return false;
                }
                return true;
              },
              30s)) {
        std::fprintf(stderr, "devplugd did not register; see %s/silent.log\n", dir.c_str());
        return 1;
      }
      const auto t = Clock::now();
      kill(a, SIGTERM);
      int status = 0;
      waitpid(a, &status, 0);
      exit_ms.push_back(Ms(Clock::now() - t));
    }
    close(silent);
  }
  PrintRow("exit, 3 DRA resources, API server not answering: SIGTERM -> reaped", Summarize(exit_ms),
           "<= 1000 ms", 1000.0);
  // 6. 1,000 device nodes (generic, a glob), published through DRA: from
  //    the spawn of devplugd until the API server holds all 8 slices with
  //    every device (the poll, every 10 ms, lists them; the fake API server
  //    is Python, so the poll and the writes share its time). Each start
  //    begins with no slice of the driver on the server.
  std::vector<double> publish_ms;
  size_t publish_timeouts = 0;
  const std::string many_driver = "dramany.bench.example";
  fs::create_directories(host_root + "/dev/bench/many");
  for (int i = 0; i < many; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "n%04d", i);
    if (!devplug::testing::MakeCharDevice(host_root + "/dev/bench/many/" + name, 1, 3)) return 1;
  }
  const size_t want_slices = (static_cast<size_t>(many) + 127) / 128;
  auto published = [&] {
    auto l = api.List(kSlices, {"spec.nodeName=bench,spec.driver=" + many_driver, ""});
    if (!l.ok() || (*l)["items"].size() != want_slices) return false;
    size_t n = 0;
    for (const Json& sl : (*l)["items"]) n += sl["spec"]["devices"].size();
    return n == static_cast<size_t>(many);
  };
  const std::string many_dra =
      "[[resource]]\nname = \"bench.example/dramany\"\nmodule = \"generic\"\npaths = "
      "[\"/dev/bench/many/n*\"]\napi = \"dra\"\n";
  pid_t many_agent = -1;
  for (int i = 0; i < starts; ++i) {
    if (!api.DeleteCollection(kSlices, {"spec.driver=" + many_driver, ""}).ok()) return 1;
    const auto t = Clock::now();
    many_agent = start(many_dra, "many");
    std::optional<Clock::time_point> done;
    while (Clock::now() < t + 30s) {
      if (published()) {
        done = Clock::now();
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    if (done)
      publish_ms.push_back(Ms(*done - t));
    else
      ++publish_timeouts;
    if (i + 1 < starts) devplug::testing::StopProcess(many_agent, SIGTERM);
  }
  PrintRow("spawn -> " + std::to_string(many) + " devices (generic glob) on the API server as " +
               std::to_string(want_slices) + " slices",
           Summarize(publish_ms, publish_timeouts), "<= 1000 ms", 1000.0);

  // 7. The last of those devplugd left alone: every request it makes to
  //    the API server over `idle` seconds (the bench asks nothing then).
  //    Slices are re-listed every 5 minutes (±20%); writes must be none.
  {
    auto agent_requests = [&](size_t* writes) -> std::optional<size_t> {
      auto r = api.Get("/_fake/requests");
      if (!r.ok()) return std::nullopt;
      size_t n = 0;
      *writes = 0;
      for (const Json& q : (*r)["items"]) {
        const std::string path = q["path"], method = q["method"];
        if (path.rfind("/_fake/", 0) == 0) continue;
        ++n;
        if (method != "GET") ++*writes;
      }
      return n;
    };
    size_t writes0 = 0, writes1 = 0;
    std::this_thread::sleep_for(1s);  // what the start wrote has settled
    auto before = agent_requests(&writes0);
    // The bench's own polls of the publish above went before this line;
    // from here on only devplugd speaks to the API server.
    std::this_thread::sleep_for(std::chrono::seconds(idle));
    auto after = agent_requests(&writes1);
    devplug::testing::StopProcess(many_agent, SIGTERM);
    if (!before || !after) return 1;
    const size_t requests = *after - *before, writes = writes1 - writes0;
    std::printf(
        "| idle %d s, 1 DRA resource of %d devices: requests to the API server | %zu (%.2f per "
        "minute) | | | |\n",
        idle, many, requests, requests * 60.0 / std::max(idle, 1));
    std::printf(
        "| idle %d s, 1 DRA resource of %d devices: writes to the API server | %zu | | | 0 over 10 "
        "minutes (%s) |\n",
        idle, many, writes,
        writes > 0    ? "MISSED"
        : idle >= 600 ? "met"
                      : "not judged: a shorter window");
  }
  devplug::testing::StopProcess(api_pid, SIGTERM);

  // RSS counts the library pages a first TLS client touches (libcurl's
  // OpenSSL, shared with every process that maps them); RssAnon is what
  // devplugd alone holds. The target is per DRA resource: the second one's
  // row; the first one's also pays libcurl and OpenSSL, once per devplugd.
  for (const auto& [what, v] : {std::pair{"RSS", rss}, std::pair{"RssAnon", anon}}) {
    const double dp = (v[1] - v[0]) / 1024.0, first = (v[2] - v[0]) / 1024.0,
                 second = (v[3] - v[2]) / 1024.0;
    std::printf("| devplugd %s: 1 device plugin resource | %.1f MiB | | | |\n", what,
                v[0] / 1024.0);
    std::printf(
        "| devplugd %s: + 1 device plugin resource (kvm, 8 shares) | %.1f MiB | | | "
        "+%.2f MiB |\n",
        what, v[1] / 1024.0, dp);
    std::printf(
        "| devplugd %s: + 1 DRA resource (kvm, 8 shares) instead, the first: libcurl and "
        "OpenSSL load | %.1f MiB | | | +%.2f MiB |\n",
        what, v[2] / 1024.0, first);
    std::printf(
        "| devplugd %s: + a second DRA resource (kvm, 8 shares) | %.1f MiB | | | +%.2f MiB: "
        "<= 1 MiB per DRA resource (%s) |\n",
        what, v[3] / 1024.0, second, devplug::bench::Verdict(second <= 1.0));
  }
  return 0;
}
