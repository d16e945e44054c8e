// DRA (api = "dra"): the real devplugd serves a module's devices as a DRA
// driver. A fake API server (tests/support/fake_apiserver.py) holds the
// ResourceSlices it publishes and the ResourceClaims the kubelet names; the
// simulator's plugin watcher registers the driver as the kubelet's DRA
// handler does and calls NodePrepareResources and NodeUnprepareResources.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "agent_fixture.h"
#include "cdi/spec_dir.h"
#include "dra/v1beta1/api.grpc.pb.h"
#include "kube/client.h"
#include "sysfs_fixture.h"

namespace devplug {
namespace {

using Json = nlohmann::json;
using testing::ReadFile;

constexpr char kDra[] = "fake.example/dra";
constexpr char kDriver[] = "dra.fake.example";
constexpr char kNode[] = "node-1";
constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";
constexpr char kClaims[] = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";

class DraTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    sim_plugins_registry_ = registry();
    sim_reconcile_period_ = std::chrono::milliseconds(200);
    std::filesystem::create_directories(registry());
    StartApiServer();
  }
  void TearDown() override {
    AgentTest::TearDown();
    if (api_pid_ > 0) testing::StopProcess(api_pid_, SIGTERM);
  }

  void StartApiServer() {
    const auto api =
        testing::StartFakeApiServer(DEVPLUG_FAKE_APISERVER, dir_ / "api.port", dir_ / "api.log");
    api_pid_ = api.pid;
    ASSERT_GT(api_pid_, 0) << ReadFile(dir_ / "api.log");
    server_ = "http://127.0.0.1:" + api.port;
    kube::Client::Options o;
    o.credentials.server = server_;
    api_ = std::make_unique<kube::Client>(o);
  }

  std::string registry() const { return dir_ / "plugins_registry"; }
  std::string release_log() const { return dir_ / "release.log"; }
  // The [agent] keys of a DRA node.
  std::string DraAgent() const {
    return "plugins_registry_dir = \"" + registry() + "\"\nnode_name = \"" + kNode +
           "\"\napi_server = \"" + server_ + "\"\ndra_state_dir = \"" + (dir_ / "dra") +
           "\"\ncdi_dir = \"/run/cdi\"";
  }
  // DraAgent(), and the simulator serving PodResources (who holds devices
  // through the device plugin API: a reload to DRA asks).
  std::string DraAgentWithPodResources() {
    sim_pod_resources_ = dir_ / "pod-resources/kubelet.sock";
    return DraAgent() + "\npod_resources_socket = \"" + sim_pod_resources_ + "\"";
  }
  // The writes of ResourceSlices the API server saw so far.
  int SliceWrites() {
    auto r = api_->Get("/_fake/requests");
    int n = 0;
    if (r.ok())
      for (const Json& q : (*r)["items"])
        n += q["method"] != "GET" &&
             q["path"].get<std::string>().find("resourceslices") != std::string::npos;
    return n;
  }
  // kDra served through the device plugin API (what a reload then moves to
  // DRA), with the simulator's PodResources; its [agent] keys.
  std::string StartThroughTheDevicePlugin() {
    const std::string agent = DraAgentWithPodResources();
    StartSim();
    StartAgent(Resource(kDra, FakeModule("fake_release"), "count = 2\n"), "0s", agent);
    EXPECT_TRUE(Eventually([&] {
      auto r = sim_->resource(kDra);
      return r && r->devices.size() == 2;
    })) << agent_->Log();
    return agent;
  }
  // The Node as the kubelet posts it while the device plugin serves kDra.
  bool MakeServedNode() {
    Json node = {{"apiVersion", "v1"},
                 {"kind", "Node"},
                 {"metadata", {{"name", kNode}}},
                 {"status", {{"allocatable", {{kDra, "2"}, {"cpu", "2"}}}}}};
    return api_->Create("/api/v1/nodes", node).ok();
  }
  std::string DraResource(const std::string& extra = "") const {
    return Resource(
        kDra, FakeModule("fake_release"),
        "api = \"dra\"\n" +
            std::string(extra.find("count =") == std::string::npos ? "count = 2\n" : "") +
            "release_log = \"" + release_log() + "\"\n" + extra);
  }
  void StartDra(const std::string& more_resources = "") {
    StartAgent(DraResource() + more_resources, "0s", DraAgent());
  }
  // The simulated kubelet and devplugd with the DRA resource: its driver
  // registered, its two devices published.
  void StartPublishing() {
    StartSim();
    StartDra();
    ASSERT_TRUE(DriverRegistered());
    ASSERT_TRUE(Eventually([&] {
      return SliceDevices() == std::vector<std::string>{"fake-0", "fake-1"};
    })) << Json(Slices()).dump(1);
  }
  bool DriverRegistered(uint64_t n = 1) {
    const bool ok = Eventually([&] {
      auto d = sim_->dra_driver(kDriver);
      return d && d->registered && d->registrations >= n;
    });
    if (!ok) KeepLog();
    return ok;
  }

  // This node's slices of our driver.
  std::vector<Json> Slices() {
    auto l = api_->List(kSlices,
                        {std::string("spec.nodeName=") + kNode + ",spec.driver=" + kDriver, ""});
    EXPECT_TRUE(l.ok()) << l.status().message();
    return l.ok() ? (*l)["items"].get<std::vector<Json>>() : std::vector<Json>{};
  }
  // The device names of the slices, when there is exactly one.
  std::vector<std::string> SliceDevices() {
    std::vector<Json> s = Slices();
    std::vector<std::string> out;
    if (s.size() != 1) return {"<" + std::to_string(s.size()) + " slices>"};
    for (const Json& d : s[0]["spec"]["devices"]) out.push_back(d["name"]);
    return out;
  }

