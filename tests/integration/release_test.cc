// Pod identity and device release through the real devplugd and the
// simulator's PodResources API: a test module (fake_release) records every
// on_release() call, and tests bind allocated IDs to pods and delete pods as
// the kubelet would.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "agent_fixture.h"

namespace devplug {
namespace {

constexpr char kRel[] = "fake.example/release";

class ReleaseTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    sim_pod_resources_ = dir_ / "pod-resources/kubelet.sock";
  }

  // [agent] keys: fast polls for tests (real defaults: 5s, 10s, 60s, 120s).
  std::string Agent(const std::string& settle = "1s", const std::string& poll = "200ms") const {
    return "pod_resources_socket = \"" + sim_pod_resources_ + "\"\npod_resources_poll = \"" + poll +
           "\"\nrelease_grace = \"500ms\"\nkubelet_settle = \"" + settle +
           "\"\nunseen_timeout = \"3s\"";
  }
  void Rewrite(const std::string& resources, const std::string& agent) {
    WriteFile(config_path(), Config(resources, "0s", agent));
  }
  std::string Module(const std::string& extra = "") const {
    return Resource(kRel, FakeModule("fake_release"),
                    "count = 2\nrelease_log = \"" + log() + "\"\n" + extra);
  }
  std::string log() const { return dir_ / "release.log"; }
  std::vector<std::string> Lines(const std::string& prefix) const {
    std::vector<std::string> out;
    std::ifstream in(log());
    for (std::string line; std::getline(in, line);)
      if (line.rfind(prefix, 0) == 0) out.push_back(line);
    return out;
  }
  // Allocate `id` for a container of pod ns/<pod>, as the kubelet does: it
  // is listed in PodResources from Allocate on, then PreStartContainer.
  void Give(const std::string& id, const std::string& pod) {
    v1beta1::ContainerAllocateResponse resp;
    ASSERT_TRUE(sim_->Allocate(kRel, {id}, &resp).ok());
    sim_->BindPod("ns", pod, "main", kRel, {id});
    ASSERT_TRUE(sim_->PreStartContainer(kRel, {id}).ok());
  }
  // devplugd with `module`'s resource of `count` devices, whose release of
  // fake-0 (pod "a" deleted) runs and stays blocked while block() exists.
  void StartWithABlockedRelease(const std::string& module, const std::string& agent_extra = "",
                                int count = 2) {
    WriteFile(block(), "");
    StartSim();
    StartAgent(Resource(kRel, FakeModule(module),
                        "count = " + std::to_string(count) + "\nrelease_log = \"" + log() +
                            "\"\nrelease_block = \"" + block() + "\""),
               "0s", Agent() + agent_extra);
    ASSERT_TRUE(Registered(kRel));
    Give("fake-0", "a");
    sim_->DeletePod("ns", "a");
    ASSERT_TRUE(WaitLines("releasing fake-0", 1)) << agent_->Log();
  }
  std::string block() const { return dir_ / "block"; }
  // The blocked release of fake-0 ran all along; let go, it ends and all
  // `count` devices are Healthy again.
  void LetTheBlockedReleaseEnd(size_t count) {
    EXPECT_TRUE(Lines("release").empty()) << "the release was not running all along";
    std::remove(block().c_str());
    ASSERT_TRUE(WaitLines("release fake-0", 1));
    ASSERT_TRUE(HealthyIs(kRel, count, count));
  }
  bool WaitLines(const std::string& prefix, size_t n) {
    const auto end = std::chrono::steady_clock::now() + kWait;
    while (Lines(prefix).size() < n && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(20ms);
    return Lines(prefix).size() >= n;
  }
};

// The contract's whole story: a pod ends, its device turns Unhealthy
// ("releasing") while on_release() runs, is released exactly once, and is
// Healthy again.
TEST_F(ReleaseTest, PodDeletedIsReleasedOnceThenHealthyAgain) {
  const std::string busy = dir_ / "busy";
  StartSim();
  StartAgent(Module("release_busy = \"" + busy + "\""), "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  ASSERT_TRUE(HealthyIs(kRel, 2, 2));
  Give("fake-0", "a");
  WriteFile(busy, "");  // the card stays busy until the test lets it go
  sim_->DeletePod("ns", "a");
  ASSERT_TRUE(HealthyIs(kRel, 2, 1)) << "not shown Unhealthy while it releases";
  ASSERT_TRUE(agent_->WaitForLog("device fake-0 is Unhealthy (releasing)", kWait)) << agent_->Log();
  EXPECT_TRUE(Lines("release").empty());
  std::remove(busy.c_str());
  ASSERT_TRUE(HealthyIs(kRel, 2, 2));
  ASSERT_TRUE(WaitLines("release", 1));
  std::this_thread::sleep_for(1s);  // several more polls
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-0"});
  EXPECT_TRUE(agent_->WaitForLog("fake.example/release: device fake-0 is Healthy", kWait));
}

TEST_F(ReleaseTest, DevicesStillHeldAreLeftAlone) {
  StartSim();
  StartAgent(Module(), "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  Give("fake-1", "b");
  std::this_thread::sleep_for(3500ms);  // past grace and unseen_timeout, many polls
  EXPECT_TRUE(Lines("release").empty());
  EXPECT_TRUE(HealthyIs(kRel, 2, 2));
  EXPECT_GT(sim_->pod_resources_lists(), 5u);
}

// No release while the kubelet's pod list may be incomplete after its
// restart; once kubelet_settle has passed, the release runs.
TEST_F(ReleaseTest, NothingIsReleasedWhileARestartedKubeletSettles) {
  StartSim();
  StartAgent(Module(), "0s", Agent("3s"));
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  const auto restarted = std::chrono::steady_clock::now();
  ASSERT_TRUE(sim_->Restart(50ms).ok());
  ASSERT_TRUE(Registered(kRel, 2));
  sim_->DeletePod("ns", "a");
  std::this_thread::sleep_for(2s);
  EXPECT_TRUE(Lines("release").empty()) << "released inside kubelet_settle";
  ASSERT_TRUE(WaitLines("release", 1));
  EXPECT_GE(std::chrono::steady_clock::now() - restarted, 3s);
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-0"});
}

// The kubelet's one token bucket is shared by every agent on the node: a
// RESOURCE_EXHAUSTED answer backs the client off, never a tight loop.
TEST_F(ReleaseTest, RateLimitedListsBackOff) {
  sim_pod_resources_qps_ = 0.2;  // one token every 5 s
  sim_pod_resources_burst_ = 1;
  StartSim();
  StartAgent(Module(), "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");  // something to track: the agent polls every 200 ms
  std::this_thread::sleep_for(5s);
  const uint64_t asked = sim_->pod_resources_lists() + sim_->pod_resources_refused();
  // Without backing off: ~25 Lists in 5 s; with it (1, 2, 4 s apart): a few.
  EXPECT_LE(asked, 7u) << "answered " << sim_->pod_resources_lists() << ", refused "
                       << sim_->pod_resources_refused();
  EXPECT_GE(sim_->pod_resources_refused(), 1u);
  EXPECT_TRUE(agent_->WaitForLog("RESOURCE_EXHAUSTED: rejected by rate limit", kWait))
      << agent_->Log();
}

// Guarantee before reuse: the kubelet offers a device whose holder it has
// not let go of in our eyes; the release runs at PreStartContainer, before
// the new container starts, and Allocate never fails for it.
TEST_F(ReleaseTest, ADeviceReusedBeforeItsReleaseIsReleasedAtPreStart) {
  StartSim();
  StartAgent(Module(), "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  // Seen held in a List: several polls (200 ms apart) after the bind.
  const uint64_t lists = sim_->pod_resources_lists();
  ASSERT_TRUE(Eventually([&] { return sim_->pod_resources_lists() >= lists + 2; }));
  // Pod a's end is not visible yet; pod b gets fake-0.
  sim_->DeletePod("ns", "a");
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kRel, {"fake-0"}, &resp).ok());
  ASSERT_TRUE(sim_->PreStartContainer(kRel, {"fake-0"}).ok());
  // Done when PreStart returned, not later.
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-0"});
  sim_->BindPod("ns", "b", "main", kRel, {"fake-0"});
  // It is pod b's now: no second release while b holds it.
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(Lines("release").size(), 1u);
  EXPECT_TRUE(agent_->WaitForLog("(before a container start): done", kWait)) << agent_->Log();
}

// No module needs PodResources: no List is ever made.
TEST_F(ReleaseTest, NoListWithoutAModuleThatNeedsIt) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full")) +
                 Resource(kRel, FakeModule("fake_release"), "shared = true"),
             "0s", Agent());
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(Registered(kRel));
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kFull, {"fake-0"}, &resp).ok());
  ASSERT_TRUE(sim_->Allocate(kRel, {"fake-0"}, &resp).ok());
  ASSERT_TRUE(sim_->PreStartContainer(kRel, {"fake-0"}).ok());
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(sim_->pod_resources_lists() + sim_->pod_resources_refused(), 0u);
}

