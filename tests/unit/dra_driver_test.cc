// dra::Driver in this process, over a real module instance (the fake
// module through the real loader) and a fake API server: its slices follow
// the instance's lists, prepare and unprepare run while lists change (the
// suite's ThreadSanitizer stage runs this), and its checkpoint comes back.
#include "dra/driver.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "cdi/spec_dir.h"
#include "module_harness.h"
#include "test_util.h"
#include "util/file_lock.h"

namespace devplug::dra {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;
using devplug::testing::ReadFile;
using devplug::testing::TempDir;
using devplug::testing::WriteFile;

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";
constexpr char kClaims[] = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";
constexpr char kDriver[] = "dra.fake.example";

class DraDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto api = devplug::testing::StartFakeApiServer(DEVPLUG_FAKE_APISERVER, dir_ / "port",
                                                          dir_ / "api.log");
    pid_ = api.pid;
    ASSERT_GT(pid_, 0) << ReadFile(dir_ / "api.log");
    kube::Client::Options o;
    o.credentials.server = "http://127.0.0.1:" + api.port;
    client_ = std::make_shared<kube::Client>(o);
    WriteFile(dir_ / "count", "2");
  }
  void TearDown() override {
    if (inst_) (void)inst_->Stop(5s);
    if (driver_) {
      EXPECT_TRUE(driver_->Stop(false));
    }
    if (pid_ > 0) devplug::testing::StopProcess(pid_, SIGTERM);
  }

  Driver::Options Opts() {
    Driver::Options o;
    o.resource = "fake.example/dra";
    o.driver = kDriver;
    o.node = "node-1";
    o.cdi_dir = dir_ / "cdi";
    o.checkpoint = dir_ / "claims.json";
    o.client = client_;
    o.relist = relist_;
    o.await_registration = await_registration_;
    o.hold_for = hold_for_;
    return o;
  }
  // Requests the fake API server saw so far with this method.
  int Requests(const std::string& method) {
    auto r = client_->Get("/_fake/requests");
    EXPECT_TRUE(r.ok()) << r.status().message();
    int n = 0;
    if (r.ok())
      for (const Json& q : (*r)["items"]) n += q["method"] == method;
    return n;
  }
  void WipeSlices() {  // as the kubelet does at its start
    ASSERT_TRUE(client_->DeleteCollection(kSlices, {"spec.nodeName=node-1", ""}).ok());
    ASSERT_EQ(Devices(), -1);
  }
  // The driver, and the fake module's instance publishing into it.
  void Start() {
    auto d = Driver::Make(Opts());
    ASSERT_TRUE(d.ok()) << d.status().message();
    driver_ = std::shared_ptr<Driver>(std::move(*d));
    modules::ModuleInstance::Options o;
    o.lists = driver_;
    auto inst = modules::harness::OpenFile(
        devplug::testing::FakeModuleDir() + "/fake_release.so", "fake.example/dra", "/",
        "count_file = \"" + (dir_ / "count") + "\"\nrelease_log = \"" + (dir_ / "release.log") +
            "\"\n" + module_config_,
        0, o);
    ASSERT_TRUE(inst.ok()) << inst.status().message();
    inst_ = std::move(*inst);
    driver_->SetInstance(inst_.get());
  }
  // Held for the resource's name, with the Node as the kubelet posts it
  // while the device plugin serves that name.
  void HoldForAServedNode() {
    hold_for_ = "fake.example/dra";
    Json node = {{"apiVersion", "v1"},
                 {"kind", "Node"},
                 {"metadata", {{"name", "node-1"}}},
                 {"status", {{"allocatable", {{hold_for_, "2"}, {"cpu", "2"}}}}}};
    ASSERT_TRUE(client_->Create("/api/v1/nodes", node).ok());
  }
  int Devices() {
    auto l =
        client_->List(kSlices, {"spec.nodeName=node-1,spec.driver=" + std::string(kDriver), ""});
    if (!l.ok() || (*l)["items"].empty()) return -1;
    int n = 0;
    for (const Json& s : (*l)["items"]) n += static_cast<int>(s["spec"]["devices"].size());
    return n;
  }
  template <typename F>
  bool Eventually(F f) {
    for (int i = 0; i < 2000; ++i) {
      if (f()) return true;
      std::this_thread::sleep_for(5ms);
    }
    return f();
  }
  // A claim allocated `device` of our driver on node-1 (`extra`: more fields
  // of its result); its UID.
  std::string Claim(const std::string& name, const std::string& device,
                    const Json& extra = Json::object()) {
    Json result = {{"request", "r"}, {"driver", kDriver}, {"pool", "node-1"}, {"device", device}};
    result.update(extra);
    Json claim = {
        {"metadata", {{"name", name}, {"namespace", "default"}}},
        {"status", {{"allocation", {{"devices", {{"results", Json::array({result})}}}}}}}};
    auto made = client_->Create(kClaims, claim);
    EXPECT_TRUE(made.ok()) << made.status().message();
    return made.ok() ? (*made)["metadata"]["uid"].get<std::string>() : "";
  }
  std::string Claim(int i, const std::string& device) {
    return Claim("c" + std::to_string(i), device);
  }
  // Prepare (or unprepare) one claim and wait for the answer.
  // `d`: another driver than driver_; `within`: the kubelet's deadline.
  PrepareResult Prepare(const ClaimRef& c, Driver* d = nullptr,
                        std::chrono::milliseconds within = 45s) {
    std::promise<std::map<std::string, PrepareResult>> p;
    (d ? *d : *driver_)
        .Prepare({c}, std::chrono::steady_clock::now() + within,
                 [&](std::map<std::string, PrepareResult> out) { p.set_value(out); });
    return p.get_future().get()[c.uid];
  }
  std::string Unprepare(const ClaimRef& c, Driver* d = nullptr) {
    std::promise<std::map<std::string, std::string>> p;
    (d ? *d : *driver_)
        .Unprepare({c}, std::chrono::steady_clock::now() + 45s,
                   [&](std::map<std::string, std::string> out) { p.set_value(out); });
    return p.get_future().get()[c.uid];
  }

  TempDir dir_;
  pid_t pid_ = -1;
  std::shared_ptr<kube::Client> client_;
  std::chrono::milliseconds relist_{0};
  bool await_registration_ = false;
  std::string hold_for_;       // Driver::Options::hold_for
  std::string module_config_;  // more of the fake module's keys
  std::shared_ptr<Driver> driver_;
  std::unique_ptr<modules::ModuleInstance> inst_;
};