  // A claim allocated to `devices` of our driver on this node; its UID.
  std::string Claim(const std::string& name, const std::vector<std::string>& devices,
                    const std::string& pool = kNode) {
    Json results = Json::array();
    for (const std::string& d : devices)
      results.push_back({{"request", "req"}, {"driver", kDriver}, {"pool", pool}, {"device", d}});
    return ClaimOf(name, results);
  }
  // A claim given `shares` of shared device `device`, as the scheduler
  // writes it (a share ID of its own, the capacity consumed).
  std::string SharedClaim(const std::string& name, const std::string& device, int shares) {
    return ClaimOf(name, Json::array({{{"request", "req"},
                                       {"driver", kDriver},
                                       {"pool", kNode},
                                       {"device", device},
                                       {"shareID", "share-of-" + name},
                                       {"consumedCapacity",
                                        {{"shares", std::to_string(shares)}, {"memory", "0"}}}}}));
  }
  std::string ClaimOf(const std::string& name, const Json& results) {
    Json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", "default"}}},
                  {"status", {{"allocation", {{"devices", {{"results", results}}}}}}}};
    auto made = api_->Create(kClaims, claim);
    EXPECT_TRUE(made.ok()) << made.status().message();
    return made.ok() ? (*made)["metadata"]["uid"].get<std::string>() : "";
  }

  sim::drav1::NodePrepareResourcesResponse Prepare(const std::string& name,
                                                   const std::string& uid) {
    sim::drav1::NodePrepareResourcesResponse resp;
    grpc::Status st = sim_->NodePrepareResources(kDriver, {{"default", uid, name}}, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }
  std::string Unprepare(const std::string& name, const std::string& uid) {
    sim::drav1::NodeUnprepareResourcesResponse resp;
    grpc::Status st = sim_->NodeUnprepareResources(kDriver, {{"default", uid, name}}, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.claims().count(uid) ? resp.claims().at(uid).error() : "<no answer>";
  }
  std::string SpecPath(const std::string& uid) const {
    auto kind = cdi::KindOf(kDra);
    return host_root() + "/run/cdi/" + cdi::AllocationFileName(*kind, "claim-" + uid);
  }
  // The claim's status.devices on the API server (null: none).
  Json StatusDevices(const std::string& claim) {
    auto got = api_->Get(std::string(kClaims) + "/" + claim);
    if (!got.ok() || !got->contains("status") || !(*got)["status"].contains("devices"))
      return nullptr;
    return (*got)["status"]["devices"];
  }
  // Where devplugd keeps a claim's device metadata file of `request`.
  std::string MetadataPath(const std::string& uid, const std::string& request = "req") const {
    return host_root() + "/run/cdi/dra-device-metadata/" + kDriver + "/" + uid + "/" + request +
           "/metadata.json";
  }

  // Each device's health in the device plugin's stream to the kubelet.
  std::map<std::string, std::string> DevicePluginHealth() {
    std::map<std::string, std::string> out;
    if (auto r = sim_->resource(kDra))
      for (const auto& d : r->devices) out[d.id()] = d.health();
    return out;
  }
  // The kubelet deregistered our driver (its registration socket went).
  bool DriverDeregistered() {
    return Eventually([&] {
      auto d = sim_->dra_driver(kDriver);
      return d && !d->registered;
    });
  }
  // This node with the label devplug.io/api=`value`; the label changed.
  bool MakeLabelledNode(const std::string& value) {
    return api_
        ->Create("/api/v1/nodes",
                 Json{{"apiVersion", "v1"},
                      {"kind", "Node"},
                      {"metadata", {{"name", kNode}, {"labels", {{"devplug.io/api", value}}}}}})
        .ok();
  }
  bool Label(const std::string& value) {
    return api_
        ->Update(std::string("/api/v1/nodes/") + kNode,
                 [&](Json& n) {
                   n["metadata"]["labels"]["devplug.io/api"] = value;
                   return OkStatus();
                 })
        .ok();
  }

  pid_t api_pid_ = -1;
  std::string server_;
  std::unique_ptr<kube::Client> api_;
};

TEST_F(DraTest, RegistersAsADraDriverAndPublishesItsDevicesAsOnePool) {
  StartSim();
  StartDra();
  ASSERT_TRUE(DriverRegistered());
  auto d = sim_->dra_driver(kDriver);
  EXPECT_EQ(d->endpoint, d->socket);  // DRAPlugin is served on the registration socket
  // The health services too: the kubelet then opens one stream to the newest.
  EXPECT_EQ(d->versions,
            (std::vector<std::string>{"v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                                      "v1alpha1.DRAResourceHealth"}));
  // No extended resource: a DRA resource never reaches the device manager.
  EXPECT_FALSE(sim_->resource(kDra).has_value());
  ASSERT_TRUE(Eventually([&] {
    return SliceDevices() == std::vector<std::string>{"fake-0", "fake-1"};
  })) << Json(Slices()).dump(1);
  const Json slice = Slices()[0];
  EXPECT_EQ(slice["spec"]["pool"]["name"], kNode);
  EXPECT_EQ(slice["spec"]["pool"]["resourceSliceCount"], 1);
  EXPECT_GE(slice["spec"]["pool"]["generation"].get<int64_t>(), 1);
  EXPECT_EQ(slice["spec"]["devices"][0]["attributes"]["id"]["string"], "fake-0");
}

// Where a kubelet runs, no slice is written before it has registered the
// driver: it refuses to prepare a claim of a driver it does not know ("DRA
// driver ... is not registered"), so a pod the scheduler sent on an earlier
// slice would fail its first prepare. A kubelet that refuses the driver
// gets no slice, and status says why; the kubelet that registers it (here
// after a restart) gets them.
TEST_F(DraTest, NoSliceIsWrittenBeforeTheKubeletRegistersTheDriver) {
  sim_refuse_probes_ = "no room for it";
  StartSim();
  StartDra();
  ASSERT_TRUE(Eventually([&] {
    return agent_->Log().find("the kubelet refused the registration") != std::string::npos;
  })) << agent_->Log();
  auto slice_error = [&] {
    auto status = testing::RunProcess(
        {testing::DevplugctlPath(), "status", "--json", "--socket", control_socket()});
    const Json st = Json::parse(status.output, nullptr, false);
    const Json e = st.is_object() ? st["resources"][0]["dra"]["slice_error"] : Json();
    return e.is_string() ? e.get<std::string>() : std::string();
  };
  ASSERT_TRUE(Eventually([&] { return !slice_error().empty(); })) << agent_->Log();
  EXPECT_EQ(slice_error(),
            "holding the slices until the kubelet registers driver dra.fake.example (it could "
            "not prepare a claim allocated from them)");
  EXPECT_TRUE(Slices().empty()) << Json(Slices()).dump(1);
  EXPECT_EQ(SliceWrites(), 0);

  sim_->Stop();
  sim_refuse_probes_.clear();
  StartSim();
  ASSERT_TRUE(DriverRegistered());
  ASSERT_TRUE(Eventually([&] {
    return SliceDevices() == std::vector<std::string>{"fake-0", "fake-1"};
  })) << Json(Slices()).dump(1);
  EXPECT_TRUE(Eventually([&] { return slice_error().empty(); }));
  EXPECT_NE(agent_->Log().find("the kubelet registered driver dra.fake.example: publishing the "
                               "slices"),
            std::string::npos);
}

// ABI 1.9 end to end: what the module says of its devices (PCI function,
// attributes, capacities) reaches the ResourceSlice, with the root complex
// read from host_root's sysfs, and `devplugctl status` shows it. What the
// agent refuses is logged, and the device is published without it.
TEST_F(DraTest, TheModulesAttributesReachTheSlice) {
  testing::SysfsFixture fx(host_root());
  fx.AddPci({.address = "0000:00:02.0", .class_code = 0x060400});
  fx.AddPci({.address = "0000:01:00.0", .parent = "0000:00:02.0"});
  StartSim();
  StartAgent(DraResource("describe = true"), "0s", DraAgent());
  ASSERT_TRUE(DriverRegistered());
  ASSERT_TRUE(Eventually([&] {
    return SliceDevices() == std::vector<std::string>{"fake-0", "fake-1"};
  })) << Json(Slices()).dump(1);
  const Json devices = Slices()[0]["spec"]["devices"];
  const Json want0 = {{"id", {{"string", "fake-0"}}},
                      {"resource.kubernetes.io/pciBusID", {{"string", "0000:01:00.0"}}},
                      {"resource.kubernetes.io/pcieRoot", {{"string", "pci0000:00"}}},
                      {"model", {{"string", "fake"}}},
                      {"index", {{"int", 0}}},
                      {"even", {{"bool", true}}},
                      {"firmware", {{"version", "1.0.0"}}}};
  EXPECT_EQ(devices[0]["attributes"], want0) << devices.dump(1);
  EXPECT_EQ(devices[0]["capacity"], (Json{{"memory", {{"value", "1073741824"}}}}));
  // fake-1 is 0000:02:00.0, which this sysfs does not show: no root.
  EXPECT_EQ(devices[1]["attributes"]["resource.kubernetes.io/pciBusID"]["string"], "0000:02:00.0");
  EXPECT_FALSE(devices[1]["attributes"].contains("resource.kubernetes.io/pcieRoot"));

  auto status = testing::RunProcess(
      {testing::DevplugctlPath(), "status", "--json", "--devices", "--socket", control_socket()});
  const Json st = Json::parse(status.output, nullptr, false);
  ASSERT_TRUE(st.is_object()) << status.output;
  const Json dev = st["resources"][0]["devices"][0];
  EXPECT_EQ(dev["pci"], "0000:01:00.0") << dev.dump(1);
  EXPECT_EQ(dev["pcie_root"], "pci0000:00");
  EXPECT_EQ(dev["attributes"],
            (Json{{"model", "fake"}, {"index", 0}, {"even", true}, {"firmware", "1.0.0"}}));
  EXPECT_EQ(dev["capacity"], (Json{{"memory", 1073741824}}));
  EXPECT_TRUE(Eventually([&] {
    return agent_->Log().find(
               "attribute \"id\" is one devplugd sets itself; the "
               "device goes on without it") != std::string::npos;
  })) << agent_->Log();
  EXPECT_NE(agent_->Log().find("has a version \"01.0\" that"), std::string::npos);
}

TEST_F(DraTest, PreparesAClaimWithACdiSpecAndReleasesItOnUnprepare) {
  ASSERT_NO_FATAL_FAILURE(StartPublishing());
  const std::string uid = Claim("c1", {"fake-1"});
  auto resp = Prepare("c1", uid);
  ASSERT_EQ(resp.claims().count(uid), 1u);
  const auto& claim = resp.claims().at(uid);
  ASSERT_EQ(claim.error(), "");
  ASSERT_EQ(claim.devices_size(), 1);
  EXPECT_EQ(claim.devices(0).device_name(), "fake-1");
  EXPECT_EQ(claim.devices(0).pool_name(), kNode);
  EXPECT_EQ(claim.devices(0).request_names(0), "req");
  ASSERT_EQ(claim.devices(0).cdi_device_ids_size(), 1);
  EXPECT_EQ(claim.devices(0).cdi_device_ids(0), "devplug.fake.example/dra=" + uid + "-req");

  // The spec the runtime reads: valid, and it gives the module's answer.
  ASSERT_TRUE(testing::FileExists(SpecPath(uid)));
  const Json spec = Json::parse(ReadFile(SpecPath(uid)));
  EXPECT_EQ(StrJoin(cdi::Validate(spec), "\n"), "") << spec.dump(1);
  EXPECT_EQ(spec["devices"][0]["name"], uid + "-req");
  EXPECT_NE(spec["devices"][0]["containerEdits"].dump().find("fake-1"), std::string::npos)
      << spec.dump(1);
  // Device metadata (KEP-5304): the request's file, mounted read-only where
  // the container looks for it.
  ASSERT_TRUE(testing::FileExists(MetadataPath(uid)));
  const Json meta = Json::parse(ReadFile(MetadataPath(uid)));
  EXPECT_EQ(meta["apiVersion"], "metadata.resource.k8s.io/v1beta1");
  EXPECT_EQ(meta["kind"], "DeviceMetadata");
  EXPECT_EQ(meta["metadata"],
            (Json{{"name", "c1"}, {"namespace", "default"}, {"uid", uid}, {"generation", 1}}));
  EXPECT_FALSE(meta.contains("podClaimName"));
  EXPECT_EQ(meta["requests"],
            (Json::array({{{"name", "req"},
                           {"devices",
                            {{{"driver", kDriver},
                              {"pool", kNode},
                              {"name", "fake-1"},
                              {"attributes", {{"id", {{"string", "fake-1"}}}}}}}}}})))
      << meta.dump(1);
  const Json mounts = spec["devices"][0]["containerEdits"]["mounts"];
  ASSERT_EQ(mounts.size(), 2u) << spec.dump(1);  // the module's, and the metadata
  EXPECT_EQ(mounts[0]["containerPath"], "/fake");
  EXPECT_EQ(mounts[1]["hostPath"], "/run/cdi/dra-device-metadata/" + std::string(kDriver) + "/" +
                                       uid + "/req/metadata.json");
  EXPECT_EQ(mounts[1]["containerPath"],
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/c1/req/" +
                std::string(kDriver) + "-metadata.json");
  EXPECT_EQ(mounts[1]["options"], (Json{"ro", "rbind"}));

  // The claim's status says the device is Ready, and what was set up.
  Json entry;
  ASSERT_TRUE(Eventually([&] { return !(entry = StatusDevices("c1")).is_null(); }));
  ASSERT_EQ(entry.size(), 1u) << entry.dump(1);
  EXPECT_EQ(entry[0]["driver"], kDriver);
  EXPECT_EQ(entry[0]["pool"], kNode);
  EXPECT_EQ(entry[0]["device"], "fake-1");
  EXPECT_FALSE(entry[0].contains("shareID"));
  EXPECT_EQ(entry[0]["conditions"][0]["type"], "Ready");
  EXPECT_EQ(entry[0]["conditions"][0]["status"], "True");
  EXPECT_EQ(entry[0]["data"]["moduleDevices"], Json::array({"fake-1"}));
  EXPECT_EQ(entry[0]["data"]["cdiDevices"],
            Json::array({"devplug.fake.example/dra=" + uid + "-req"}));

  // devplugctl status shows the claim, the metrics count the call.
  auto status = testing::RunProcess(
      {testing::DevplugctlPath(), "status", "--json", "--socket", control_socket()});
  const Json st = Json::parse(status.output, nullptr, false);
  ASSERT_TRUE(st.is_object()) << status.output;
  const Json dra = st["resources"][0]["dra"];
  EXPECT_EQ(dra["driver"], kDriver) << dra.dump(1);
  ASSERT_EQ(dra["prepared"].size(), 1u) << dra.dump(1);
  EXPECT_EQ(dra["prepared"][0]["uid"], uid);
  EXPECT_EQ(dra["prepared"][0]["devices"][0]["id"], "fake-1");
  // The folder as the runtime reads it, and where devplugd writes it (under
  // host_root): an operator who mounts the host's folder elsewhere sees why
  // nobody reads the specs (issue 53 item 14).
  EXPECT_EQ(dra["cdi_dir"], "/run/cdi");
  EXPECT_EQ(dra["cdi_written_to"], host_root() + "/run/cdi");
  auto text =
      testing::RunProcess({testing::DevplugctlPath(), "status", "--socket", control_socket()});
  EXPECT_NE(text.output.find("prepared: default/c1 (" + uid + "): fake-1"), std::string::npos)
      << text.output;
  EXPECT_EQ(Metric("devplug_rpc_requests_total{code=\"OK\",resource=\"fake.example/dra\","
                   "rpc=\"NodePrepareResources\"} "),
            1);

  // The kubelet asks again (a second pod of a shared claim, a kubelet
  // restart): the same answer, nothing run twice.
  auto again = Prepare("c1", uid);
  ASSERT_EQ(again.claims().at(uid).error(), "");
  EXPECT_EQ(again.claims().at(uid).devices(0).cdi_device_ids(0),
            claim.devices(0).cdi_device_ids(0));

  EXPECT_EQ(Unprepare("c1", uid), "");
  EXPECT_NE(ReadFile(release_log()).find("release fake-1"), std::string::npos)
      << ReadFile(release_log());
  EXPECT_FALSE(testing::FileExists(SpecPath(uid)));
  EXPECT_FALSE(std::filesystem::exists(host_root() + "/run/cdi/dra-device-metadata/" +
                                       std::string(kDriver) + "/" + uid));
  // Unprepared: its entries leave the claim's status.
  EXPECT_TRUE(Eventually([&] {
    auto got = api_->Get(std::string(kClaims) + "/c1");
    return got.ok() && !(*got)["status"].contains("devices");
  }));
  // Once more: nothing left to do, and no second release.
  EXPECT_EQ(Unprepare("c1", uid), "");
  const std::string log = ReadFile(release_log());
  EXPECT_EQ(log.find("release fake-1"), log.rfind("release fake-1")) << log;
}

TEST_F(DraTest, AClaimOfAnotherUidOrPoolOrAnUnknownDeviceIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartPublishing());
  const std::string uid = Claim("c1", {"fake-0"});
  auto resp = Prepare("c1", "0000-not-" + uid);
  EXPECT_NE(resp.claims().at("0000-not-" + uid).error().find("has UID " + uid), std::string::npos)
      << resp.claims().at("0000-not-" + uid).error();
  const std::string other = Claim("c2", {"fake-0"}, "node-2");
  resp = Prepare("c2", other);
  EXPECT_NE(resp.claims().at(other).error().find("not this node's"), std::string::npos)
      << resp.claims().at(other).error();
  const std::string gone = Claim("c3", {"fake-9"});
  resp = Prepare("c3", gone);
  EXPECT_NE(resp.claims().at(gone).error().find("\"fake-9\" is not on this node"),
            std::string::npos)
      << resp.claims().at(gone).error();
  resp = Prepare("missing", "uid-x");
  EXPECT_NE(resp.claims().at("uid-x").error().find("not found"), std::string::npos)
      << resp.claims().at("uid-x").error();
  // Nothing was prepared, nothing written.
  EXPECT_TRUE(cdi::OwnedFiles(host_root() + "/run/cdi").empty());
}

TEST_F(DraTest, ARestartBetweenPrepareAndUnprepareLeaksNothing) {
  ASSERT_NO_FATAL_FAILURE(StartPublishing());
  const std::string uid = Claim("c1", {"fake-0", "fake-1"});
  ASSERT_EQ(Prepare("c1", uid).claims().at(uid).error(), "");
  ASSERT_TRUE(testing::FileExists(SpecPath(uid)));

  ASSERT_EQ(agent_->Stop(SIGTERM, 15s), std::optional<int>(0)) << agent_->Log();
  // At exit the node's slices go: nothing serves them any more.
  EXPECT_TRUE(Slices().empty()) << Json(Slices()).dump(1);
  // A reboot empties the (tmpfs) spec folder; a crash left the metadata of
  // a claim no longer prepared.
  ASSERT_TRUE(testing::FileExists(MetadataPath(uid)));
  const std::string meta = ReadFile(MetadataPath(uid));
  std::filesystem::remove_all(host_root() + "/run/cdi");
  const std::string stale = MetadataPath("0ld-c1a1m");
  std::filesystem::create_directories(std::filesystem::path(stale).parent_path());
  testing::WriteFile(stale, "{}");

  StartDra();
  ASSERT_TRUE(DriverRegistered(2));
  // The checkpoint remembered the claim: its spec and metadata are back, the
  // stale metadata gone.
  ASSERT_TRUE(Eventually([&] { return testing::FileExists(SpecPath(uid)); }));
  EXPECT_EQ(ReadFile(MetadataPath(uid)), meta);
  EXPECT_FALSE(testing::FileExists(stale));
  ASSERT_TRUE(Eventually([&] { return SliceDevices().size() == 2; }));
  auto again = Prepare("c1", uid);
  EXPECT_EQ(again.claims().at(uid).devices_size(), 2);
  EXPECT_EQ(Unprepare("c1", uid), "");
  EXPECT_NE(ReadFile(release_log()).find("release fake-0,fake-1"), std::string::npos)
      << ReadFile(release_log());
  EXPECT_FALSE(testing::FileExists(SpecPath(uid)));
}

// Health on both channels, with recovery, through devplugd and the
// simulated kubelet: fake-0 turns Unhealthy; the kubelet's health stream
// says so with the module's reason, and its slice carries the taint; both
// clear when it is Healthy again. Nothing restarts.
TEST_F(DraTest, TheKubeletHearsADeviceTurnUnhealthyAndRecover) {
  StartSim();
  // A resync every 200 ms: the fake module's health follows a file.
  StartAgent(DraResource("sick_while = \"" + (dir_ / "sick") + "\"\n"), "200ms", DraAgent());
  ASSERT_TRUE(DriverRegistered());
  auto health = [&](const std::string& device) {
    auto d = sim_->dra_driver(kDriver);
    if (!d || !d->health.count(device)) return std::pair<std::string, std::string>{};
    return d->health.at(device);
  };
  auto tainted = [&] {
    for (const Json& s : Slices())
      for (const Json& d : s["spec"]["devices"])
        if (d["name"] == "fake-0") return d.contains("taints");
    return false;
  };
  ASSERT_TRUE(Eventually([&] { return health("fake-0").first == "Healthy"; })) << agent_->Log();
  EXPECT_EQ(sim_->dra_driver(kDriver)->health_service, "v1.DRAResourceHealth");
  EXPECT_EQ(health("fake-1").first, "Healthy");
  WriteFile(dir_ / "sick", "");
  ASSERT_TRUE(Eventually([&] { return health("fake-0").first == "Unhealthy"; })) << agent_->Log();
  EXPECT_EQ(health("fake-0").second, "listed unhealthy");
  EXPECT_EQ(health("fake-1").first, "Healthy");
  ASSERT_TRUE(Eventually(tainted)) << Json(Slices()).dump(1);
  std::filesystem::remove(dir_ / "sick");
  ASSERT_TRUE(Eventually([&] { return health("fake-0").first == "Healthy"; })) << agent_->Log();
  EXPECT_EQ(health("fake-0").second, "");
  ASSERT_TRUE(Eventually([&] { return !tainted(); })) << Json(Slices()).dump(1);
  EXPECT_EQ(sim_->dra_driver(kDriver)->registrations, 1u) << "nothing restarted";
}

TEST_F(DraTest, SlicesAnEarlierAgentLeftAreTakenOverAndOtherNodesAreLeftAlone) {
  auto slice = [](const std::string& name, const std::string& node, int64_t generation) {
    return Json{{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceSlice"},
                {"metadata", {{"name", name}}},
                {"spec",
                 {{"driver", kDriver},
                  {"nodeName", node},
                  {"pool", {{"name", node}, {"generation", generation}, {"resourceSliceCount", 2}}},
                  {"devices", Json::array()}}}};
  };
  // Two slices of ours from before (one more than now), one of another node.
  ASSERT_TRUE(api_->Create(kSlices, slice("node-1-dra.fake.example-0", kNode, 7)).ok());
  ASSERT_TRUE(api_->Create(kSlices, slice("node-1-dra.fake.example-1", kNode, 7)).ok());
  ASSERT_TRUE(api_->Create(kSlices, slice("node-2-dra.fake.example-0", "node-2", 3)).ok());
  StartSim();
  StartDra();
  ASSERT_TRUE(Eventually([&] {
    return SliceDevices() == std::vector<std::string>{"fake-0", "fake-1"};
  })) << Json(Slices()).dump(1);
  // The pool's generation only grows: the scheduler takes the newest.
  EXPECT_GT(Slices()[0]["spec"]["pool"]["generation"].get<int64_t>(), 7);
  EXPECT_EQ(Slices()[0]["spec"]["pool"]["resourceSliceCount"], 1);
  auto other = api_->Get(std::string(kSlices) + "/node-2-dra.fake.example-0");
  ASSERT_TRUE(other.ok()) << other.status().message();
  EXPECT_EQ((*other)["spec"]["pool"]["generation"], 3);
}

// A reload that changes a DRA resource: its successor takes the running
// driver over (one owner of the checkpoint, no second driver made): the
// prepared claim stays prepared, unprepare releases it through the new
// instance, the pool follows the new list. A reload that removes the
// resource deletes its slices.
TEST_F(DraTest, AReloadKeepsPreparedClaimsAndRemovingTheResourceDeletesItsSlices) {
  ASSERT_NO_FATAL_FAILURE(StartPublishing());
  const std::string uid = Claim("c1", {"fake-1"});
  auto prepared = Prepare("c1", uid);
  ASSERT_EQ(prepared.claims().at(uid).error(), "");
  ASSERT_TRUE(testing::FileExists(SpecPath(uid)));

  WriteFile(config_path(),
            Config(Resource(kDra, FakeModule("fake_release"),
                            "api = \"dra\"\ncount = 3\nrelease_log = \"" + release_log() + "\"\n"),
                   "0s", DraAgent()));
  ASSERT_TRUE(Reload()) << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog("changed: fake.example/dra", kWait)) << agent_->Log();
  ASSERT_TRUE(Eventually([&] {
    return SliceDevices() == std::vector<std::string>{"fake-0", "fake-1", "fake-2"};
  })) << Json(Slices()).dump(1);
  EXPECT_EQ(Count(agent_->Log(), "DRA driver dra.fake.example on node"), 1u)
      << "the reload made a second driver\n"
      << agent_->Log();
  EXPECT_TRUE(testing::FileExists(SpecPath(uid)));
  // Still prepared: the kubelet asking again is answered from the checkpoint.
  auto again = Prepare("c1", uid);
  EXPECT_EQ(again.claims().at(uid).SerializeAsString(),
            prepared.claims().at(uid).SerializeAsString());
  EXPECT_EQ(Unprepare("c1", uid), "");
  EXPECT_FALSE(testing::FileExists(SpecPath(uid)));
  EXPECT_NE(ReadFile(release_log()).find("release fake-1"), std::string::npos)
      << ReadFile(release_log());

  WriteFile(config_path(),
            Config(Resource(kFull, FakeModule("fake_full"), "count = 1"), "0s", DraAgent()));
  ASSERT_TRUE(Reload()) << agent_->Log();
  EXPECT_TRUE(Eventually([&] { return Slices().empty(); })) << Json(Slices()).dump(1);
}

// A reload that would leave prepared claims with no driver that knows them
// (the resource removed, or its driver renamed) is refused, naming the
// claims (a move to the device plugin API drains instead: below); the running driver keeps
// them and their devices (review D11: the device was published as free and
// prepared for a second claim). Once they are unprepared the same reload
// goes through.
TEST_F(DraTest, AReloadThatWouldOrphanPreparedClaimsIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartPublishing());
  const std::string uid = Claim("c1", {"fake-1"});
  ASSERT_EQ(Prepare("c1", uid).claims().at(uid).error(), "");

  const std::string dra = "api = \"dra\"\ncount = 2\nrelease_log = \"" + release_log() + "\"\n";
  const std::string refusals[] = {
      Config(
          Resource(kDra, FakeModule("fake_release"), dra + "dra_driver = \"new.fake.example\"\n"),
          "0s", DraAgent()),
      Config(Resource(kFull, FakeModule("fake_full"), "count = 1"), "0s", DraAgent()),
  };
  for (const std::string& config : refusals) {
    WriteFile(config_path(), config);
    EXPECT_FALSE(Reload()) << config << agent_->Log();
  }
  const std::string log = agent_->Log();
  EXPECT_NE(log.find("renames its DRA driver to \"new.fake.example\", while DRA driver "
                     "\"dra.fake.example\" has 1 prepared claim(s): default/c1 (" +
                     uid + ")"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("removes the resource"), std::string::npos) << log;
  // Nothing changed: the claim is still prepared, its device still held.
  const std::string second = Claim("c2", {"fake-1"});
  EXPECT_NE(Prepare("c2", second).claims().at(second).error(), "");
  EXPECT_EQ(ReadFile(release_log()), "");

  ASSERT_EQ(Unprepare("c1", uid), "");
  WriteFile(config_path(), refusals[0]);
  EXPECT_TRUE(Reload()) << agent_->Log();
}

// The other way: a reload that moves a resource from the device plugin API
// to DRA while a pod holds one of its devices through the device plugin
// API (PodResources lists it) goes through, and the slices leave that
// device out while the pod holds it: offered as free, it would be
// allocated to a claim as well. Once PodResources lists the pod no more,
// the device is offered. The pod runs on throughout: nothing of it is
// touched. With pod_resources_poll "0s" nothing would tell when the pod is
// gone, so the move is refused, naming the pod and the device.
TEST_F(DraTest, AMoveToDraLeavesOutTheDevicesPodsHoldThroughTheDevicePluginUntilTheyAreGone) {
  const std::string agent = StartThroughTheDevicePlugin();
  ASSERT_FALSE(HasFailure());
  sim_->BindPod("default", "p1", "app", kDra, {"fake-1"});

  WriteFile(config_path(), Config(DraResource(), "0s", agent + "\npod_resources_poll = \"0s\""));
  EXPECT_FALSE(Reload()) << agent_->Log();
  EXPECT_NE(agent_->Log().find(std::string("resource \"") + kDra +
                               "\": the new configuration serves it through DRA, while pods hold "
                               "1 of its device(s) through the device plugin API: default/p1 "
                               "(fake-1); with pod_resources_poll = \"0s\" nothing would tell when "
                               "they are gone"),
            std::string::npos)
      << agent_->Log();
  EXPECT_TRUE(Slices().empty()) << Json(Slices()).dump(1);
  EXPECT_FALSE(sim_->dra_driver(kDriver)) << "a driver registered for a refused reload";

  const std::string fail = dir_ / "release-fails";
  WriteFile(config_path(), Config(DraResource("release_fail = \"" + fail + "\"\n"), "0s",
                                  agent + "\npod_resources_poll = \"200ms\""));
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(DriverRegistered());
  ASSERT_TRUE(Eventually([&] { return SliceDevices() == std::vector<std::string>{"fake-0"}; }))
      << Json(Slices()).dump(1) << agent_->Log();
  EXPECT_NE(agent_->Log().find("fake-1 is held by pod default/p1 through the device plugin API: "
                               "left out of the slices until the pod is gone"),
            std::string::npos)
      << agent_->Log();
  auto status = ops::ControlRequest(control_socket(), R"({"status": {}})", 5s);
  ASSERT_TRUE(status.ok());
  EXPECT_NE(status->find(R"x("withheld":["fake-1 (default/p1)"])x"), std::string::npos) << *status;
  // Lists go on while the pod holds it, and the slices stay as they are.
  const size_t lists = sim_->pod_resources_lists();
  ASSERT_TRUE(Eventually([&] { return sim_->pod_resources_lists() >= lists + 3; }));
  EXPECT_EQ(SliceDevices(), std::vector<std::string>{"fake-0"});
  // The first slice left it out already: one write, never one that had it.
  EXPECT_EQ(SliceWrites(), 1);

  // The pod goes. The module's on_release() scrubs the device before it is
  // offered, as the device plugin's release tracking would have; while it
  // fails the device stays out, and it is tried again at each List.
  WriteFile(fail, "");
  sim_->DeletePod("default", "p1");
  ASSERT_TRUE(agent_->WaitForLog("on_release(fake-1) after the device plugin's pod: ", kWait))
      << agent_->Log();
  const size_t tried = sim_->pod_resources_lists();
  ASSERT_TRUE(Eventually([&] { return sim_->pod_resources_lists() >= tried + 2; }));
  EXPECT_EQ(SliceDevices(), std::vector<std::string>{"fake-0"});
  EXPECT_GE(Count(agent_->Log(), "on_release(fake-1) after the device plugin's pod: "), 2u)
      << agent_->Log();
  std::filesystem::remove(fail);
  EXPECT_TRUE(Eventually([&] {
    return SliceDevices() == std::vector<std::string>{"fake-0", "fake-1"};
  })) << Json(Slices()).dump(1)
      << agent_->Log();
  EXPECT_NE(ReadFile(release_log()).find("release fake-1"), std::string::npos)
      << ReadFile(release_log());
  EXPECT_NE(agent_->Log().find("fake-1 is no longer held by pod default/p1: on_release() runs "
                               "before it is offered in the slices"),
            std::string::npos)
      << agent_->Log();
  EXPECT_NE(agent_->Log().find("fake-1 released after pod default/p1: offered in the slices"),
            std::string::npos)
      << agent_->Log();
  // Nothing is withheld: no more Lists for it.
  std::this_thread::sleep_for(600ms);
  const size_t after = sim_->pod_resources_lists();
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(sim_->pod_resources_lists(), after);
}

// The same at the agent's start: a devplugd that starts serving a resource
// through DRA, where one before it served the name through the device
// plugin API (a label changed while none ran, a rolling update to a new
// configuration), writes its first slice only once a List says which
// devices pods hold that way, and leaves those out until they are gone.
TEST_F(DraTest, AStartAsDraLeavesOutTheDevicesPodsHoldThroughTheDevicePlugin) {
  const std::string agent = DraAgentWithPodResources() + "\npod_resources_poll = \"200ms\"";
  StartSim();
  sim_->BindPod("default", "p1", "app", kDra, {"fake-1"});
  StartAgent(DraResource(), "0s", agent);
  ASSERT_TRUE(DriverRegistered());
  ASSERT_TRUE(Eventually([&] { return SliceDevices() == std::vector<std::string>{"fake-0"}; }))
      << Json(Slices()).dump(1) << agent_->Log();
  EXPECT_EQ(SliceWrites(), 1);  // never a slice with fake-1
  sim_->DeletePod("default", "p1");
  EXPECT_TRUE(Eventually([&] {
    return SliceDevices() == std::vector<std::string>{"fake-0", "fake-1"};
  })) << Json(Slices()).dump(1)
      << agent_->Log();
}

// A reload that moves a resource from the device plugin API to DRA writes
// no slice while the Node's allocatable still offers the name that way
// (the kubelet drops it when the device plugin's endpoint goes, and posts
// it within its node-status period): the scheduler, which takes the device
// plugin's path while it is above 0, never sees both APIs offer it here.
// Without the hand-off (the Node's status cannot be written: no RBAC for
// it, or the admission policy refuses), the slices wait for the kubelet to
// post the Node's allocatable at 0.
TEST_F(DraTest, AReloadToDraPublishesNoSliceUntilTheNodesAllocatableReadsZero) {
  const std::string agent = StartThroughTheDevicePlugin();
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(MakeServedNode());
  // The hand-off cannot write the Node's status (as without RBAC for it):
  // the slices wait for the kubelet's post instead.
  ASSERT_TRUE(api_->Create(std::string("/_fake/forbid?path=/api/v1/nodes/") + kNode + "/status",
                           Json::object())
                  .ok());

  WriteFile(config_path(), Config(DraResource(), "0s", agent));
  ASSERT_TRUE(Reload()) << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog("hand-off incomplete after", kWait)) << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog("HTTP 403 Forbidden", kWait)) << agent_->Log();
  ASSERT_TRUE(DriverRegistered());
  std::this_thread::sleep_for(1500ms);  // the Node is looked at every second
  EXPECT_TRUE(Slices().empty()) << Json(Slices()).dump(1);
  auto status = ops::ControlRequest(control_socket(), R"({"status": {}})", 5s);
  ASSERT_TRUE(status.ok());
  EXPECT_NE(status->find("holding the slices until node node-1's allocatable " + std::string(kDra) +
                         " reads 0 (it reads 2"),
            std::string::npos)
      << *status;

  // The kubelet posts the status without the device plugin's devices.
  ASSERT_TRUE(api_->Update(std::string("/api/v1/nodes/") + kNode,
                           [](Json& n) {
                             n["status"]["allocatable"][kDra] = "0";
                             return OkStatus();
                           })
                  .ok());
  EXPECT_TRUE(Eventually([&] {
    return SliceDevices() == std::vector<std::string>{"fake-0", "fake-1"};
  })) << Json(Slices()).dump(1)
      << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog(
      std::string("node node-1's allocatable ") + kDra + " reads 0 after", kWait))
      << agent_->Log();
}

