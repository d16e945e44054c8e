// STATUS= and the status JSON over agent views made by hand.
#include "ops/status_report.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace devplug::ops {
namespace {

using State = kubelet::Registrar::State;
using nlohmann::json;

Device Dev(const std::string& id, bool healthy) {
  Device d;
  d.id = id;
  d.healthy = healthy;
  d.numa_node = 1;
  return d;
}

ResourceView Running(const std::string& name, std::vector<Device> devices, bool registered) {
  ResourceView r;
  r.name = name;
  r.module = "kvm";
  r.running = true;
  r.registered = registered;
  r.state = registered ? State::kRegistered : State::kRegistering;
  r.devices = std::make_shared<const DeviceList>(std::move(devices));
  return r;
}

AgentView Node() {
  AgentView v;
  v.version = "1.2.3";
  v.abi = "1.9";
  v.since = std::chrono::system_clock::time_point(std::chrono::seconds(1795000000));
  v.started = true;
  v.kubelet_socket = true;
  return v;
}

TEST(StatusReportTest, AllWellIsOneShortLine) {
  AgentView v = Node();
  v.resources.push_back(Running("a/kvm", {Dev("kvm0", true)}, true));
  v.resources.push_back(Running("a/tun", {Dev("tun0", true)}, true));
  EXPECT_EQ(StatusLine(v), "registered 2/2 resources");
}

TEST(StatusReportTest, TheLineSaysWhatIsWrongAndWhere) {
  AgentView v = Node();
  v.kubelet_socket = false;
  v.resources.push_back(Running("a/kvm", {Dev("kvm0", false)}, false));
  ResourceView retrying;
  retrying.name = "a/fpga";
  retrying.failed = true;
  retrying.retrying = true;
  v.resources.push_back(retrying);
  ResourceView out;
  out.name = "a/gone";
  out.failed = true;
  v.resources.push_back(out);
  v.release_problem = "PodResources: connection refused";
  v.reload_error = "devplug.toml:3: key \"x\": unknown";
  EXPECT_EQ(StatusLine(v),
            "registered 0/3 resources; 2 failed (1 retrying); waiting for kubelet; "
            "no healthy devices: a/kvm (see the journal); release tracking waits: "
            "PodResources: connection refused; reload failed (old configuration kept): "
            "devplug.toml:3: key \"x\": unknown");
}

// A resource being created for the first time has not failed (issue 53
// item 13: "1 failed (1 retrying)" at every start, on a real H100 node).
TEST(StatusReportTest, AResourceStillStartingIsNotAFailure) {
  AgentView v = Node();
  v.resources.push_back(Running("a/kvm", {Dev("kvm0", true)}, true));
  ResourceView first;
  first.name = "nvidia.com/gpu";
  first.starting = true;
  v.resources.push_back(first);
  EXPECT_EQ(StatusLine(v), "registered 1/2 resources; 1 starting");
  ResourceView again;
  again.name = "a/fpga";
  again.starting = true;
  again.failed = true;
  again.retrying = true;
  v.resources.push_back(again);
  EXPECT_EQ(StatusLine(v), "registered 1/3 resources; 1 starting; 1 failed (1 retrying)");
}

TEST(StatusReportTest, JsonNamesEachResourceItsStateAndDevicesWhenAsked) {
  AgentView v = Node();
  ResourceView kvm = Running("a/kvm", {Dev("kvm0", true), Dev("kvm1", false)}, true);
  kvm.registration = RegistrationMode::kPluginWatcher;
  kvm.kubelet_status = InternalError("kubelet said no");
  kvm.registered_since = v.since;
  v.resources.push_back(kvm);
  ResourceView starting;
  starting.name = "a/slow";
  starting.starting = true;
  v.resources.push_back(starting);

  const json all = json::parse(StatusJson(v, "registered 1/2 resources", false, ""));
  EXPECT_EQ(all["agent"]["version"], "1.2.3");
  EXPECT_EQ(all["agent"]["since"], "2026-11-18T11:06:40Z");
  EXPECT_EQ(all["agent"]["status"], "registered 1/2 resources");
  EXPECT_EQ(all["agent"]["reload_error"], nullptr);
  ASSERT_EQ(all["resources"].size(), 2u);
  const json& r0 = all["resources"][0];
  EXPECT_EQ(r0["state"], "registered");
  EXPECT_EQ(r0["registration"], "plugin-watcher");
  EXPECT_EQ(r0["kubelet_status"]["registered"], false);
  EXPECT_EQ(r0["kubelet_status"]["error"], "kubelet said no");
  EXPECT_EQ(r0["registered_since"], "2026-11-18T11:06:40Z");
  EXPECT_EQ(r0["devices_total"], 2);
  EXPECT_EQ(r0["devices_healthy"], 1);
  // A DRA resource a newer devplugd serves beside (a rolling update).
  v.resources[0].superseded = true;
  EXPECT_EQ(json::parse(StatusJson(v, "", false, ""))["resources"][0]["state"],
            "registered; standing by (a newer devplugd serves it)");
  EXPECT_EQ(r0["cdi"], nullptr);
  EXPECT_FALSE(r0.contains("devices"));
  EXPECT_EQ(all["resources"][1]["state"], "starting");
  EXPECT_EQ(all["resources"][1]["devices_total"], 0);

  // One resource: with its devices.
  const json one = json::parse(StatusJson(v, "", false, "a/kvm"));
  ASSERT_EQ(one["resources"].size(), 1u);
  const json& devs = one["resources"][0]["devices"];
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[1]["id"], "kvm1");
  EXPECT_EQ(devs[1]["health"], "Unhealthy");
  EXPECT_EQ(devs[1]["numa"], json::array({1}));
  EXPECT_EQ(devs[1]["release_state"], nullptr);

  EXPECT_EQ(json::parse(StatusJson(v, "", false, "a/none"))["error"], "no resource \"a/none\"");
}

TEST(StatusReportTest, ALeftOutResourceShowsWhyAndBadBytesDoNotBreakTheAnswer) {
  AgentView v = Node();
  ResourceView r;
  r.name = "a/x";
  r.module = "bad\xff";
  r.failed = true;
  r.failure = "create failed: no such device";
  r.last_error = "older";
  v.resources.push_back(r);
  const json j = json::parse(StatusJson(v, "", true, ""));
  EXPECT_EQ(j["resources"][0]["state"], "left out");
  EXPECT_EQ(j["resources"][0]["last_error"], "create failed: no such device");
  EXPECT_EQ(j["resources"][0]["module"], "bad\xef\xbf\xbd");
  EXPECT_EQ(j["resources"][0]["devices"], json::array());
}

}  // namespace
}  // namespace devplug::ops