TEST_F(DraDriverTest, SlicesFollowTheListsAndAnUnchangedListWritesNothing) {
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  const int64_t generation = driver_->generation();
  WriteFile(dir_ / "count", "3");
  inst_->RequestRescan();
  ASSERT_TRUE(Eventually([&] { return Devices() == 3; }));
  // A device added to the one slice: the pool's slices are the same set.
  EXPECT_EQ(driver_->generation(), generation);
  ASSERT_TRUE(Eventually([&] { return driver_->syncs() == 2; })) << driver_->syncs();
  // The same list again: no write.
  inst_->RequestRescan();
  modules::harness::Settle(*inst_);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(driver_->syncs(), 2u);
  EXPECT_EQ(driver_->sync_error(), "");
}

// A restart (a fleet's DaemonSet update, a node's package upgrade) that
// finds its pool whole, as it would write it, writes nothing: no PUT, the
// same generation. A pool left half written (its slices disagree) is
// passed: every slice is written anew at a newer generation.
TEST_F(DraDriverTest, ARestartFindingItsPoolWholeWritesNothingAndAHalfWrittenPoolIsPassed) {
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  const int64_t generation = driver_->generation();
  const int writes = Requests("PUT") + Requests("POST");
  auto restart = [&] {
    (void)inst_->Stop(5s);
    inst_.reset();
    ASSERT_TRUE(driver_->Stop(false));
    driver_.reset();
    Start();
    ASSERT_TRUE(Eventually([&] { return driver_->syncs() >= 1; }));
  };
  restart();
  EXPECT_EQ(Requests("PUT") + Requests("POST"), writes);
  EXPECT_EQ(driver_->generation(), generation);
  EXPECT_EQ(driver_->sync_error(), "");

  auto l = client_->List(kSlices, {"spec.nodeName=node-1,spec.driver=" + std::string(kDriver), ""});
  ASSERT_TRUE(l.ok()) << l.status().message();
  ASSERT_EQ((*l)["items"].size(), 1u);
  Json slice = (*l)["items"][0];
  slice["spec"]["pool"]["generation"] = generation + 5;
  slice["spec"]["pool"]["resourceSliceCount"] = 2;  // its sibling never came
  ASSERT_TRUE(
      client_
          ->Replace(std::string(kSlices) + "/" + slice["metadata"]["name"].get<std::string>(),
                    slice)
          .ok());
  restart();
  EXPECT_EQ(driver_->generation(), generation + 6);
  auto after =
      client_->List(kSlices, {"spec.nodeName=node-1,spec.driver=" + std::string(kDriver), ""});
  ASSERT_TRUE(after.ok()) << after.status().message();
  ASSERT_EQ((*after)["items"].size(), 1u);
  EXPECT_EQ((*after)["items"][0]["spec"]["pool"]["generation"], generation + 6);
  EXPECT_EQ((*after)["items"][0]["spec"]["pool"]["resourceSliceCount"], 1);
  EXPECT_EQ(Devices(), 2);
}