// The hand-off before a move to DRA (api_handoff.h): the device plugin
// keeps serving while devplugd sets the Node's allocatable for the name
// to 0 itself (the scheduler's device plugin path closes at once, not at
// the kubelet's next node-status post) and waits for the pods bound to
// the node that ask the name through the device plugin API to be
// admitted. Then the device plugin goes, and the first slice already
// leaves out what those pods were given. A finished pod, or one whose
// container the scheduler mapped to a claim, is not waited for.
TEST_F(DraTest, AReloadToDraZeroesTheNodesAllocatableAndWaitsForThePodsSentThroughTheDevicePlugin) {
  const std::string agent = StartThroughTheDevicePlugin();
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(MakeServedNode());
  auto pod = [&](const std::string& name, const std::string& phase, const Json& claim_status) {
    Json p = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", "default"}}},
              {"spec",
               {{"nodeName", kNode},
                {"containers",
                 Json::array({{{"name", "app"}, {"resources", {{"limits", {{kDra, "1"}}}}}}})}}},
              {"status", {{"phase", phase}}}};
    if (!claim_status.is_null()) p["status"]["extendedResourceClaimStatus"] = claim_status;
    return api_->Create("/api/v1/pods", p).ok();
  };
  // Bound by the scheduler, not yet admitted by the kubelet.
  ASSERT_TRUE(pod("sent", "Pending", nullptr));
  ASSERT_TRUE(pod("done", "Succeeded", nullptr));
  ASSERT_TRUE(pod(
      "claimed", "Pending",
      {{"resourceClaimName", "claimed-x"},
       {"requestMappings",
        Json::array({{{"containerName", "app"}, {"resourceName", kDra}, {"requestName", "r"}}})}}));

  WriteFile(config_path(), Config(DraResource(), "0s", agent + "\npod_resources_poll = \"200ms\""));
  ASSERT_EQ(kill(agent_->pid(), SIGHUP), 0);
  auto allocatable = [&] {
    auto n = api_->Get(std::string("/api/v1/nodes/") + kNode);
    return n.ok() ? (*n)["status"]["allocatable"].value(kDra, std::string()) : std::string("?");
  };
  ASSERT_TRUE(Eventually([&] { return allocatable() == "0"; })) << agent_->Log();
  // Waiting for "sent": the device plugin still serves, no driver yet.
  std::this_thread::sleep_for(1500ms);
  auto dp = sim_->resource(kDra);
  ASSERT_TRUE(dp);
  EXPECT_TRUE(dp->connected);
  EXPECT_EQ(dp->healthy(), 2u);
  EXPECT_FALSE(sim_->dra_driver(kDriver)) << agent_->Log();
  EXPECT_TRUE(Slices().empty()) << Json(Slices()).dump(1);
  // The kubelet's own status post puts it back while the device plugin
  // serves: set to 0 again.
  ASSERT_TRUE(api_->Update(std::string("/api/v1/nodes/") + kNode + "/status",
                           [](Json& n) {
                             n["status"]["allocatable"][kDra] = "2";
                             return OkStatus();
                           })
                  .ok());
  ASSERT_TRUE(Eventually([&] { return allocatable() == "0"; })) << agent_->Log();

  // The kubelet admits it: Allocate gave it fake-1.
  sim_->BindPod("default", "sent", "app", kDra, {"fake-1"});
  ASSERT_TRUE(DriverRegistered()) << agent_->Log();
  ASSERT_TRUE(Eventually([&] { return SliceDevices() == std::vector<std::string>{"fake-0"}; }))
      << Json(Slices()).dump(1) << agent_->Log();
  EXPECT_TRUE(
      agent_->WaitForLog("the kubelet admitted the 1 pod(s) the device plugin API was "
                         "sent meanwhile",
                         kWait))
      << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog("reloaded: ", kWait)) << agent_->Log();
  EXPECT_EQ(agent_->Log().find("hand-off incomplete"), std::string::npos) << agent_->Log();
}

