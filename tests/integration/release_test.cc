// Pod identity and device release through the real devplugd and the
// simulator's PodResources API: a test module (fake_release) records every
// on_release() call, and tests bind allocated IDs to pods and delete pods as
// the kubelet would.
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

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
  std::string Agent(const std::string& settle = "1s") const {
    return "pod_resources_socket = \"" + sim_pod_resources_ +
           "\"\npod_resources_poll = \"200ms\"\nrelease_grace = \"500ms\"\nkubelet_settle = \"" +
           settle + "\"\nunseen_timeout = \"3s\"";
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
  // Allocate `id` for a container of pod ns/<pod>, as the kubelet does, and
  // record it in PodResources.
  void Give(const std::string& id, const std::string& pod) {
    v1beta1::ContainerAllocateResponse resp;
    ASSERT_TRUE(sim_->Allocate(kRel, {id}, &resp).ok());
    ASSERT_TRUE(sim_->PreStartContainer(kRel, {id}).ok());
    sim_->BindPod("ns", pod, "main", kRel, {id});
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
  ASSERT_TRUE(sim_->WaitUntil([](const auto&) { return true; }, 1s));
  std::this_thread::sleep_for(500ms);  // seen held in a List
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
  agent_ = std::make_unique<testing::AgentProcess>(std::vector<std::string>{"--config", config_path()});
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
  ASSERT_TRUE(agent_->WaitForLog("device fake-0 is Unhealthy (release failed: scrub failed)", kWait))
      << agent_->Log();
  ASSERT_TRUE(HealthyIs(kRel, 2, 1));
  std::remove(fail.c_str());
  ASSERT_TRUE(HealthyIs(kRel, 2, 2));
  EXPECT_EQ(Lines("release"), std::vector<std::string>{"release fake-0"});
}

}  // namespace
}  // namespace devplug
