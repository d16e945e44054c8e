// macvtap benchmark, on real kernel objects: a veth lower link, devplugd
// with the macvtap module (host_root "/"), and the kubelet simulator.
//
// Allocate: the kubelet's Allocate of one ID through gRPC until the answer,
// which comes once the module has made the macvtap link over rtnetlink and
// seen its /dev/tap<ifindex> node. Timed twice: for a new link (the link of
// the previous sample deleted beforehand, not timed) and for an ID whose
// link a failed sandbox left behind (replaced: deleted, then made).
// Lower link removed: from the kernel's RTM_DELLINK announcement of the
// lower link (seen on a link monitor socket of the benchmark's own) to the
// simulated kubelet's stream holding the empty list; apart, how long the
// kernel takes from the delete request to that announcement (a veth's
// teardown waits for RCU). And back: from the RTM_NEWLINK request of a new
// veth pair to the full list.
// Prints a table; exits 0 whatever the numbers.
//
//   devplug_macvtap_bench [--runs 200] [--flips 100]   (needs root)
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <signal.h>
#include <unistd.h>

#include <poll.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_agent.h"
#include "bench_stats.h"
#include "devplug/common/netlink.h"
#include "kubelet_sim.h"
#include "test_util.h"

namespace {

using Clock = std::chrono::steady_clock;
using devplug::bench::Ms;
using devplug::bench::Stats;
using devplug::bench::Summarize;
using devplug::common::LinkInfo;
using devplug::common::LinkRequest;
using devplug::common::RouteSocket;
using namespace std::chrono_literals;

constexpr char kName[] = "macvtap.network.kubevirt.io/bench";
constexpr int kCapacity = 100;

int AddVeth(RouteSocket& rt, const std::string& name) {
  LinkRequest req(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
  req.PutString(IFLA_IFNAME, name);
  const size_t info = req.Nest(IFLA_LINKINFO);
  req.PutString(IFLA_INFO_KIND, "veth");
  const size_t data = req.Nest(IFLA_INFO_DATA);
  // VETH_INFO_PEER: an ifinfomsg, then the peer's attributes.
  std::vector<char> peer(NLMSG_ALIGN(sizeof(ifinfomsg)), 0);
  const std::string peer_name = name + "p";
  const size_t at = peer.size();
  peer.resize(at + RTA_SPACE(peer_name.size() + 1), 0);
  auto* a = reinterpret_cast<rtattr*>(peer.data() + at);
  a->rta_type = IFLA_IFNAME;
  a->rta_len = static_cast<unsigned short>(RTA_LENGTH(peer_name.size() + 1));
  std::copy(peer_name.begin(), peer_name.end(), static_cast<char*>(RTA_DATA(a)));
  req.Put(1 /* VETH_INFO_PEER */, peer.data(), peer.size());
  req.End(data);
  req.End(info);
  return rt.Execute(req);
}

int DeleteByName(RouteSocket& rt, const std::string& name) {
  LinkInfo l;
  const int rc = rt.Link(name, &l);
  return rc < 0 ? rc : rt.Delete(l.ifindex);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"macvtap benchmark"};
  int runs = 200, flips = 100;
  app.add_option("--runs", runs, "Allocate samples per row")->capture_default_str();
  app.add_option("--flips", flips, "lower link removals (and returns)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!devplug::testing::IsRoot()) {
    std::fprintf(stderr, "needs root (links)\n");
    return 1;
  }
  RouteSocket rt;
  const std::string lower = "dmb" + std::to_string(getpid() % 100000) + "l";
  if (!rt.ok() || AddVeth(rt, lower) != 0) {
    std::fprintf(stderr, "cannot make a veth pair %s\n", lower.c_str());
    return 1;
  }
  devplug::testing::TempDir dir;
  const std::string plugins = dir.path() + "/p", cfg = dir.path() + "/devplug.toml";
  std::ofstream(cfg) << devplug::bench::AgentTable(plugins, "/") << "control_socket = \"\"\n"
                     << "[[resource]]\nname = \"" << kName << "\"\nmodule = \"macvtap\"\n"
                     << "lower_device = \"" << lower << "\"\ncapacity = " << kCapacity << "\n";
  devplug::sim::KubeletSim sim(devplug::bench::SimOptions(plugins));
  if (!sim.Start().ok()) return 1;
  const pid_t agent = devplug::testing::SpawnProcess({DEVPLUG_BENCH_DEVPLUGD, "--config", cfg},
                                                     dir.path() + "/agent.log");
  auto listed = [&](size_t n) {
    return sim.WaitUntil(
        [&](const auto& rs) {
          auto it = rs.find(kName);
          return it != rs.end() && it->second.connected && it->second.devices.size() == n;
        },
        5s);
  };
  int rc = 0;
  std::vector<std::string> made;
  if (!listed(kCapacity)) {
    std::fprintf(stderr, "devplugd did not list the devices; see %s/agent.log\n",
                 dir.path().c_str());
    rc = 1;
  } else {
    auto allocate = [&](int i, std::vector<double>* s, size_t* failed) {
      const std::string id = "benchMvp" + std::to_string(i % kCapacity);
      v1beta1::ContainerAllocateResponse resp;
      const auto t0 = Clock::now();
      grpc::Status st = sim.Allocate(kName, {id}, &resp);
      const auto t1 = Clock::now();
      if (st.ok() && resp.devices_size() == 1)
        s->push_back(Ms(t1 - t0));
      else
        ++*failed;
      made.push_back(id);
    };
    std::vector<double> fresh, replaced;
    size_t fresh_failed = 0, replaced_failed = 0;
    for (int i = 0; i < runs; ++i) {
      allocate(i, &fresh, &fresh_failed);
      DeleteByName(rt, made.back());  // not timed: the next ID's link is new
    }
    for (int i = 0; i < runs; ++i) allocate(i, &replaced, &replaced_failed);  // left from before
    for (int i = 0; i < runs; ++i) allocate(i, &replaced, &replaced_failed);  // and again

    std::vector<double> kernel, gone, back;
    size_t gone_timeouts = 0, back_timeouts = 0;
    devplug::common::LinkMonitor monitor;
    for (int i = 0; i < flips; ++i) {
      monitor.Drain([](const auto&) {});
      auto t0 = Clock::now();
      int deleted = -1;
      std::thread del([&] {
        RouteSocket own;
        deleted = DeleteByName(own, lower);
      });
      // The announcement, timed here as it arrives.
      Clock::time_point announced{};
      const auto end = t0 + 5s;
      while (announced == Clock::time_point{} && Clock::now() < end) {
        pollfd p{monitor.fd(), POLLIN, 0};
        if (poll(&p, 1, 100) > 0)
          monitor.Drain([&](const devplug::common::LinkMonitor::Link& l) {
            if (l.removed && l.ifname == lower && announced == Clock::time_point{})
              announced = Clock::now();
          });
      }
      const bool seen = announced != Clock::time_point{} && listed(0);
      const auto t_seen = Clock::now();
      del.join();
      if (deleted != 0 || !seen) {
        ++gone_timeouts;
      } else {
        kernel.push_back(Ms(announced - t0));
        gone.push_back(Ms(t_seen - announced));
      }
      t0 = Clock::now();
      if (AddVeth(rt, lower) != 0 || !listed(kCapacity))
        ++back_timeouts;
      else
        back.push_back(Ms(Clock::now() - t0));
    }
    std::printf("\n| measurement | p50 | p99 | max | target |\n|---|---|---|---|---|\n");
    devplug::bench::PrintRow("Allocate, new macvtap link + /dev/tap node, via gRPC",
                             Summarize(fresh, fresh_failed), "p50 <= 5 ms", 5.0, true);
    devplug::bench::PrintRow("Allocate, replacing a link left behind, via gRPC",
                             Summarize(replaced, replaced_failed), "(the kernel's delete)", 0);
    devplug::bench::PrintRow("kernel: lower link delete request -> RTM_DELLINK sent",
                             Summarize(kernel), "(the kernel's)", 0);
    devplug::bench::PrintRow("lower link's RTM_DELLINK -> kubelet has the empty list",
                             Summarize(gone, gone_timeouts), "p99 <= 5 ms", 5.0);
    devplug::bench::PrintRow("lower link made -> kubelet has the full list",
                             Summarize(back, back_timeouts), "", 0);
    if (fresh_failed || replaced_failed || gone_timeouts || back_timeouts)
      std::printf("\nfailed: %zu + %zu Allocate, %zu + %zu list changes\n", fresh_failed,
                  replaced_failed, gone_timeouts, back_timeouts);
  }
  devplug::testing::StopProcess(agent, SIGTERM);
  for (int i = 0; i < kCapacity; ++i) DeleteByName(rt, "benchMvp" + std::to_string(i));
  DeleteByName(rt, lower);
  return rc;
}