// An API server busy for a moment (429 from API Priority and Fairness,
// with no Retry-After to wait) does not end the hand-off: the write is
// asked again, and the wait for the pods the device plugin was sent
// begins once it got through.
TEST_F(DraTest, ABusyApiServerDoesNotEndTheHandOffToDra) {
  const std::string agent = StartThroughTheDevicePlugin();
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(MakeServedNode());
  Json sent = {{"apiVersion", "v1"},
               {"kind", "Pod"},
               {"metadata", {{"name", "sent"}, {"namespace", "default"}}},
               {"spec",
                {{"nodeName", kNode},
                 {"containers",
                  Json::array({{{"name", "app"}, {"resources", {{"limits", {{kDra, "1"}}}}}}})}}},
               {"status", {{"phase", "Pending"}}}};
  ASSERT_TRUE(api_->Create("/api/v1/pods", sent).ok());
  ASSERT_TRUE(api_->Create("/_fake/throttle?count=3&retry_after=0", Json::object()).ok());
  WriteFile(config_path(), Config(DraResource(), "0s", agent + "\npod_resources_poll = \"200ms\""));
  ASSERT_EQ(kill(agent_->pid(), SIGHUP), 0);
  ASSERT_TRUE(agent_->WaitForLog("Too many requests, please try again later.; trying again", kWait))
      << agent_->Log();
  auto allocatable = [&] {
    auto n = api_->Get(std::string("/api/v1/nodes/") + kNode);
    return n.ok() ? (*n)["status"]["allocatable"].value(kDra, std::string()) : std::string("?");
  };
  ASSERT_TRUE(Eventually([&] { return allocatable() == "0"; })) << agent_->Log();
  // It waits for "sent": the device plugin still serves, no driver yet.
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE(sim_->dra_driver(kDriver)) << agent_->Log();
  EXPECT_TRUE(Slices().empty()) << Json(Slices()).dump(1);
  sim_->BindPod("default", "sent", "app", kDra, {"fake-1"});
  ASSERT_TRUE(DriverRegistered()) << agent_->Log();
  ASSERT_TRUE(Eventually([&] { return SliceDevices() == std::vector<std::string>{"fake-0"}; }))
      << Json(Slices()).dump(1) << agent_->Log();
  EXPECT_EQ(agent_->Log().find("hand-off incomplete"), std::string::npos) << agent_->Log();
}