// After devplugd restarts, its first List is the truth: a device listed
// then is held, and released when its pod goes; others are free.
TEST_F(ReleaseTest, AfterAnAgentRestartTheFirstListIsTheTruth) {
  StartSim();
  StartAgent(Module(), "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  ASSERT_EQ(agent_->Stop(SIGTERM, kWait), std::optional<int>(0));
  agent_ =
      std::make_unique<testing::AgentProcess>(std::vector<std::string>{"--config", config_path()});
  ASSERT_TRUE(Registered(kRel, 2));
  std::this_thread::sleep_for(1s);  // its first List has been made
  EXPECT_TRUE(Lines("release").empty());
  sim_->DeletePod("ns", "a");
  ASSERT_TRUE(WaitLines("release", 1));
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-0"});
}

// A module asks who holds a device (host->pod_of), without the kubelet's
// checkpoint file.
TEST_F(ReleaseTest, AModuleLearnsWhichPodHoldsADevice) {
  StartSim();
  StartAgent(Module("log_holder = true"), "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kRel, {"fake-0"}, &resp).ok());
  sim_->BindPod("ns", "trainer-7", "worker", kRel, {"fake-0"});
  ASSERT_TRUE(sim_->PreStartContainer(kRel, {"fake-0", "fake-1"}).ok());
  EXPECT_EQ(Lines("holder"), (std::vector<std::string>{"holder fake-0 ns/trainer-7/worker",
                                                       "holder fake-1 none -2"}));
}

// pod_of never answers from a List sent before the device was handed out
// again: pod a's List, under a second old, still names a, while pod b
// holds the device now. No release tracking here, so no poll refreshes the
// List in between: only pod_of's own rule does.
TEST_F(ReleaseTest, PodOfNeverNamesThePreviousHolderFromAnOlderList) {
  StartSim();
  StartAgent(Module("log_holder = true\nshared = true"), "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  sim_->DeletePod("ns", "a");
  Give("fake-0", "b");
  EXPECT_EQ(Lines("holder"),
            (std::vector<std::string>{"holder fake-0 ns/a/main", "holder fake-0 ns/b/main"}));
}

// A kubelet before 1.34 lists a finished pod's devices until the pod is
// deleted: one ID under two pods names no holder (-ENOTUNIQ), rather than
// whichever pod the kubelet listed first.
TEST_F(ReleaseTest, PodOfOfADeviceListedUnderTwoPodsIsAmbiguous) {
  StartSim();
  StartAgent(Module("log_holder = true\nshared = true"), "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  // Pod a finished but is still listed; pod b gets fake-0.
  Give("fake-0", "b");
  EXPECT_EQ(Lines("holder"),
            (std::vector<std::string>{"holder fake-0 ns/a/main",
                                      "holder fake-0 none " + std::to_string(-ENOTUNIQ)}));
  // Once the kubelet drops pod a, the answer is b.
  sim_->DeletePod("ns", "a");
  ASSERT_TRUE(sim_->PreStartContainer(kRel, {"fake-0"}).ok());
  EXPECT_EQ(Lines("holder").back(), "holder fake-0 ns/b/main");
}

// `devplugctl simulate-kubelet --pod-resources` lists an allocation from
// Allocate on, as the kubelet does, so a module asking in PreStartContainer
// who holds the device finds the pod.
TEST_F(ReleaseTest, TheCliSimulatorListsThePodBeforePreStart) {
  StartAgent(Module("log_holder = true"), "0s", Agent());
  testing::RunResult r = testing::RunProcess(
      {testing::DevplugctlPath(), "simulate-kubelet", "--dir", plugin_dir(), "--pod-resources",
       sim_pod_resources_, "--allocate", "1", "--duration", "3"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PreStartContainer fake.example/release [fake-0]: OK"), std::string::npos)
      << r.output;
  EXPECT_EQ(Lines("holder"),
            std::vector<std::string>{"holder fake-0 devplug-sim/fake-example-release/main"});
}

// A release that fails leaves the device Unhealthy with the module's reason
// and is tried again with backoff until it works.
TEST_F(ReleaseTest, AFailedReleaseIsRetriedAndTheReasonShows) {
  const std::string fail = dir_ / "fail";
  StartSim();
  StartAgent(Module("release_fail = \"" + fail + "\""), "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  WriteFile(fail, "");
  sim_->DeletePod("ns", "a");
  ASSERT_TRUE(
      agent_->WaitForLog("device fake-0 is Unhealthy (release failed: scrub failed)", kWait))
      << agent_->Log();
  ASSERT_TRUE(HealthyIs(kRel, 2, 1));
  std::remove(fail.c_str());
  ASSERT_TRUE(HealthyIs(kRel, 2, 2));
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-0"});
}

// A reload that re-creates a tracked resource (any key changed) keeps every
// device's release state: a device whose release failed stays Unhealthy in
// the new instance and is released there once the cause is gone, exactly
// once.
TEST_F(ReleaseTest, AReloadKeepsAFailedReleaseAndReleasesItLater) {
  const std::string fail = dir_ / "fail";
  StartSim();
  StartAgent(Module("release_fail = \"" + fail + "\""), "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  WriteFile(fail, "");
  sim_->DeletePod("ns", "a");
  ASSERT_TRUE(
      agent_->WaitForLog("device fake-0 is Unhealthy (release failed: scrub failed)", kWait))
      << agent_->Log();
  Rewrite(Module("release_fail = \"" + fail + "\"\nnuma = 0"), Agent());
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(agent_->WaitForLog("changed: " + std::string(kRel), kWait)) << agent_->Log();
  ASSERT_TRUE(Registered(kRel, 2));
  ASSERT_TRUE(HealthyIs(kRel, 2, 1));
  std::this_thread::sleep_for(1s);  // the new instance's first Lists and scans
  ASSERT_TRUE(HealthyIs(kRel, 2, 1)) << "an unscrubbed device came back Healthy";
  EXPECT_TRUE(Lines("release").empty());
  std::remove(fail.c_str());
  ASSERT_TRUE(HealthyIs(kRel, 2, 2));
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-0"});
}

// A refused reload is inert. Staged here: the released resource changed
// (a new key), release tracking switched off and the grace re-timed, and a
// second resource whose module cannot be created, so the whole reload is
// refused. The running tracker must not have heard of any of it: the
// resources' status is the same before and after, the device whose scrub
// failed stays held back (another Allocate republishes the list), and no
// container gets it unscrubbed.
TEST_F(ReleaseTest, ARefusedReloadLeavesTheRunningTrackerAlone) {
  const std::string fail = dir_ / "fail";
  const std::string other = Resource(kFull, FakeModule("fake_full"), "count = 1");
  StartSim();
  StartAgent(Module("release_fail = \"" + fail + "\"") + other, "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  WriteFile(fail, "");
  sim_->DeletePod("ns", "a");
  ASSERT_TRUE(
      agent_->WaitForLog("device fake-0 is Unhealthy (release failed: scrub failed)", kWait))
      << agent_->Log();
  auto resources = [&] {
    auto answer = ops::ControlRequest(control_socket(), R"({"status": {"devices": true}})", 5s);
    EXPECT_TRUE(answer.ok()) << answer.status().message();
    return answer.ok() ? nlohmann::json::parse(*answer)["resources"] : nlohmann::json();
  };
  const nlohmann::json before = resources();
  ASSERT_EQ(before[0]["devices"][0]["release_state"], "release failed") << before.dump();

  Rewrite(Module("release_fail = \"" + fail + "\"\nrelease_delay_ms = 1") +
              Resource(kFull, FakeModule("fake_createfail")),
          Agent("1s", "0s"));
  ASSERT_FALSE(Reload()) << agent_->Log();
  EXPECT_EQ(resources(), before);
  EXPECT_FALSE(agent_->WaitForLog("release tracking is off", 0s)) << agent_->Log();

  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kRel, {"fake-1"}, &resp).ok());  // republishes the list
  sim_->BindPod("ns", "b", "main", kRel, {"fake-1"});         // held: no release of it
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(HealthyIs(kRel, 2, 1)) << "an unscrubbed device came back Healthy";
  EXPECT_EQ(resources()[0]["devices"][0]["release_state"], "release failed");
  // The running configuration still releases it once the scrub works.
  std::remove(fail.c_str());
  ASSERT_TRUE(HealthyIs(kRel, 2, 2));
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-0"});
}

// The second form: a refused reload that set a one-hour release_grace must
// not re-time the running tracker (grace 500 ms).
TEST_F(ReleaseTest, ARefusedReloadKeepsTheRunningReleaseTiming) {
  StartSim();
  StartAgent(Module() + Resource(kFull, FakeModule("fake_full"), "count = 1"), "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  std::string slow = Agent();
  slow.replace(slow.find("release_grace = \"500ms\""), 24, "release_grace = \"1h\"");
  Rewrite(Module("release_delay_ms = 1") + Resource(kFull, FakeModule("fake_createfail")), slow);
  ASSERT_FALSE(Reload()) << agent_->Log();
  sim_->DeletePod("ns", "a");
  EXPECT_TRUE(WaitLines("release", 1)) << "the refused 1 h grace took effect\n" << agent_->Log();
}

// A release still running in the instance a reload replaces: the new
// instance holds the device back until it is done, and a pod that gets the
// device meanwhile starts only after it, with no second release.
TEST_F(ReleaseTest, AReleaseRunningAcrossAReloadIsWaitedForNotRepeated) {
  StartSim();
  StartAgent(Module("release_delay_ms = 4000"), "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  sim_->DeletePod("ns", "a");
  ASSERT_TRUE(WaitLines("releasing fake-0", 1));
  Rewrite(Module("release_delay_ms = 4000\nnuma = 0"), Agent());
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(Registered(kRel, 2));
  // Held back in the new instance's list while the old one releases.
  EXPECT_TRUE(Lines("release fake-0").empty());
  ASSERT_TRUE(HealthyIs(kRel, 2, 1));
  // The kubelet offers it anyway (it saw the old list): PreStart waits for
  // the release running in the old instance.
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kRel, {"fake-0"}, &resp).ok());
  ASSERT_TRUE(sim_->PreStartContainer(kRel, {"fake-0"}).ok());
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-0"});
  EXPECT_EQ(Lines("releasing"), std::vector<std::string>{"releasing fake-0"});
  EXPECT_TRUE(agent_->WaitForLog("PreStartContainer [fake-0]: OK", kWait)) << agent_->Log();
  sim_->BindPod("ns", "b", "main", kRel, {"fake-0"});
  ASSERT_TRUE(HealthyIs(kRel, 2, 2));
  std::this_thread::sleep_for(1500ms);  // pod b holds it: no release
  EXPECT_EQ(Lines("release").size(), 1u);
  EXPECT_EQ(Lines("releasing").size(), 1u);
}

// pod_resources_poll turned off by a reload: tracking stops, and a device
// held back by a failed release is offered again (the operator chose not to
// scrub); turned on again, the next List is the truth and releases resume.
TEST_F(ReleaseTest, PodResourcesPollOffAndOnByReload) {
  const std::string fail = dir_ / "fail";
  const std::string module = Module("release_fail = \"" + fail + "\"");
  StartSim();
  StartAgent(module, "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  WriteFile(fail, "");
  sim_->DeletePod("ns", "a");
  ASSERT_TRUE(HealthyIs(kRel, 2, 1));
  Rewrite(module, Agent("1s", "0s"));
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(HealthyIs(kRel, 2, 2)) << "still held back with tracking off";
  EXPECT_TRUE(
      agent_->WaitForLog("release tracking is off (pod_resources_poll = \"0s\"); "
                         "not released: fake-0",
                         kWait))
      << agent_->Log();
  EXPECT_EQ(sim_->resource(kRel)->registrations, 1u) << "an unchanged resource was restarted";

  // On again for the running instance: its first List goes out at once
  // (no Allocate needed to ask for it); fake-1 goes to pod b, b ends, and
  // fake-1 is released.
  std::remove(fail.c_str());
  // Older than the PodResources client's cache (half a poll period): the
  // List asked for now reaches the kubelet.
  std::this_thread::sleep_for(300ms);
  const uint64_t before = sim_->pod_resources_lists();
  Rewrite(module, Agent());
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(agent_->WaitForLog("tracking device releases through", kWait));
  ASSERT_TRUE(Eventually([&] { return sim_->pod_resources_lists() > before; }))
      << "tracking turned on by a reload sends no List of its own";
  Give("fake-1", "b");
  const uint64_t lists = sim_->pod_resources_lists();
  ASSERT_TRUE(Eventually([&] { return sim_->pod_resources_lists() >= lists + 2; }));
  sim_->DeletePod("ns", "b");
  ASSERT_TRUE(WaitLines("release", 1)) << agent_->Log();
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-1"});
  EXPECT_EQ(sim_->resource(kRel)->registrations, 1u);
}

// A resource added by a reload that also changes the [agent] keys runs
// under the new keys: tracking on (the old configuration had it off) with
// the new timings.
TEST_F(ReleaseTest, AResourceAddedByAReloadTracksUnderTheNewAgentKeys) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count = 1"), "0s", Agent("1s", "0s"));
  ASSERT_TRUE(Registered(kFull));
  Rewrite(Resource(kFull, FakeModule("fake_full"), "count = 1") + Module(), Agent());
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  const uint64_t lists = sim_->pod_resources_lists();
  ASSERT_TRUE(Eventually([&] { return sim_->pod_resources_lists() >= lists + 2; }));
  sim_->DeletePod("ns", "a");
  ASSERT_TRUE(WaitLines("release", 1)) << agent_->Log();
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-0"});
}

// A resource a reload adds lists once at the commit, like at start: a device
// a pod held already (the resource was there before, say) is known as held,
// and released when that pod goes, without any Allocate to prompt a List.
TEST_F(ReleaseTest, AResourceAddedByAReloadListsAtOnce) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count = 1"), "0s", Agent());
  ASSERT_TRUE(Registered(kFull));
  sim_->BindPod("ns", "a", "main", kRel, {"fake-0"});
  Rewrite(Resource(kFull, FakeModule("fake_full"), "count = 1") + Module(), Agent());
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(Registered(kRel));
  ASSERT_TRUE(Eventually([&] { return sim_->pod_resources_lists() >= 1; })) << agent_->Log();
  sim_->DeletePod("ns", "a");
  ASSERT_TRUE(WaitLines("release", 1)) << agent_->Log();
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-0"});
}

// A module that runs its releases apart (ABI 1.7, DEVPLUG_CONCURRENT_SLOW_CALLS):
// while one device's release runs for as long as it likes (blocked here
// until the test lets it go), Allocate and GetPreferredAllocation of other
// devices are answered, well within a call_timeout of 2 s that a queued call
// would run into, and the kubelet never fails those pods' admission.
TEST_F(ReleaseTest, AllocateIsAnsweredWhileAReleaseRunsApart) {
  StartWithABlockedRelease("fake_release_apart", "\ncall_timeout = \"2s\"", 3);
  if (HasFatalFailure()) return;
  for (int i = 0; i < 3; ++i) {
    v1beta1::ContainerAllocateResponse resp;
    grpc::Status st = sim_->Allocate(kRel, {"fake-1"}, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    std::vector<std::string> preferred;
    st = sim_->GetPreferredAllocation(kRel, {"fake-1", "fake-2"}, {}, 1, &preferred);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  LetTheBlockedReleaseEnd(3);
}

// What the agent holds back reaches the kubelet at once, even while the
// module is busy in a long call: the device turns "Unhealthy (releasing)"
// before a slow allocate() of another device returns.
TEST_F(ReleaseTest, ReleasingIsPublishedWhileTheModuleIsBusy) {
  StartSim();
  StartAgent(Resource(kRel, FakeModule("fake_release_apart"),
                      "count = 2\nrelease_log = \"" + log() + "\"\nrelease_delay_ms = 2000"),
             "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  const uint64_t lists = sim_->pod_resources_lists();
  ASSERT_TRUE(Eventually([&] { return sim_->pod_resources_lists() >= lists + 2; }));
  // A reload makes allocate() slow for the next call: 8 s.
  WriteFile(config_path(),
            Config(Resource(kRel, FakeModule("fake_release_apart"),
                            "count = 2\nrelease_log = \"" + log() +
                                "\"\nrelease_delay_ms = 2000\nallocate_delay_ms = 8000"),
                   "0s", Agent()));
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(Registered(kRel, 2));
  std::atomic<bool> answered{false};
  std::thread slow([&] {
    v1beta1::ContainerAllocateResponse resp;
    (void)sim_->Allocate(kRel, {"fake-1"}, &resp);
    answered = true;
  });
  ASSERT_TRUE(agent_->WaitForLog("allocate() sleeps now", kWait));
  sim_->DeletePod("ns", "a");
  EXPECT_TRUE(HealthyIs(kRel, 2, 1));
  EXPECT_FALSE(answered.load()) << "shown Unhealthy only after the module's call ended";
  slow.join();
}

// SIGTERM while a release is stuck in the module (start_timeout 30 s, the
// default): the sockets go at once, the module gets 5 s, and devplugd exits
// well inside a pod's 30 s grace period.
TEST_F(ReleaseTest, SigtermWithAStuckReleaseExitsInsideTheGracePeriod) {
  StartWithABlockedRelease("fake_release_apart");
  if (HasFatalFailure()) return;
  // 15 s: three times the stop deadline, half the old 30 s wait.
  EXPECT_EQ(agent_->Stop(SIGTERM, 15s), std::optional<int>(0)) << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog("did not stop within 5000 ms; abandoning it", 0s))
      << agent_->Log();
  std::remove(block().c_str());
}

// One device's long release never makes an unrelated device's PreStart
// time out: a module with per-device lanes (ABI 1.8) runs the PreStart of
// fake-1 beside the blocked release of fake-0, well within a 4 s
// prestart_timeout. (The review's reproduction: with one lane it failed
// with DEADLINE_EXCEEDED after 4 s.)
TEST_F(ReleaseTest, APreStartNeverWaitsBehindAnotherDevicesRelease) {
  StartWithABlockedRelease("fake_release_lanes", "\nprestart_timeout = \"4s\"");
  if (HasFatalFailure()) return;
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kRel, {"fake-1"}, &resp).ok());
  sim_->BindPod("ns", "b", "main", kRel, {"fake-1"});
  grpc::Status st = sim_->PreStartContainer(kRel, {"fake-1"});
  EXPECT_TRUE(st.ok()) << st.error_message();
  LetTheBlockedReleaseEnd(2);
}

// The same device's work stays in order: a PreStart of fake-0 while its
// release runs waits for that release (and runs no second one).
TEST_F(ReleaseTest, APreStartWaitsForItsOwnDevicesRelease) {
  StartSim();
  StartAgent(Resource(kRel, FakeModule("fake_release_lanes"),
                      "count = 2\nrelease_log = \"" + log() + "\"\nrelease_delay_ms = 1500"),
             "0s", Agent());
  ASSERT_TRUE(Registered(kRel));
  Give("fake-0", "a");
  sim_->DeletePod("ns", "a");
  ASSERT_TRUE(WaitLines("releasing fake-0", 1)) << agent_->Log();
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kRel, {"fake-0"}, &resp).ok());
  sim_->BindPod("ns", "b", "main", kRel, {"fake-0"});
  grpc::Status st = sim_->PreStartContainer(kRel, {"fake-0"});
  EXPECT_TRUE(st.ok()) << st.error_message();
  // The release had ended before the new container started.
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-0"});
}

// A module that allows one slow call at a time (max_slow_calls = 1): the
// PreStart of fake-1 queues behind the release of fake-0 for about 3 s,
// longer than its 2 s prestart_timeout, and still succeeds: time spent
// waiting behind another device's work does not count against it.
TEST_F(ReleaseTest, TimeQueuedBehindOtherDevicesIsNotCountedAgainstPreStart) {
  StartWithABlockedRelease("fake_release_onelane", "\nprestart_timeout = \"2s\"");
  if (HasFatalFailure()) return;
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kRel, {"fake-1"}, &resp).ok());
  // Listed as the kubelet lists it (else unseen_timeout, 3 s, would
  // release it while its PreStart waits).
  sim_->BindPod("ns", "b", "main", kRel, {"fake-1"});
  std::thread unblock([&] {
    std::this_thread::sleep_for(3s);
    std::remove(block().c_str());
  });
  grpc::Status st = sim_->PreStartContainer(kRel, {"fake-1"});
  unblock.join();
  EXPECT_TRUE(st.ok()) << st.error_message() << "\n" << agent_->Log();
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-0"});
}

}  // namespace
}  // namespace devplug