// The API server refuses a slice of more than 128 devices. The pool's
// generation moves when its set of slices does, or a device changes slice
// (the scheduler then waits for the whole new set), and only then.
TEST_F(DraDriverTest, APoolPast128DevicesIsSplitAndItsGenerationMovesWithItsSlices) {
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  const int64_t first = driver_->generation();
  auto pool = [&] {
    auto l =
        client_->List(kSlices, {"spec.nodeName=node-1,spec.driver=" + std::string(kDriver), ""});
    EXPECT_TRUE(l.ok()) << l.status().message();
    std::map<std::string, Json> by_name;
    if (l.ok())
      for (const Json& s : (*l)["items"]) by_name[s["metadata"]["name"]] = s["spec"];
    return by_name;
  };
  auto sizes = [&] {
    std::vector<size_t> out;
    for (const auto& [name, spec] : pool()) out.push_back(spec["devices"].size());
    return out;
  };
  WriteFile(dir_ / "count", "130");
  inst_->RequestRescan();
  ASSERT_TRUE(Eventually([&] { return sizes() == std::vector<size_t>{128, 2}; }));
  const int64_t split = driver_->generation();
  EXPECT_GT(split, first);
  for (const auto& [name, spec] : pool()) {
    EXPECT_EQ(spec["pool"]["generation"], split) << name;
    EXPECT_EQ(spec["pool"]["resourceSliceCount"], 2) << name;
  }
  auto holders = [&] {
    std::map<std::string, std::string> out;  // device -> slice
    for (const auto& [name, spec] : pool())
      for (const Json& d : spec["devices"]) out[d["name"]] = name;
    return out;
  };
  const auto before = holders();
  // A device goes (fake-129, in the first slice: IDs sort as text): the
  // others keep their slices, and the generation stays.
  WriteFile(dir_ / "count", "129");
  inst_->RequestRescan();
  ASSERT_TRUE(Eventually([&] {
    return sizes() == std::vector<size_t>{127, 2};
  })) << ::testing::PrintToString(sizes());
  EXPECT_EQ(driver_->generation(), split);
  for (const auto& [device, slice] : holders()) EXPECT_EQ(before.at(device), slice) << device;
  // One slice is enough again: the second one goes, the generation moves.
  WriteFile(dir_ / "count", "128");
  inst_->RequestRescan();
  ASSERT_TRUE(Eventually([&] { return sizes() == std::vector<size_t>{128}; }));
  EXPECT_GT(driver_->generation(), split);
  EXPECT_EQ(pool().begin()->second["pool"]["resourceSliceCount"], 1);
  EXPECT_EQ(driver_->sync_error(), "");
}