// Back from DRA to the device plugin API: the slices are deleted before
// the device plugin registers, so the Node never offers the name both ways.
TEST_F(DraTest, AReloadBackToTheDevicePluginDeletesTheSlicesBeforeItRegisters) {
  std::atomic<int> slices_at_register{-1};
  sim_on_event_ = [&](const std::string& line) {
    if (line.find(std::string("kubelet: registered ") + kDra + " at") != std::string::npos)
      slices_at_register = static_cast<int>(Slices().size());
  };
  StartSim();
  StartDra();
  ASSERT_TRUE(DriverRegistered());
  ASSERT_TRUE(Eventually([&] { return SliceDevices().size() == 2; }));

  WriteFile(config_path(),
            Config(Resource(kDra, FakeModule("fake_release"), "count = 2\n"), "0s", DraAgent()));
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(Registered(kDra)) << agent_->Log();
  // The simulator reports the registration once it has recorded it.
  ASSERT_TRUE(Eventually([&] { return slices_at_register.load() >= 0; }));
  EXPECT_EQ(slices_at_register.load(), 0);
  EXPECT_TRUE(Slices().empty()) << Json(Slices()).dump(1);
}

// Back to the device plugin API while a claim is prepared (issue 55): the
// reload goes through. The slices go before the device plugin registers;
// the driver stays registered for the claim's unprepare and prepares no
// other claim; the device plugin reports the claimed device Unhealthy (the
// kubelet hands it to no pod) until the claim is unprepared. Then the
// driver leaves, the device is offered, and nothing was released twice.
// A reload that would change the resource while its DRA side drains is
// refused, naming the claim.
TEST_F(DraTest, AMoveToTheDevicePluginWhileAClaimIsPreparedDrainsTheDriverUntilItIsUnprepared) {
  // PodResources too: the move back to DRA at the end asks it.
  const std::string agent = DraAgentWithPodResources() + "\npod_resources_poll = \"200ms\"";
  StartSim();
  StartAgent(DraResource(), "0s", agent);
  ASSERT_TRUE(DriverRegistered());
  ASSERT_TRUE(Eventually([&] {
    return SliceDevices() == std::vector<std::string>{"fake-0", "fake-1"};
  })) << Json(Slices()).dump(1);
  const std::string uid = Claim("c1", {"fake-1"});
  ASSERT_EQ(Prepare("c1", uid).claims().at(uid).error(), "");

  const std::string dp = "count = 2\nrelease_log = \"" + release_log() + "\"\n";
  WriteFile(config_path(), Config(Resource(kDra, FakeModule("fake_release"), dp), "0s", agent));
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(Registered(kDra)) << agent_->Log();
  EXPECT_TRUE(Slices().empty()) << Json(Slices()).dump(1);
  const std::map<std::string, std::string> claimed{{"fake-0", "Healthy"}, {"fake-1", "Unhealthy"}};
  ASSERT_TRUE(Eventually([&] { return DevicePluginHealth() == claimed; })) << agent_->Log();
  // The driver is still there for the claim, and for it only.
  auto driver = sim_->dra_driver(kDriver);
  ASSERT_TRUE(driver && driver->registered);
  EXPECT_EQ(Prepare("c1", uid).claims().at(uid).error(), "");  // answered again
  const std::string second = Claim("c2", {"fake-0"});
  EXPECT_NE(Prepare("c2", second).claims().at(second).error().find("no longer offers devices"),
            std::string::npos);
  auto status = ops::ControlRequest(control_socket(), R"({"status": {}})", 5s);
  ASSERT_TRUE(status.ok());
  EXPECT_NE(status->find(R"("draining":true)"), std::string::npos) << *status;
  EXPECT_NE(status->find(uid), std::string::npos) << *status;
  const auto text =
      testing::RunProcess({testing::DevplugctlPath(), "status", "--socket", control_socket()});
  EXPECT_NE(text.output.find("DRA: driver dra.fake.example draining: no slices; it stays for the "
                             "unprepare of the claims"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("prepared: default/c1 (" + uid + "): fake-1"), std::string::npos)
      << text.output;
  // Nothing may change the resource while it drains.
  WriteFile(config_path(), Config(DraResource(), "0s", agent));
  EXPECT_FALSE(Reload()) << agent_->Log();
  EXPECT_NE(agent_->Log().find("the new configuration changes it while DRA driver \"" +
                               std::string(kDriver) +
                               "\" still drains 1 claim(s) prepared before its move to the "
                               "device plugin API: default/c1 (" +
                               uid + ")"),
            std::string::npos)
      << agent_->Log();
  EXPECT_EQ(ReadFile(release_log()), "");

  ASSERT_EQ(Unprepare("c1", uid), "");
  EXPECT_TRUE(Eventually([&] {
    return DevicePluginHealth() ==
           std::map<std::string, std::string>{{"fake-0", "Healthy"}, {"fake-1", "Healthy"}};
  })) << agent_->Log();
  EXPECT_TRUE(DriverDeregistered()) << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog("driver dra.fake.example leaves this node", kWait))
      << agent_->Log();
  EXPECT_NE(ReadFile(release_log()).find("fake-1"), std::string::npos);
  EXPECT_TRUE(Slices().empty());
  // The same move again, now with nothing to drain, goes back to DRA.
  WriteFile(config_path(), Config(DraResource(), "0s", agent));
  EXPECT_TRUE(Reload()) << agent_->Log();
}

