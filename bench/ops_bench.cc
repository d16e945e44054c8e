// Operations benchmark (docs/design.md, "Reload, status, metrics"): what a SIGHUP reload costs
// the resources it does not change (nothing: no stream end, no registration)
// and how soon the one it changes is back; what the metrics cost a kubelet
// call (the counters one Allocate bumps, and Allocate latency while a scraper
// reads the metrics ten times a second, and back to back, against no scraper,
// in alternating 100 ms blocks so that machine noise hits all alike); and
// what one scrape costs.
// Prints a table; exits 0 whatever the numbers (the table says which targets
// were met), 1 when something did not work at all.
//
//   devplug_ops_bench [--resources 6] [--reloads 20] [--calls 20000]
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <CLI/CLI.hpp>

#include "bench_stats.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "kubelet_sim.h"
#include "ops/control.h"
#include "ops/metrics.h"
#include "test_util.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using devplug::bench::Summarize;

using devplug::bench::Ms;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"devplugd operations benchmark"};
  int resources = 6, reloads = 20, calls = 20000;
  app.add_option("--resources", resources, "kvm resources to serve")->capture_default_str();
  app.add_option("--reloads", reloads, "reloads that change one resource")->capture_default_str();
  app.add_option("--calls", calls, "Allocate calls at least, per side (scraped / not)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (resources < 2) resources = 2;

  char tmpl[] = "/tmp/devplug-opsbench.XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string plugins = dir + "/p", control = dir + "/control.sock";
  std::string host_root = "/";
  fs::create_directories(dir + "/host/dev");
  if (mknod((dir + "/host/dev/kvm").c_str(), S_IFCHR | 0600, makedev(10, 232)) == 0)
    host_root = dir + "/host";
  const int changed = resources / 2;  // the resource each reload changes
  auto name = [](int i) { return "bench.example/kvm" + std::to_string(i); };
  const std::string cfg_path = dir + "/devplug.toml";
  auto write_config = [&](int shares_of_changed) {
    std::string cfg = "[agent]\nplugin_dir = \"" + plugins + "\"\nmodule_dir = \"" +
                      DEVPLUG_BENCH_MODULE_DIR + "\"\nhost_root = \"" + host_root +
                      "\"\nlog_level = \"warn\"\nresync_interval = \"0s\"\ncontrol_socket = \"" +
                      control + "\"\n";
    for (int i = 0; i < resources; ++i)
      cfg += "[[resource]]\nname = \"" + name(i) + "\"\nmodule = \"kvm\"\nshares = " +
             std::to_string(i == changed ? shares_of_changed : 110) + "\n";
    std::ofstream(cfg_path) << cfg;
  };
  write_config(110);

  devplug::sim::KubeletSim::Options o;
  o.dir = plugins;
  o.owns_dir = true;
  devplug::sim::KubeletSim sim(o);
  if (!sim.Start().ok()) return 1;
  const pid_t agent = devplug::testing::SpawnProcess({DEVPLUG_BENCH_DEVPLUGD, "--config", cfg_path},
                                                     dir + "/agent.log");
  auto all_up = [&](int changed_registrations, size_t changed_devices) {
    return sim.WaitUntil(
        [&](const auto& rs) {
          if (static_cast<int>(rs.size()) < resources) return false;
          for (const auto& [n, r] : rs) {
            if (!r.connected || r.stream_snapshots == 0) return false;
            if (n == name(changed) &&
                (r.registrations < static_cast<uint64_t>(changed_registrations) ||
                 r.devices.size() != changed_devices))
              return false;
          }
          return true;
        },
        30s);
  };
  if (!all_up(1, 110)) {
    std::fprintf(stderr, "resources did not register; see %s/agent.log\n", dir.c_str());
    return 1;
  }

  // 1. Reloads that change one resource's table: SIGHUP -> that resource
  // registered again with its new list; the others must see nothing.
  std::vector<double> reload_ms;
  for (int i = 1; i <= reloads; ++i) {
    const size_t shares = (i % 2) ? 111 : 110;
    write_config(static_cast<int>(shares));
    const auto t0 = Clock::now();
    kill(agent, SIGHUP);
    if (!all_up(i + 1, shares)) {
      std::fprintf(stderr, "reload %d: the changed resource did not come back; see %s/agent.log\n",
                   i, dir.c_str());
      return 1;
    }
    reload_ms.push_back(Ms(Clock::now() - t0));
  }
  uint64_t others_interrupted = 0, others_registrations = 0;
  for (int i = 0; i < resources; ++i) {
    if (i == changed) continue;
    auto r = sim.resource(name(i));
    others_interrupted += r->stream_ends;
    others_registrations += r->registrations - 1;
  }
  // A reload that changes nothing: SIGHUP -> reloads_total{result="ok"} up.
  auto reloads_ok = [&]() -> long {
    auto m = devplug::ops::ControlRequest(control, "{\"metrics\": {}}", 5000ms);
    if (!m.ok()) return -1;
    const std::string key = "devplug_reloads_total{result=\\\"ok\\\"} ";
    const size_t at = m->find(key);
    return at == std::string::npos ? -1 : std::atol(m->c_str() + at + key.size());
  };
  std::vector<double> noop_ms;
  for (int i = 0; i < reloads; ++i) {
    const long before = reloads_ok();
    const auto t0 = Clock::now();
    kill(agent, SIGHUP);
    while (reloads_ok() <= before && Clock::now() - t0 < 10s) std::this_thread::sleep_for(200us);
    noop_ms.push_back(Ms(Clock::now() - t0));
  }

  // 2. Allocate with and without a scraper (devplugctl's path: the control
  // socket, which builds the same text the HTTP exposer serves), alternating
  // blocks of calls on one channel.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(
      "unix:" + plugins + "/devplug-" + std::string("bench.example_kvm0") + ".sock",
      grpc::InsecureChannelCredentials(), args);
  channel->WaitForConnected(std::chrono::system_clock::now() + 10s);
  auto stub = v1beta1::DevicePlugin::NewStub(channel);
  v1beta1::AllocateRequest req;
  req.add_container_requests()->add_devices_ids("kvm-0");
  auto call_us = [&]() {
    grpc::ClientContext ctx;
    v1beta1::AllocateResponse resp;
    const auto t = Clock::now();
    if (!stub->Allocate(&ctx, req, &resp).ok()) return -1.0;
    return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
  };
  for (int i = 0; i < 500; ++i) call_us();  // warm-up
  // Blocks of 100 ms: a quiet one, then one with one scrape at its start
  // (10 Hz while scraped), then one with scrapes back to back (the worst a
  // scraper can do), round and round.
  auto scrape = [&] {
    const auto t = Clock::now();
    (void)devplug::ops::ControlRequest(control, "{\"metrics\": {}}", 5000ms);
    return Ms(Clock::now() - t);
  };
  // Each round's three blocks lie within 300 ms of each other, so comparing
  // them round by round (the median of the per-round ratios) cancels the
  // machine's drift, which is larger than the effect being measured.
  std::vector<double> quiet_us, scraped_us, busy_us, scrape_ms;
  std::vector<double> scraped_ratio, busy_ratio, quiet_ratio, again_us;
  while (quiet_us.size() < static_cast<size_t>(calls) ||
         scraped_us.size() < static_cast<size_t>(calls)) {
    // The order rotates from round to round: a block's place in its round
    // (right after a thread start, say) must not look like a scraper's cost.
    // Side 3 is a second quiet block: how far two quiet blocks differ is
    // the noise floor the scraper's cost is read against.
    double block_p50[4] = {0, 0, 0, 0};
    const size_t round = scraped_ratio.size();
    for (int k = 0; k < 4; ++k) {
      const int side = static_cast<int>((round + static_cast<size_t>(k)) % 4);
      std::vector<double>& into = side == 0   ? quiet_us
                                  : side == 1 ? scraped_us
                                  : side == 2 ? busy_us
                                              : again_us;
      std::vector<double> block;
      std::atomic<bool> stop{false};
      std::thread scraper;
      if (side == 1) scraper = std::thread([&] { scrape_ms.push_back(scrape()); });
      if (side == 2)
        scraper = std::thread([&] {
          while (!stop) (void)scrape();
        });
      const auto end = Clock::now() + 100ms;
      while (Clock::now() < end) {
        const double us = call_us();
        if (us < 0) {
          std::fprintf(stderr, "Allocate failed\n");
          return 1;
        }
        block.push_back(us);
      }
      stop = true;
      if (scraper.joinable()) scraper.join();
      into.insert(into.end(), block.begin(), block.end());
      block_p50[side] = Summarize(block).p50;
    }
    if (block_p50[0] > 0) {
      scraped_ratio.push_back(block_p50[1] / block_p50[0]);
      busy_ratio.push_back(block_p50[2] / block_p50[0]);
      quiet_ratio.push_back(block_p50[3] / block_p50[0]);
    }
  }
  devplug::testing::StopProcess(agent, SIGTERM);
  sim.Stop();
  fs::remove_all(dir);

  // 3. The counters one Allocate bumps, in isolation, and one scrape's text
  // for 6 and for 100 resources.
  devplug::ops::Metrics metrics("bench", "1.2");
  auto rm = metrics.Add("bench.example/kvm0");
  constexpr int kBumps = 5'000'000;
  auto t0 = Clock::now();
  for (int i = 0; i < kBumps; ++i)
    rm->Rpc(devplug::ops::Rpc::kAllocate, devplug::StatusCode::kOk, std::chrono::microseconds(80));
  const double bump_ns =
      std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kBumps;
  auto text_ms = [&](int n) {
    devplug::ops::Metrics m("bench", "1.2");
    std::vector<std::shared_ptr<devplug::ops::ResourceMetrics>> keep;
    for (int i = 0; i < n; ++i) keep.push_back(m.Add(name(i)));
    std::vector<double> ms;
    size_t bytes = 0;
    for (int i = 0; i < 50; ++i) {
      const auto t = Clock::now();
      bytes = m.Text().size();
      ms.push_back(Ms(Clock::now() - t));
    }
    return std::make_pair(Summarize(ms).p50, bytes);
  };
  const auto [text6_ms, text6_bytes] = text_ms(resources);
  const auto [text100_ms, text100_bytes] = text_ms(100);

  const auto reload = Summarize(reload_ms), noop = Summarize(noop_ms);
  const auto quiet = Summarize(quiet_us), scraped = Summarize(scraped_us);
  const auto busy = Summarize(busy_us), scrapes = Summarize(scrape_ms);
  const double overhead = (Summarize(scraped_ratio).p50 - 1) * 100;
  const double busy_overhead = (Summarize(busy_ratio).p50 - 1) * 100;
  const double noise = (Summarize(quiet_ratio).p50 - 1) * 100;
  const double bump_share = quiet.p50 > 0 ? bump_ns / (quiet.p50 * 1000) * 100 : 0;
  constexpr auto mark = devplug::bench::Verdict;
  std::printf(
      "devplugd operations benchmark: %d kvm resources x 110 devices, %d reloads of "
      "one resource, %d Allocate calls per side, %u cores\n\n",
      resources, reloads, calls, std::thread::hardware_concurrency());
  std::printf("| measurement                                   | value           | target     |\n");
  std::printf(
      "|-----------------------------------------------|-----------------|------------|------\n");
  // Back = registered again with the new list, which waits 1 s on purpose
  // after the old stream ends (the kubelet must see that end first).
  std::printf(
      "| reload changing 1 of %d: back, p50 / worst     | %6.1f / %6.1f ms | <= 1 s + 50 ms p50 | "
      "%s\n",
      resources, reload.p50, reload.max, mark(reload.p50 <= 1050));
  std::printf("| reload changing 1 of %d: other streams ended   | %15llu | 0          | %s\n",
              resources, static_cast<unsigned long long>(others_interrupted),
              mark(others_interrupted == 0));
  std::printf("| reload changing 1 of %d: other registrations   | %15llu | 0          | %s\n",
              resources, static_cast<unsigned long long>(others_registrations),
              mark(others_registrations == 0));
  std::printf("| reload changing nothing, p50 / worst          | %6.2f / %6.2f ms |            |\n",
              noop.p50, noop.max);
  std::printf("| Allocate p50, no scraper / scraped at 10 Hz   | %6.1f / %6.1f us |            |\n",
              quiet.p50, scraped.p50);
  std::printf("| Allocate p99, no scraper / scraped at 10 Hz   | %6.1f / %6.1f us |            |\n",
              quiet.p99, scraped.p99);
  std::printf("| Allocate p50 cost of scraping at 10 Hz        | %+14.1f%% | <= 2%% + noise | %s\n",
              overhead, mark(overhead <= 2 + std::abs(noise)));
  std::printf("| noise: a quiet block against another          | %+14.1f%% |            |\n",
              noise);
  std::printf(
      "| Allocate p50 / p99, scraped back to back      | %6.1f / %6.1f us | (%+.1f%% p50) |\n",
      busy.p50, busy.p99, busy_overhead);
  std::printf("| counters one Allocate bumps                   | %12.1f ns | (%.3f%% of p50) |\n",
              bump_ns, bump_share);
  std::printf("| one scrape over the control socket, p50       | %12.2f ms |            |\n",
              scrapes.p50);
  std::printf("| metrics text, %3d resources: build p50, size  | %6.2f ms %5zu KiB |          |\n",
              resources, text6_ms, text6_bytes / 1024);
  std::printf("| metrics text, 100 resources: build p50, size  | %6.2f ms %5zu KiB |          |\n",
              text100_ms, text100_bytes / 1024);
  return 0;
}