// Health that recovers: fake-0 turns Unhealthy and stays in its slice with
// a taint, whose timeAdded holds across republishing; Healthy again, the
// taint goes. Neither moves the pool's generation. A reload's new effect
// reaches the taint.
TEST_F(DraDriverTest, AnUnhealthyDeviceIsTaintedUntilItRecovers) {
  module_config_ = "sick_while = \"" + (dir_ / "sick") + "\"\n";
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  const int64_t generation = driver_->generation();
  auto fake0 = [&]() -> Json {
    auto l =
        client_->List(kSlices, {"spec.nodeName=node-1,spec.driver=" + std::string(kDriver), ""});
    if (!l.ok()) return Json();
    for (const Json& s : (*l)["items"])
      for (const Json& d : s["spec"]["devices"])
        if (d["name"] == "fake-0") return d;
    return Json();
  };
  WriteFile(dir_ / "sick", "");
  inst_->RequestRescan();
  ASSERT_TRUE(Eventually([&] { return fake0().contains("taints"); })) << fake0();
  const Json taint = fake0()["taints"][0];
  EXPECT_EQ(taint["key"], "devplug.io/unhealthy");
  EXPECT_EQ(taint["effect"], "NoSchedule");
  EXPECT_EQ(taint["value"], "listed-unhealthy");  // the module's reason, as a label value
  ASSERT_TRUE(taint.contains("timeAdded")) << taint;
  EXPECT_EQ(Devices(), 2) << "it stays in the pool";
  // Another change republishes the pool a second later: the time stays.
  std::this_thread::sleep_for(1100ms);
  WriteFile(dir_ / "count", "3");
  inst_->RequestRescan();
  ASSERT_TRUE(Eventually([&] { return Devices() == 3; }));
  EXPECT_EQ(fake0()["taints"][0]["timeAdded"], taint["timeAdded"]);
  driver_->SetTaintEffect("NoExecute");
  ASSERT_TRUE(Eventually([&] { return fake0()["taints"][0]["effect"] == "NoExecute"; })) << fake0();
  EXPECT_EQ(fake0()["taints"][0]["timeAdded"], taint["timeAdded"]);
  // Healthy again: no taint.
  std::filesystem::remove(dir_ / "sick");
  inst_->RequestRescan();
  ASSERT_TRUE(Eventually([&] { return !fake0().is_null() && !fake0().contains("taints"); }))
      << fake0();
  EXPECT_EQ(driver_->generation(), generation);
  EXPECT_EQ(driver_->sync_error(), "");
}

// An API server that does not know a field drops it from what it stores
// (an older Kubernetes, a feature gate off): said once, by path.
TEST_F(DraDriverTest, AFieldTheApiServerDropsIsNamed) {
  ASSERT_TRUE(client_->Create("/_fake/prune?key=attributes", Json::object()).ok());
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  ASSERT_TRUE(Eventually([&] { return !driver_->dropped_fields().empty(); }));
  EXPECT_EQ(driver_->dropped_fields(), std::vector<std::string>{"spec.devices[].attributes"});
  EXPECT_EQ(driver_->sync_error(), "");
}

// The kubelet deletes every slice of its node when it starts, then probes
// the plugins again: a confirmed registration writes them back, and so does
// the periodic re-list for a slice deleted at any other time (review D5). A
// re-list of an unchanged pool writes nothing.
// Where a kubelet runs, the first slices wait until it has registered the
// driver: it refuses to prepare a claim of a driver it does not know, so a
// pod sent on a slice written before would fail its first prepare.
TEST_F(DraDriverTest, TheFirstSlicesWaitForTheKubeletsRegistration) {
  await_registration_ = true;
  Start();
  ASSERT_TRUE(Eventually([&] { return !driver_->sync_error().empty(); }));
  EXPECT_EQ(driver_->sync_error(),
            "holding the slices until the kubelet registers driver dra.fake.example (it could "
            "not prepare a claim allocated from them)");
  inst_->RequestRescan();  // another list changes nothing
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(Devices(), -1);
  EXPECT_EQ(Requests("POST") + Requests("PUT"), 0);
  EXPECT_EQ(driver_->syncs(), 0u);

  driver_->KubeletRegistered();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  ASSERT_TRUE(Eventually([&] { return driver_->syncs() == 1; }));
  EXPECT_EQ(driver_->sync_error(), "");
  // Once registered, a change of the devices is written at once.
  WriteFile(dir_ / "count", "3");
  inst_->RequestRescan();
  ASSERT_TRUE(Eventually([&] { return Devices() == 3; }));
}