// A move to the device plugin API hands off (api_handoff.h, DraHandoff): a
// claim the scheduler allocated from the last slice, whose pod the kubelet
// had not started yet, is still prepared after the slices are gone, and
// the device plugin registers only once it is, with that device Unhealthy.
// A claim not allocated from this node's pool is not waited for. After
// the hand-off a new claim is refused.
TEST_F(DraTest, AMoveToTheDevicePluginPreparesTheClaimsAllocatedFromTheLastSliceBeforeItRegisters) {
  StartPublishing();
  ASSERT_FALSE(HasFailure());
  const std::string late = Claim("late", {"fake-1"});
  (void)Claim("elsewhere", {"fake-0"}, "node-2");
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "p-late"}, {"namespace", "default"}}},
              {"spec", {{"nodeName", kNode}, {"containers", Json::array({{{"name", "app"}}})}}},
              {"status",
               {{"phase", "Pending"},
                {"resourceClaimStatuses",
                 Json::array({{{"name", "a"}, {"resourceClaimName", "late"}},
                              {{"name", "b"}, {"resourceClaimName", "elsewhere"}}})}}}};
  ASSERT_TRUE(api_->Create("/api/v1/pods", pod).ok());

  const std::string dp = "count = 2\nrelease_log = \"" + release_log() + "\"\n";
  WriteFile(config_path(),
            Config(Resource(kDra, FakeModule("fake_release"), dp), "0s", DraAgent()));
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(Eventually([&] { return Slices().empty(); })) << Json(Slices()).dump(1);
  std::this_thread::sleep_for(2s);
  EXPECT_FALSE(sim_->resource(kDra)) << "the device plugin registered while a claim allocated "
                                        "from the last slice was not prepared\n"
                                     << agent_->Log();
  EXPECT_EQ(Prepare("late", late).claims().at(late).error(), "");
  ASSERT_TRUE(Registered(kDra)) << agent_->Log();
  EXPECT_TRUE(Eventually([&] {
    return DevicePluginHealth() ==
           std::map<std::string, std::string>{{"fake-0", "Healthy"}, {"fake-1", "Unhealthy"}};
  })) << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog("handed off to the device plugin API", kWait)) << agent_->Log();
  EXPECT_NE(agent_->Log().find("1 claim(s) prepared, no new one from now on"), std::string::npos)
      << agent_->Log();
  const std::string after = Claim("after", {"fake-0"});
  EXPECT_NE(Prepare("after", after).claims().at(after).error().find("no longer offers devices"),
            std::string::npos);
}

// The same across a restart: devplugd stops while a claim is prepared, the
// Node's label moves the resource to the device plugin API meanwhile, and
// the devplugd that starts serves it that way while a draining DRA side
// answers the claim's unprepare (without it the kubelet's unprepare would
// find no driver, and the claimed device would be handed out twice).
TEST_F(DraTest, ADevplugdStartedOnTheDevicePluginApiDrainsTheClaimsAnEarlierOnePrepared) {
  ASSERT_TRUE(MakeLabelledNode("dra"));
  const std::string agent = DraAgentWithPodResources();
  const std::string resource =
      Resource(kDra, FakeModule("fake_release"),
               "api = \"node-label\"\ncount = 2\nrelease_log = \"" + release_log() + "\"\n");
  StartSim();
  StartAgent(resource, "0s", agent);
  ASSERT_TRUE(DriverRegistered());
  ASSERT_TRUE(Eventually([&] { return SliceDevices().size() == 2; })) << agent_->Log();
  const std::string uid = Claim("c1", {"fake-1"});
  ASSERT_EQ(Prepare("c1", uid).claims().at(uid).error(), "");
  ASSERT_EQ(agent_->Stop(SIGTERM, 15s), std::optional<int>(0)) << agent_->Log();
  ASSERT_TRUE(DriverDeregistered());

  ASSERT_TRUE(Label("device-plugin"));
  StartAgent(resource, "0s", agent);
  ASSERT_TRUE(Registered(kDra)) << agent_->Log();
  ASSERT_TRUE(DriverRegistered(2));
  EXPECT_TRUE(Eventually([&] {
    return DevicePluginHealth() ==
           std::map<std::string, std::string>{{"fake-0", "Healthy"}, {"fake-1", "Unhealthy"}};
  })) << agent_->Log();
  EXPECT_TRUE(Slices().empty()) << Json(Slices()).dump(1);
  EXPECT_NE(agent_->Log().find(
                "served through the device plugin API, while DRA driver " + std::string(kDriver) +
                " has 1 claim(s) prepared by an earlier devplugd: default/c1 (" + uid + ")"),
            std::string::npos)
      << agent_->Log();
  EXPECT_TRUE(testing::FileExists(SpecPath(uid)));

  ASSERT_EQ(Unprepare("c1", uid), "");
  EXPECT_NE(ReadFile(release_log()).find("release fake-1"), std::string::npos);
  EXPECT_FALSE(testing::FileExists(SpecPath(uid)));
  EXPECT_TRUE(Eventually([&] {
    return DevicePluginHealth() ==
           std::map<std::string, std::string>{{"fake-0", "Healthy"}, {"fake-1", "Healthy"}};
  })) << agent_->Log();
  EXPECT_TRUE(DriverDeregistered()) << agent_->Log();
  EXPECT_TRUE(Slices().empty()) << Json(Slices()).dump(1);
}

// api = "node-label": one configuration for every node, and this node's
// label devplug.io/api chooses the API, read at start and at every reload;
// devplugd watches its Node, and a changed label moves the resource through
// a reload, as an edit of `api` would. A Node that cannot be read refuses
// the reload.
TEST_F(DraTest, TheNodesLabelChoosesTheApiAtStartAndEachChangeOfItMovesTheResource) {
  ASSERT_TRUE(MakeLabelledNode("dra"));
  const std::string agent = DraAgentWithPodResources();
  StartSim();
  StartAgent(Resource(kDra, FakeModule("fake_release"),
                      "api = \"node-label\"\ncount = 2\nrelease_log = \"" + release_log() + "\"\n"),
             "0s", agent);
  ASSERT_TRUE(DriverRegistered());
  EXPECT_TRUE(Eventually([&] {
    return SliceDevices() == std::vector<std::string>{"fake-0", "fake-1"};
  })) << agent_->Log();
  EXPECT_NE(agent_->Log().find("api = \"node-label\": node node-1's label devplug.io/api=dra"),
            std::string::npos)
      << agent_->Log();
  EXPECT_NE(agent_->Log().find("watching node node-1's label devplug.io/api"), std::string::npos)
      << agent_->Log();
  EXPECT_FALSE(sim_->resource(kDra)) << "registered through the device plugin API too";

  // No SIGHUP, no file changed (watch_config is off): the watch of the
  // Node sees the label and reloads.
  ASSERT_TRUE(Label("device-plugin"));
  ASSERT_TRUE(Registered(kDra)) << agent_->Log();
  EXPECT_TRUE(Eventually([&] { return Slices().empty(); })) << Json(Slices()).dump(1);
  EXPECT_NE(agent_->Log().find("node node-1's label devplug.io/api is now \"device-plugin\" (the "
                               "running configuration read \"dra\")"),
            std::string::npos)
      << agent_->Log();

  ASSERT_TRUE(Label("dra"));
  ASSERT_TRUE(DriverRegistered(2));
  EXPECT_TRUE(Eventually([&] { return SliceDevices().size() == 2; })) << agent_->Log();
  ASSERT_TRUE(Eventually([&] { return Count(agent_->Log(), "reloaded: ") == 2; })) << agent_->Log();
  // A change of the Node that leaves the label alone reloads nothing.
  ASSERT_TRUE(api_->Update(std::string("/api/v1/nodes/") + kNode,
                           [](Json& n) {
                             n["status"]["allocatable"]["cpu"] = "2";
                             return OkStatus();
                           })
                  .ok());

  // An API server that cannot tell the label refuses a reload.
  ASSERT_TRUE(api_->Delete(std::string("/api/v1/nodes/") + kNode).ok());
  EXPECT_FALSE(Reload());
  EXPECT_NE(agent_->Log().find("cannot read node node-1's labels (devplug.io/api chooses the API "
                               "of a resource with api = \"node-label\")"),
            std::string::npos)
      << agent_->Log();
  EXPECT_EQ(SliceDevices().size(), 2u);  // what runs stays
  EXPECT_EQ(Count(agent_->Log(), "reloading the configuration"), 3u) << agent_->Log();
}