// After a move to DRA, the slices wait for the Node's allocatable of the
// name to read 0. A status the kubelet posted while the device plugin still
// served can bring it back after the hand-off set it to 0: the publisher
// sets it to 0 again and publishes, rather than wait for the kubelet's next
// post while the scheduler sends pods the device plugin can no longer take.
// Where the Node's status cannot be written, it waits for that post.
TEST_F(DraDriverTest, AHeldPublisherSetsTheAllocatableBackToZeroOrWaitsWhereItCannot) {
  HoldForAServedNode();
  auto allocatable = [&](const std::string& name) {
    auto n = client_->Get("/api/v1/nodes/node-1");
    return n.ok() ? (*n)["status"]["allocatable"].value(name, std::string("?")) : "?";
  };
  // Refused first: it waits, and says why.
  ASSERT_TRUE(
      client_->Create("/_fake/forbid?path=/api/v1/nodes/node-1/status", Json::object()).ok());
  Start();
  ASSERT_TRUE(Eventually([&] { return !driver_->sync_error().empty(); }));
  EXPECT_EQ(driver_->sync_error(),
            "holding the slices until node node-1's allocatable fake.example/dra reads 0 (it reads "
            "2; the device plugin API served it before)");
  std::this_thread::sleep_for(1200ms);  // the Node is looked at every second
  EXPECT_EQ(Devices(), -1);
  EXPECT_EQ(allocatable(hold_for_), "2");
  // The kubelet posts 0: published.
  ASSERT_TRUE(client_
                  ->Update("/api/v1/nodes/node-1",
                           [&](Json& n) {
                             n["status"]["allocatable"][hold_for_] = "0";
                             return OkStatus();
                           })
                  .ok());
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  EXPECT_EQ(driver_->sync_error(), "");
}

TEST_F(DraDriverTest, AHeldPublisherThatMayWriteTheNodeSetsItsAllocatableToZeroAndPublishes) {
  HoldForAServedNode();
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  auto n = client_->Get("/api/v1/nodes/node-1");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ((*n)["status"]["allocatable"][hold_for_], "0");
  EXPECT_EQ((*n)["status"]["allocatable"]["cpu"], "2");  // only the held name
  EXPECT_EQ(driver_->sync_error(), "");
}

TEST_F(DraDriverTest, SlicesWipedBehindItsBackAreWrittenAgain) {
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  ASSERT_TRUE(Eventually([&] { return driver_->syncs() == 1; }));
  WipeSlices();
  driver_->KubeletRegistered();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  ASSERT_TRUE(Eventually([&] { return driver_->syncs() == 2; }));

  const int writes = Requests("POST") + Requests("PUT") + Requests("DELETE");
  const int lists = Requests("GET");
  driver_->KubeletRegistered();
  ASSERT_TRUE(Eventually([&] { return driver_->syncs() == 3; }));
  EXPECT_GT(Requests("GET"), lists + 1);  // it listed (the count reads once itself)
  EXPECT_EQ(Requests("POST") + Requests("PUT") + Requests("DELETE"), writes);
  EXPECT_EQ(driver_->sync_error(), "");
}

TEST_F(DraDriverTest, APeriodicRelistWritesBackASliceDeletedAtAnyTime) {
  relist_ = 300ms;
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  WipeSlices();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  // Nothing changed since: the re-lists that follow write nothing.
  const int writes = Requests("POST") + Requests("PUT") + Requests("DELETE");
  const uint64_t syncs = driver_->syncs();
  ASSERT_TRUE(Eventually([&] { return driver_->syncs() >= syncs + 2; }));
  EXPECT_EQ(Requests("POST") + Requests("PUT") + Requests("DELETE"), writes);
}

// A field of the wrong type in a claim fails that claim, with the reason;
// the driver and the next claim go on (review D8: it aborted devplugd).
TEST_F(DraDriverTest, AClaimWithAFieldOfTheWrongTypeFailsThatClaimOnly) {
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  for (const Json& result :
       {Json{{"request", "r"}, {"driver", kDriver}, {"pool", 7}, {"device", "fake-0"}},
        Json{{"request", "r"}, {"driver", kDriver}, {"pool", "node-1"}, {"device", true}},
        Json("not an object")}) {
    Json claim = {{"metadata", {{"name", "bad"}, {"namespace", "default"}}},
                  {"status", {{"allocation", {{"devices", {{"results", {result}}}}}}}}};
    auto made = client_->Create(kClaims, claim);
    ASSERT_TRUE(made.ok()) << made.status().message();
    const ClaimRef c{"default", (*made)["metadata"]["uid"].get<std::string>(), "bad"};
    const PrepareResult r = Prepare(c);
    EXPECT_NE(r.error.find("claim default/bad is malformed"), std::string::npos) << r.error;
    EXPECT_TRUE(r.devices.empty());
    ASSERT_TRUE(client_->Delete(std::string(kClaims) + "/bad").ok());
  }
  const std::string uid = Claim(1, "fake-1");
  EXPECT_EQ(Prepare({"default", uid, "c1"}).error, "");
}