// pod_of() under DRA: inside pre_start(), which runs before any container
// of the claim's pod exists, the holder is the claim being prepared, in its
// namespace; so cex's `namespaces` can be checked and its sweep keeps a
// prepared claim's nodes (review D6: every answer was "nobody", -ENOENT).
TEST_F(DraTest, PodOfNamesTheClaimsNamespaceInsidePrepare) {
  StartSim();
  StartAgent(DraResource("log_holder = true\n"), "0s", DraAgent());
  ASSERT_TRUE(DriverRegistered());
  ASSERT_TRUE(Eventually([&] { return SliceDevices().size() == 2; }));
  const std::string uid = Claim("c1", {"fake-1"});
  ASSERT_EQ(Prepare("c1", uid).claims().at(uid).error(), "");
  const std::string log = ReadFile(release_log());
  EXPECT_NE(log.find("holder fake-1 default/"), std::string::npos) << log;
  EXPECT_EQ(log.find("holder fake-1 none"), std::string::npos) << log;
}

// The devices of one request reach a container together: one allocate()
// for all of them, one CDI device with its edits, as the device plugin API
// answers one container (review D7: one allocate() and CDI device each gave
// FAKE_DEVICES=fake-0 and FAKE_DEVICES=fake-1, and the runtime keeps one).
TEST_F(DraTest, ARequestOfTwoDevicesIsOneAllocateAndOneCdiDevice) {
  ASSERT_NO_FATAL_FAILURE(StartPublishing());
  const std::string uid = Claim("c1", {"fake-0", "fake-1"});
  auto resp = Prepare("c1", uid);
  const auto& claim = resp.claims().at(uid);
  ASSERT_EQ(claim.error(), "");
  ASSERT_EQ(claim.devices_size(), 2);
  for (const auto& d : claim.devices()) {
    ASSERT_EQ(d.cdi_device_ids_size(), 1);
    EXPECT_EQ(d.cdi_device_ids(0), "devplug.fake.example/dra=" + uid + "-req");
  }
  const Json spec = Json::parse(ReadFile(SpecPath(uid)), nullptr, false);
  ASSERT_EQ(spec["devices"].size(), 1u) << spec.dump(1);
  const std::string edits = spec["devices"][0]["containerEdits"].dump();
  EXPECT_NE(edits.find("FAKE_DEVICES=fake-0,fake-1"), std::string::npos) << spec.dump(1);
  EXPECT_EQ(Unprepare("c1", uid), "");
}

// ABI 1.10: a module's shares of one device are one device DRA shares
// among claims (consumable capacity), each claim's share prepared as one of
// the module's shares, or several when it consumes more.
TEST_F(DraTest, ASharedDeviceIsOneDeviceWhoseSharesArePreparedPerClaim) {
  StartSim();
  StartAgent(DraResource("count = 4\nshare_of = 3\ndescribe = true"), "0s", DraAgent());
  ASSERT_TRUE(DriverRegistered());
  ASSERT_TRUE(Eventually([&] {
    return SliceDevices() == std::vector<std::string>{"shared-0", "shared-1"};
  })) << Json(Slices()).dump(1);
  const Json devices = Slices()[0]["spec"]["devices"];
  EXPECT_EQ(devices[0]["allowMultipleAllocations"], true) << devices.dump(1);
  EXPECT_EQ(devices[0]["attributes"]["id"]["string"], "shared-0");
  EXPECT_EQ(devices[0]["attributes"]["index"]["int"], 0);  // its first share's
  EXPECT_EQ(
      devices[0]["capacity"]["shares"],
      (Json{{"value", "3"},
            {"requestPolicy",
             {{"default", "1"}, {"validRange", {{"min", "1"}, {"max", "3"}, {"step", "1"}}}}}}))
      << devices.dump(1);
  // The module's own capacity: none of it taken unless a claim asks.
  EXPECT_EQ(devices[0]["capacity"]["memory"]["requestPolicy"]["default"], "0");
  EXPECT_EQ(devices[1]["capacity"]["shares"]["value"], "1");
  auto status = testing::RunProcess(
      {testing::DevplugctlPath(), "status", "--json", "--devices", "--socket", control_socket()});
  const Json st = Json::parse(status.output, nullptr, false);
  ASSERT_TRUE(st.is_object()) << status.output;
  EXPECT_EQ(st["resources"][0]["devices"][2]["share_of"], "shared-0") << status.output;

  // Three claims share shared-0, each with a share of the module's own.
  std::map<std::string, std::string> uids;
  std::set<std::string> ids;
  for (const std::string name : {"c1", "c2", "c3"}) {
    uids[name] = SharedClaim(name, "shared-0", 1);
    auto resp = Prepare(name, uids[name]);
    const auto& claim = resp.claims().at(uids[name]);
    ASSERT_EQ(claim.error(), "") << name;
    ASSERT_EQ(claim.devices_size(), 1);
    EXPECT_EQ(claim.devices(0).device_name(), "shared-0");
    EXPECT_EQ(claim.devices(0).share_id(), "share-of-" + name);
    const std::string edits =
        Json::parse(ReadFile(SpecPath(uids[name])))["devices"][0]["containerEdits"].dump();
    for (const std::string id : {"fake-0", "fake-1", "fake-2"})
      if (edits.find("FAKE_DEVICES=" + id) != std::string::npos) ids.insert(id);
  }
  EXPECT_EQ(ids, (std::set<std::string>{"fake-0", "fake-1", "fake-2"}));
  // Each claim's status names its share.
  EXPECT_TRUE(Eventually([&] {
    const Json devices = StatusDevices("c2");
    return devices.is_array() && devices[0].value("shareID", "") == "share-of-c2";
  }));
  // A fourth finds no free share (the scheduler would not allocate it).
  const std::string c4 = SharedClaim("c4", "shared-0", 1);
  auto refused = Prepare("c4", c4);
  EXPECT_NE(refused.claims().at(c4).error().find("\"shared-0\" has 0 free share(s) of 3"),
            std::string::npos)
      << refused.claims().at(c4).error();
  // One claim goes: its share is released, and the fourth gets it.
  EXPECT_EQ(Unprepare("c2", uids["c2"]), "");
  const std::string log = ReadFile(release_log());
  ASSERT_NE(log.find("release fake-"), std::string::npos) << log;
  const std::string freed = log.substr(log.find("release ") + 8, 6);
  auto again = Prepare("c4", c4);
  ASSERT_EQ(again.claims().at(c4).error(), "");
  EXPECT_NE(ReadFile(SpecPath(c4)).find("FAKE_DEVICES=" + freed), std::string::npos);

  // A claim that consumes two shares of shared-1, which has one: refused.
  const std::string big = SharedClaim("big", "shared-1", 2);
  auto too_big = Prepare("big", big);
  EXPECT_NE(too_big.claims().at(big).error().find("has 1 free share(s) of 1 now"),
            std::string::npos)
      << too_big.claims().at(big).error();
  // Two shares of shared-0 once two are free: one device in the answer,
  // both module devices in its edits.
  EXPECT_EQ(Unprepare("c1", uids["c1"]), "");
  EXPECT_EQ(Unprepare("c3", uids["c3"]), "");
  const std::string two = SharedClaim("two", "shared-0", 2);
  auto both = Prepare("two", two);
  ASSERT_EQ(both.claims().at(two).error(), "");
  ASSERT_EQ(both.claims().at(two).devices_size(), 1);
  EXPECT_EQ(both.claims().at(two).devices(0).share_id(), "share-of-two");
  const std::string spec = ReadFile(SpecPath(two));
  size_t in_spec = 0;
  for (const std::string& id : ids) in_spec += spec.find(id) != std::string::npos;
  EXPECT_EQ(in_spec, 2u) << spec;  // the two shares c4 does not hold
  EXPECT_EQ(spec.find(freed), std::string::npos) << spec;
  EXPECT_EQ(Unprepare("two", two), "");
  EXPECT_EQ(Unprepare("c4", c4), "");
}

// A claim made from a pod's template: the metadata goes where the pod spec
// can name it (the pod's name for the claim); a subrequest's devices are
// their request's.
TEST_F(DraTest, ATemplatesClaimHasItsMetadataUnderThePodsNameForIt) {
  ASSERT_NO_FATAL_FAILURE(StartPublishing());
  Json claim = Json::parse(R"({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
      "metadata": {"name": "pod-1-gpu-x7k2q", "namespace": "default",
                   "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"}},
      "status": {"allocation": {"devices": {"results": [
          {"request": "main/large", "pool": "node-1", "device": "fake-0"}]}}}})");
  claim["status"]["allocation"]["devices"]["results"][0]["driver"] = kDriver;
  auto made = api_->Create(kClaims, claim);
  ASSERT_TRUE(made.ok()) << made.status().message();
  const std::string uid = (*made)["metadata"]["uid"];
  auto resp = Prepare("pod-1-gpu-x7k2q", uid);
  ASSERT_EQ(resp.claims().at(uid).error(), "");
  const Json meta = Json::parse(ReadFile(MetadataPath(uid, "main")));
  EXPECT_EQ(meta["podClaimName"], "gpu");
  EXPECT_EQ(meta["requests"][0]["name"], "main");
  const Json spec = Json::parse(ReadFile(SpecPath(uid)));
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["mounts"].back()["containerPath"],
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/main/" +
                std::string(kDriver) + "-metadata.json")
      << spec.dump(1);
  EXPECT_EQ(Unprepare("pod-1-gpu-x7k2q", uid), "");
  EXPECT_FALSE(testing::FileExists(MetadataPath(uid, "main")));
}

// `devplugctl simulate-kubelet --prepare`: a person tries a DRA resource
// without a kubelet. It registers the driver through the plugin watcher,
// prints the health the driver streams, prepares the claim (the CDI device
// in its answer) and unprepares it; bad arguments and a refused claim are
// its exit status.
TEST_F(DraTest, SimulateKubeletPreparesAndUnpreparesAClaim) {
  StartDra();  // no simulator of the test's own: devplugctl is the kubelet
  ASSERT_TRUE(Eventually([&] { return SliceDevices().size() == 2; }));
  const std::string uid = Claim("c1", {"fake-1"});
  const std::string kubelet_dir = dir_ / "ctl-kubelet";
  std::filesystem::create_directories(kubelet_dir);
  auto ctl = [&](const std::vector<std::string>& more) {
    std::vector<std::string> argv{
        testing::DevplugctlPath(), "simulate-kubelet", "--dir", kubelet_dir,
        "--plugins-registry",      registry()};
    argv.insert(argv.end(), more.begin(), more.end());
    return testing::RunProcess(argv);
  };
  const std::string claim = std::string(kDriver) + "=default/c1/" + uid;
  testing::RunResult r = ctl({"--prepare", claim, "--unprepare-after", "0.5", "--duration", "4"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string prepared = "NodePrepareResources default/c1 (" + std::string(kDriver) + ") ->";
  const size_t at = r.output.find(prepared);
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("devplug.fake.example/dra=" + uid + "-req", at), std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("NodeUnprepareResources default/c1 (" + std::string(kDriver) + "): OK", at),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("DRA driver " + std::string(kDriver) + ": fake-1 Healthy"),
            std::string::npos)
      << r.output;
  // Unprepared: the claim's CDI spec is gone, and the module released it.
  EXPECT_FALSE(testing::FileExists(SpecPath(uid)));
  EXPECT_TRUE(Eventually([&] {
    return ReadFile(release_log()).find("fake-1") != std::string::npos;
  })) << ReadFile(release_log());

  // A claim the API server does not hold is refused: exit status 3.
  r = ctl({"--prepare", std::string(kDriver) + "=default/nosuch/0000", "--duration", "3"});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(
      r.output.find("NodePrepareResources default/nosuch (" + std::string(kDriver) + ") failed: "),
      std::string::npos)
      << r.output;
  // A driver that never registers is a failure too.
  r = ctl({"--prepare", "other.example=default/c1/" + uid, "--duration", "1"});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("DRA driver other.example did not register"), std::string::npos)
      << r.output;
  // A malformed claim, or no plugin watcher, is refused at once.
  r = ctl({"--prepare", "default/c1"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("expected <driver>=<namespace>/<claim name>/<claim uid>"),
            std::string::npos)
      << r.output;
  r = testing::RunProcess(
      {testing::DevplugctlPath(), "simulate-kubelet", "--dir", kubelet_dir, "--prepare", claim});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--prepare needs --plugins-registry"), std::string::npos) << r.output;
}

// A rolling update with surge: the new devplugd starts while the old one
// serves, with the same state folder (the DaemonSet's hostPath). It serves
// on the socket's second name and the kubelet calls it; the old one stands
// by and writes no slice. Either one unprepares what the other prepared,
// and neither hands out a device the other gave a claim. The old one
// leaves its slices at its exit: the pool is never absent.
TEST_F(DraTest, ARollingUpdateServesBesideTheOldOneAndThePoolNeverGoes) {
  ASSERT_NO_FATAL_FAILURE(StartPublishing());
  const std::string before = Claim("before", {"fake-0"});
  ASSERT_EQ(Prepare("before", before).claims().at(before).error(), "");
  const int writes = SliceWrites();

  AgentProcess newer({"--config", config_path()});
  const bool beside = DriverRegistered(2);
  ASSERT_TRUE(beside) << newer.Log();
  EXPECT_EQ(sim_->dra_driver(kDriver)->instances, 2u);
  EXPECT_EQ(sim_->dra_driver(kDriver)->socket, registry() + "/dra.fake.example.b.sock")
      << sim_->dra_driver(kDriver)->socket;
  EXPECT_TRUE(newer.WaitForLog("serving beside it as its successor", kWait)) << newer.Log();
  EXPECT_TRUE(agent_->WaitForLog("a newer devplugd serves it on", kWait)) << agent_->Log();

  // The kubelet calls the newer one, which knows the older one's claim.
  const std::string taken = Claim("taken", {"fake-0"});
  EXPECT_NE(Prepare("taken", taken)
                .claims()
                .at(taken)
                .error()
                .find("prepared for claim "
                      "default/before"),
            std::string::npos);
  const std::string during = Claim("during", {"fake-1"});
  ASSERT_EQ(Prepare("during", during).claims().at(during).error(), "");
  EXPECT_TRUE(newer.WaitForLog("prepared claim default/during", kWait)) << newer.Log();

  // The DaemonSet stops the old pod once the new one is ready.
  EXPECT_EQ(agent_->Stop(SIGTERM, 15s), std::optional<int>(0)) << agent_->Log();
  EXPECT_NE(agent_->Log().find("its slices stay"), std::string::npos) << agent_->Log();
  EXPECT_EQ(SliceDevices(), (std::vector<std::string>{"fake-0", "fake-1"}));
  EXPECT_EQ(SliceWrites(), writes);  // no write, no delete, by either
  ASSERT_TRUE(Eventually([&] { return sim_->dra_driver(kDriver)->instances == 1u; }));
  EXPECT_TRUE(sim_->dra_driver(kDriver)->registered);
  EXPECT_TRUE(newer.WaitForLog("this one holds", kWait)) << newer.Log();

  // The newer one releases what the older one prepared, then its own.
  EXPECT_EQ(Unprepare("before", before), "");
  EXPECT_EQ(Unprepare("during", during), "");
  const std::string log = ReadFile(release_log());
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 2) << log;
  EXPECT_FALSE(FileExists(SpecPath(before)));
  EXPECT_FALSE(FileExists(SpecPath(during)));
  // Alone now, its exit takes the slices with it.
  EXPECT_EQ(newer.Stop(SIGTERM, 15s), std::optional<int>(0)) << newer.Log();
  EXPECT_TRUE(Slices().empty());
}

TEST_F(DraTest, ServesDraAndTheDevicePluginApiSideBySide) {
  StartSim();
  StartDra(Resource(kFull, FakeModule("fake_full"), "count = 2"));
  ASSERT_TRUE(DriverRegistered());
  ASSERT_TRUE(Registered(kFull));
  EXPECT_EQ(sim_->resource(kFull)->via, sim::kViaKubeletSock);
  ASSERT_TRUE(Eventually([&] { return SliceDevices().size() == 2; }));
  v1beta1::ContainerAllocateResponse alloc;
  ASSERT_TRUE(sim_->Allocate(kFull, {"fake-0"}, &alloc).ok());
  const std::string uid = Claim("c1", {"fake-0"});
  EXPECT_EQ(Prepare("c1", uid).claims().at(uid).error(), "");
  EXPECT_EQ(Unprepare("c1", uid), "");
}

// An API server that takes connections and never answers: at exit every
// DRA driver stops at once, and their slice deletes are bounded, so the exit
// does not wait a call timeout per resource (review D10: 30 s with three,
// the pod's whole grace period). The bound checked here has slack for a
// loaded machine; the figure is dra_bench's.
TEST_F(DraTest, AnApiServerThatDoesNotAnswerDoesNotHoldTheExit) {
  const int silent = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(silent, 64), 0);  // connections wait in the backlog, unanswered
  ASSERT_EQ(getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  server_ = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));

  StartSim();
  StartAgent(
      DraResource() +
          Resource("fake.example/dra2", FakeModule("fake_full"), "api = \"dra\"\ncount = 1") +
          Resource("fake.example/dra3", FakeModule("fake_full"), "api = \"dra\"\ncount = 1"),
      "0s", DraAgent() + "\ncall_timeout = \"20s\"");
  ASSERT_TRUE(DriverRegistered());
  ASSERT_TRUE(Eventually([&] {
    auto a = sim_->dra_driver("dra2.fake.example");
    auto b = sim_->dra_driver("dra3.fake.example");
    return a && a->registered && b && b->registered;
  }));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(agent_->Stop(SIGTERM, 60s), std::optional<int>(0)) << agent_->Log();
  const auto took = std::chrono::steady_clock::now() - t0;
  // Before: three deletes of 20 s each, one after another (60 s).
  EXPECT_LT(took, 10s) << agent_->Log();
  // Each driver's first list still hangs: its thread is left to the exit.
  EXPECT_NE(agent_->Log().find("did not stop within 700 ms; left to the exit"), std::string::npos)
      << agent_->Log();
  close(silent);
}

// A reload while a prepare waits in a slow allocate(): the kubelet's call is
// answered UNAVAILABLE at once, and the reload does not wait for the module
// (review D9: the main loop stalled for the whole prepare). The prepare that
// was under way fails once it finds its instance replaced; the kubelet's
// retry is prepared by the new one.
TEST_F(DraTest, AReloadDoesNotWaitForAPrepareInFlight) {
  StartSim();
  const std::string agent = DraAgent() + "\ncall_timeout = \"20s\"";
  StartAgent(DraResource("allocate_delay_ms = 6000\n"), "0s", agent);
  ASSERT_TRUE(DriverRegistered());
  ASSERT_TRUE(Eventually([&] { return SliceDevices().size() == 2; }));
  const std::string uid = Claim("slow", {"fake-0"});
  std::promise<grpc::Status> answer;
  std::thread kubelet([&] {
    sim::drav1::NodePrepareResourcesResponse resp;
    answer.set_value(sim_->NodePrepareResources(kDriver, {{"default", uid, "slow"}}, &resp));
  });
  ASSERT_TRUE(agent_->WaitForLog("allocate() sleeps now", kWait)) << agent_->Log();
  WriteFile(config_path(), Config(DraResource("count = 3\n"), "0s", agent));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(Reload()) << agent_->Log();
  const auto took = std::chrono::steady_clock::now() - t0;
  auto st = answer.get_future();
  ASSERT_EQ(st.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(st.get().error_code(), grpc::StatusCode::UNAVAILABLE);
  kubelet.join();
  // The allocate() sleeps 6 s; the reload's server stop used to wait for it.
  EXPECT_LT(took, 4s) << agent_->Log();
  ASSERT_TRUE(DriverRegistered(2));
  EXPECT_EQ(Prepare("slow", uid).claims().at(uid).error(), "");
  EXPECT_NE(agent_->Log().find("the module stopped while the claim was prepared"),
            std::string::npos)
      << agent_->Log();
  EXPECT_EQ(Unprepare("slow", uid), "");
}

TEST_F(DraTest, AKubeletOfV1beta1IsServedToo) {
  ASSERT_NO_FATAL_FAILURE(StartPublishing());
  const std::string uid = Claim("c1", {"fake-0"});
  namespace b1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
  auto stub = b1::DRAPlugin::NewStub(grpc::CreateChannel(
      "unix:" + sim_->dra_driver(kDriver)->endpoint, grpc::InsecureChannelCredentials()));
  b1::NodePrepareResourcesRequest req;
  auto* c = req.add_claims();
  c->set_namespace_("default");
  c->set_uid(uid);
  c->set_name("c1");
  b1::NodePrepareResourcesResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->NodePrepareResources(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.claims().at(uid).error(), "");
  EXPECT_EQ(resp.claims().at(uid).devices(0).cdi_device_ids(0),
            "devplug.fake.example/dra=" + uid + "-req");
}

}  // namespace
}  // namespace devplug