// Two claims never share a device: an adminAccess claim beside the
// workload's, or a second claim the scheduler should not have made, is
// refused before any module call, and the workload's device is released
// once, at its own unprepare (review D4: the monitor's unprepare scrubbed the
// workload's device).
TEST_F(DraDriverTest, TwoClaimsNeverShareADevice) {
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  const std::string workload = Claim(0, "fake-1");
  ASSERT_EQ(Prepare({"default", workload, "c0"}).error, "");

  const ClaimRef admin{"default", Claim("monitor", "fake-1", {{"adminAccess", true}}), "monitor"};
  const PrepareResult refused = Prepare(admin);
  EXPECT_NE(refused.error.find("asks adminAccess to device \"fake-1\""), std::string::npos)
      << refused.error;
  EXPECT_EQ(Unprepare(admin), "");  // never prepared: nothing to release

  const std::string second = Claim(1, "fake-1");
  const PrepareResult taken = Prepare({"default", second, "c1"});
  EXPECT_NE(taken.error.find("device \"fake-1\" is prepared for claim default/c0"),
            std::string::npos)
      << taken.error;
  EXPECT_EQ(Unprepare({"default", second, "c1"}), "");
  ASSERT_EQ(driver_->prepared().size(), 1u);
  EXPECT_EQ(ReadFile(dir_ / "release.log"), "");  // the workload's device is untouched

  ASSERT_EQ(Unprepare({"default", workload, "c0"}), "");
  const std::string log = ReadFile(dir_ / "release.log");
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
}

// A prepare that fails after the module set a device up (here the spec
// folder, where the device metadata goes first, cannot be written) releases
// it: the claim is never recorded, so no unprepare would (review D1).
TEST_F(DraDriverTest, APrepareThatFailsAfterTheModuleSetUpReleasesWhatItSetUp) {
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  WriteFile(dir_ / "cdi", "a file where the spec folder should be");
  const std::string uid = Claim(0, "fake-1");
  const PrepareResult r = Prepare({"default", uid, "c0"});
  EXPECT_NE(r.error.find("device metadata: cannot create " + (dir_ / "cdi")), std::string::npos)
      << r.error;
  EXPECT_TRUE(driver_->prepared().empty());
  EXPECT_FALSE(driver_->ClaimOf("fake-1").has_value());  // held by nobody after the failure
  // The release runs on the device's lane; the kubelet's unprepare (it
  // sends one for a claim whose prepare failed) waits for it.
  EXPECT_EQ(Unprepare({"default", uid, "c0"}), "");
  const std::string log = ReadFile(dir_ / "release.log");
  EXPECT_NE(log.find("release fake-1"), std::string::npos) << log;
  EXPECT_EQ(log.find("release fake-1"), log.rfind("release fake-1")) << log;  // once
  EXPECT_TRUE(driver_->releasing().empty());
}

// While on_release() runs for a claim's unprepare, that claim no longer
// holds its devices: a module's release asks pod_of() whether anyone still
// does (macvtap keeps a held link; on the real cluster it kept the one a
// released claim had made).
TEST_F(DraDriverTest, AClaimBeingReleasedHoldsItsDevicesNoMore) {
  module_config_ = "release_block = \"" + (dir_ / "block") + "\"\n";
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  const std::string uid = Claim(0, "fake-1");
  ASSERT_EQ(Prepare({"default", uid, "c0"}).error, "");
  ASSERT_TRUE(driver_->ClaimOf("fake-1").has_value());
  WriteFile(dir_ / "block", "");
  std::promise<std::map<std::string, std::string>> answer;
  driver_->Unprepare({{"default", uid, "c0"}}, std::chrono::steady_clock::now() + 45s,
                     [&](std::map<std::string, std::string> out) { answer.set_value(out); });
  ASSERT_TRUE(Eventually([&] {
    return ReadFile(dir_ / "release.log").find("releasing fake-1") != std::string::npos;
  }));
  EXPECT_FALSE(driver_->ClaimOf("fake-1").has_value());  // inside on_release()
  std::filesystem::remove(dir_ / "block");
  EXPECT_EQ(answer.get_future().get()[uid], "");
  EXPECT_FALSE(driver_->ClaimOf("fake-1").has_value());
}

TEST_F(DraDriverTest, ClaimsArePreparedAndUnpreparedWhileTheListChanges) {
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  std::atomic<bool> done{false};
  std::thread churn([&] {
    for (int i = 0; !done.load(); ++i) {
      WriteFile(dir_ / "count", i % 2 ? "2" : "3");
      inst_->RequestRescan();
      std::this_thread::sleep_for(2ms);
    }
  });
  for (int i = 0; i < 20; ++i) {
    const std::string uid = Claim(i, i % 2 ? "fake-1" : "fake-0");
    const ClaimRef c{"default", uid, "c" + std::to_string(i)};
    PrepareResult r = Prepare(c);
    ASSERT_EQ(r.error, "") << i;
    ASSERT_EQ(r.devices.size(), 1u);
    EXPECT_EQ(driver_->prepared().size(), 1u);
    ASSERT_EQ(Unprepare(c), "") << i;
    EXPECT_TRUE(driver_->prepared().empty());
  }
  done = true;
  churn.join();
  const std::string log = ReadFile(dir_ / "release.log");
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 20) << log;
  EXPECT_TRUE(cdi::OwnedFiles(dir_ / "cdi").empty());
}

TEST_F(DraDriverTest, ARestartRemembersItsClaimsAndWritesTheirSpecsAgain) {
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  const std::string uid = Claim(0, "fake-1");
  const ClaimRef c{"default", uid, "c0"};
  const PrepareResult r = Prepare(c);
  ASSERT_EQ(r.error, "");
  const std::vector<std::string> files = cdi::OwnedFiles(dir_ / "cdi");
  ASSERT_EQ(files.size(), 1u);
  const std::string spec = ReadFile(dir_ / ("cdi/" + files[0]));
  (void)inst_->Stop(5s);
  inst_.reset();
  ASSERT_TRUE(driver_->Stop(false));
  driver_.reset();
  std::filesystem::remove(dir_ / ("cdi/" + files[0]));  // a reboot empties tmpfs

  auto again = Driver::Make(Opts());
  ASSERT_TRUE(again.ok()) << again.status().message();
  driver_ = std::shared_ptr<Driver>(std::move(*again));
  EXPECT_EQ(ReadFile(dir_ / ("cdi/" + files[0])), spec);
  ASSERT_EQ(driver_->prepared().size(), 1u);
  EXPECT_EQ(driver_->prepared()[0].devices, r.devices);
  // Who holds the device, for the module's pod_of() (cex's start-up sweep
  // runs before any call): the remembered claim.
  ASSERT_TRUE(driver_->ClaimOf("fake-1").has_value());
  EXPECT_EQ(driver_->ClaimOf("fake-1")->name, "c0");
  EXPECT_EQ(driver_->ClaimOf("fake-1")->ns, "default");
  EXPECT_FALSE(driver_->ClaimOf("fake-0").has_value());
  // Asked again, it answers from the checkpoint without the module.
  const PrepareResult same = Prepare(c);
  EXPECT_EQ(same.error, "");
  EXPECT_EQ(same.devices, r.devices);
}

// A rolling update: two devplugd serve the node with one state folder.
// Each call takes its turn on the checkpoint's lock and reads the file
// again when the other one wrote it: the newer one refuses a device the
// older one prepared, and unprepares (releases) the older one's claim;
// a call that cannot have its turn by the kubelet's deadline fails.
TEST_F(DraDriverTest, TwoDriversOnOneStateFolderTakeTurnsAndSeeEachOthersClaims) {
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  const ClaimRef c0{"default", Claim(0, "fake-1"), "c0"};
  ASSERT_EQ(Prepare(c0).error, "");  // the older one

  auto made = Driver::Make(Opts());
  ASSERT_TRUE(made.ok()) << made.status().message();
  std::shared_ptr<Driver> newer(std::move(*made));
  modules::ModuleInstance::Options o;
  o.lists = newer;
  auto inst = modules::harness::OpenFile(
      devplug::testing::FakeModuleDir() + "/fake_release.so", "fake.example/dra", "/",
      "count_file = \"" + (dir_ / "count") + "\"\nrelease_log = \"" + (dir_ / "release.log") +
          "\"\n",
      0, o);
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  newer->SetInstance(inst->get());

  // A claim prepared by the older one after the newer one started.
  const ClaimRef c1{"default", Claim(1, "fake-0"), "c1"};
  ASSERT_EQ(Prepare(c1).error, "");
  const ClaimRef c2{"default", Claim(2, "fake-0"), "c2"};
  const PrepareResult taken = Prepare(c2, newer.get());
  EXPECT_NE(taken.error.find("device \"fake-0\" is prepared for claim default/c1"),
            std::string::npos)
      << taken.error;
  ASSERT_EQ(newer->prepared().size(), 2u);
  ASSERT_TRUE(newer->ClaimOf("fake-0").has_value());

  // The newer one unprepares what the older one prepared: released once.
  EXPECT_EQ(Unprepare(c1, newer.get()), "");
  EXPECT_EQ(Unprepare(c0, newer.get()), "");
  const std::string log = ReadFile(dir_ / "release.log");
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 2) << log;
  EXPECT_TRUE(newer->prepared().empty());
  EXPECT_TRUE(cdi::OwnedFiles(dir_ / "cdi").empty());
  // The older one, asked again, knows they are gone: its repeated
  // unprepare releases nothing more.
  EXPECT_EQ(Unprepare(c0), "");
  EXPECT_TRUE(driver_->prepared().empty());
  EXPECT_EQ(ReadFile(dir_ / "release.log"), log);

  // Busy past the kubelet's deadline: the call fails, nothing is set up.
  auto held = FileLock::Open(dir_ / "claims.json.lock");
  ASSERT_TRUE(held.ok()) << held.status().message();
  ASSERT_TRUE(held->Lock(std::chrono::steady_clock::now()).ok());
  const PrepareResult busy = Prepare(c2, newer.get(), 300ms);
  EXPECT_NE(busy.error.find("held " + (dir_ / "claims.json.lock")), std::string::npos)
      << busy.error;
  held->Unlock();
  EXPECT_EQ(Prepare(c2, newer.get()).error, "");
  EXPECT_EQ(driver_->prepared().size(), 0u);  // not asked since
  EXPECT_EQ(Prepare(c2).error, "");           // answered from the file the newer one wrote
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 2);

  (void)(*inst)->Stop(5s);
  newer->ClearInstance(inst->get());
  EXPECT_TRUE(newer->Stop(false));
}

// Superseded (a newer devplugd serves the driver beside this one), the
// publisher writes nothing; once the newer one is gone it lists the pool
// and writes what differs.
TEST_F(DraDriverTest, ASupersededDriverWritesNoSliceUntilTheNewerOneGoes) {
  Start();
  ASSERT_TRUE(Eventually([&] { return Devices() == 2; }));
  driver_->SetSuperseded(true);
  const int puts = Requests("PUT"), posts = Requests("POST");
  WriteFile(dir_ / "count", "3");
  inst_->RequestRescan();
  modules::harness::Settle(*inst_);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(Devices(), 2);
  EXPECT_EQ(Requests("PUT"), puts);
  EXPECT_EQ(Requests("POST"), posts);
  driver_->SetSuperseded(false);
  EXPECT_TRUE(Eventually([&] { return Devices() == 3; }));
}

TEST_F(DraDriverTest, ADamagedCheckpointIsRefusedNamingTheFile) {
  WriteFile(dir_ / "claims.json", "{\"version\": 1, \"claims\": []");
  auto d = Driver::Make(Opts());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(d.status().message().find(dir_ / "claims.json"), std::string::npos)
      << d.status().message();
}

}  // namespace
}  // namespace devplug::dra
