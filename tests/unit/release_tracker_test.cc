// The release state machine on a fake clock: every input carries the time.
#include "lifecycle/release_tracker.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace devplug::lifecycle {
namespace {

using namespace std::chrono_literals;
using State = ReleaseTracker::State;
using Listed = std::map<std::string, Holder, std::less<>>;
using Ids = std::vector<std::string>;

const Holder kPodA{"ns", "pod-a", "main"};
const Holder kPodB{"ns", "pod-b", "main"};

class ReleaseTrackerTest : public ::testing::Test {
 protected:
  ReleaseTrackerTest() : tracker_(Timing()) {}
  static ReleaseTiming Timing() {
    ReleaseTiming t;
    t.grace = 10s;
    t.settle = 60s;
    t.unseen = 120s;
    t.min_backoff = 1s;
    t.max_backoff = 8s;
    return t;
  }
  // A List at `at` seconds on the fake clock.
  Ids List(const Listed& listed, int at) {
    return tracker_.OnList(listed, Clock::time_point(std::chrono::seconds(at)), restart_);
  }
  Clock::time_point T(int at) const { return Clock::time_point(std::chrono::seconds(at)); }
  State StateOf(const std::string& id) const { return tracker_.View(id)->state; }

  ReleaseTracker tracker_;
  std::optional<Clock::time_point> restart_;
};

TEST_F(ReleaseTrackerTest, PodGoneIsReleasedOnceAfterGraceAndTwoLists) {
  List({}, 0);  // the first List: nothing held
  tracker_.OnAllocated({"dev-0"}, T(1));
  EXPECT_EQ(StateOf("dev-0"), State::kAssigned);
  EXPECT_TRUE(List({{"dev-0", kPodA}}, 5).empty());
  EXPECT_EQ(StateOf("dev-0"), State::kHeld);
  EXPECT_EQ(tracker_.View("dev-0")->holder, kPodA);
  // Gone from List: first absent List at 10 s; grace (10 s) and a second
  // List are both needed.
  EXPECT_TRUE(List({}, 10).empty());
  EXPECT_TRUE(List({}, 15).empty());  // 2 Lists, 5 s: grace not over
  EXPECT_EQ(List({}, 20), Ids{"dev-0"});
  EXPECT_EQ(StateOf("dev-0"), State::kReleasing);
  // Running: not asked twice.
  EXPECT_TRUE(List({}, 25).empty());
  tracker_.OnReleased({"dev-0"}, 0, "", T(26));
  EXPECT_EQ(StateOf("dev-0"), State::kFree);
  EXPECT_TRUE(List({}, 30).empty());
  EXPECT_FALSE(tracker_.NeedsList());
}

TEST_F(ReleaseTrackerTest, StillHeldMeansNothingHappens) {
  List({}, 0);
  tracker_.OnAllocated({"dev-0"}, T(1));
  for (int t = 5; t < 1000; t += 5) EXPECT_TRUE(List({{"dev-0", kPodA}}, t).empty()) << t;
  EXPECT_EQ(StateOf("dev-0"), State::kHeld);
  EXPECT_TRUE(tracker_.NeedsList());
}

TEST_F(ReleaseTrackerTest, OneListMissingIsNotEnough) {
  // A List that happens to miss the device (the kubelet lists lazily) is
  // followed by one that shows it again: no release.
  List({}, 0);
  tracker_.OnAllocated({"dev-0"}, T(1));
  List({{"dev-0", kPodA}}, 5);
  EXPECT_TRUE(List({}, 10).empty());
  EXPECT_TRUE(List({{"dev-0", kPodA}}, 30).empty());
  EXPECT_TRUE(List({}, 35).empty());
  EXPECT_TRUE(List({}, 40).empty());  // absent since 35: 5 s < grace
  EXPECT_EQ(List({}, 45), Ids{"dev-0"});
}

TEST_F(ReleaseTrackerTest, NothingIsReleasedWhileTheKubeletSettles) {
  List({}, 0);
  tracker_.OnAllocated({"dev-0"}, T(1));
  List({{"dev-0", kPodA}}, 5);
  restart_ = T(100);  // the kubelet restarted; its pod list may be incomplete
  for (int t = 100; t < 160; t += 5) EXPECT_TRUE(List({}, t).empty()) << t;
  EXPECT_EQ(List({}, 160), Ids{"dev-0"});
}

TEST_F(ReleaseTrackerTest, AnAllocationNeverSeenIsReleasedAfterUnseenTimeout) {
  List({}, 0);
  tracker_.OnAllocated({"dev-0"}, T(10));
  for (int t = 15; t < 130; t += 5) EXPECT_TRUE(List({}, t).empty()) << t;
  EXPECT_EQ(List({}, 130), Ids{"dev-0"});
}

TEST_F(ReleaseTrackerTest, TheFirstListIsTheTruthAfterOurOwnRestart) {
  // Nothing is known before it: listed devices are held, the rest free.
  EXPECT_TRUE(tracker_.NeedsList());
  EXPECT_FALSE(tracker_.synced());
  EXPECT_FALSE(tracker_.View("dev-0").has_value());
  EXPECT_TRUE(List({{"dev-1", kPodB}}, 0).empty());
  EXPECT_TRUE(tracker_.synced());
  EXPECT_EQ(StateOf("dev-1"), State::kHeld);
  EXPECT_EQ(StateOf("dev-0"), State::kFree);
  // dev-1's pod goes: released like any other.
  List({}, 10);
  EXPECT_EQ(List({}, 20), Ids{"dev-1"});
}

TEST_F(ReleaseTrackerTest, BusyIsAskedAgainAndFailureBacksOff) {
  List({}, 0);
  tracker_.OnAllocated({"dev-0"}, T(1));
  List({{"dev-0", kPodA}}, 5);
  List({}, 10);
  ASSERT_EQ(List({}, 20), Ids{"dev-0"});
  tracker_.OnReleased({"dev-0"}, -EAGAIN, "card busy", T(21));
  EXPECT_EQ(StateOf("dev-0"), State::kReleasing);
  ASSERT_EQ(List({}, 25), Ids{"dev-0"});  // the next List asks again
  tracker_.OnReleased({"dev-0"}, -EIO, "scrub failed", T(26));
  EXPECT_EQ(StateOf("dev-0"), State::kFailed);
  EXPECT_EQ(tracker_.View("dev-0")->error, "scrub failed");
  EXPECT_TRUE(List({}, 26).empty());  // backoff: 1 s
  ASSERT_EQ(List({}, 27), Ids{"dev-0"});
  tracker_.OnReleased({"dev-0"}, -EIO, "scrub failed", T(27));
  EXPECT_TRUE(List({}, 28).empty());  // backoff: 2 s
  ASSERT_EQ(List({}, 29), Ids{"dev-0"});
  tracker_.OnReleased({"dev-0"}, 0, "", T(30));
  EXPECT_EQ(StateOf("dev-0"), State::kFree);
}

TEST_F(ReleaseTrackerTest, ReleasingAndFailedDevicesAreShownUnhealthyYetAllocatable) {
  List({}, 0);
  tracker_.OnAllocated({"dev-0", "dev-1"}, T(1));
  List({{"dev-0", kPodA}, {"dev-1", kPodA}}, 5);
  List({}, 10);
  const uint64_t before = tracker_.generation();
  ASSERT_EQ(List({}, 20), (Ids{"dev-0", "dev-1"}));
  EXPECT_GT(tracker_.generation(), before);
  tracker_.OnReleased({"dev-1"}, -EIO, "power down failed", T(21));
  DeviceList list(3);
  list[0].id = "dev-0", list[1].id = "dev-1", list[2].id = "dev-2";
  for (auto& d : list) d.healthy = true;
  EXPECT_TRUE(tracker_.Apply(list));
  EXPECT_FALSE(list[0].healthy);
  EXPECT_TRUE(list[0].held_back);
  EXPECT_EQ(list[0].health_reason, "releasing");
  EXPECT_FALSE(list[1].healthy);
  EXPECT_EQ(list[1].health_reason, "release failed: power down failed");
  EXPECT_TRUE(list[2].healthy);
  EXPECT_FALSE(list[2].held_back);
}

TEST_F(ReleaseTrackerTest, ReuseBeforeReleaseRunsTheReleaseAtPreStart) {
  List({}, 0);
  tracker_.OnAllocated({"dev-0"}, T(1));
  List({{"dev-0", kPodA}}, 5);
  // The kubelet offers dev-0 to pod B while pod A's end is not seen yet.
  tracker_.OnAllocated({"dev-0", "dev-1"}, T(6));
  EXPECT_EQ(tracker_.ReleasesBeforeStart({"dev-0", "dev-1"}), Ids{"dev-0"});
  // A List meanwhile leaves it to PreStart.
  List({}, 10);
  EXPECT_TRUE(List({}, 30).empty());
  tracker_.OnReleasedBeforeStart({"dev-0"}, true, T(31));
  EXPECT_EQ(StateOf("dev-0"), State::kAssigned);  // pod B's now
  EXPECT_TRUE(tracker_.ReleasesBeforeStart({"dev-0"}).empty());
  EXPECT_TRUE(List({{"dev-0", kPodB}, {"dev-1", kPodB}}, 35).empty());
  EXPECT_EQ(tracker_.View("dev-0")->holder, kPodB);
}

TEST_F(ReleaseTrackerTest, AFailedReleaseAtPreStartIsTriedAtTheNextStart) {
  List({}, 0);
  tracker_.OnAllocated({"dev-0"}, T(1));
  List({{"dev-0", kPodA}}, 5);
  tracker_.OnAllocated({"dev-0"}, T(6));
  ASSERT_EQ(tracker_.ReleasesBeforeStart({"dev-0"}), Ids{"dev-0"});
  tracker_.OnReleasedBeforeStart({"dev-0"}, false, T(7));
  EXPECT_EQ(tracker_.ReleasesBeforeStart({"dev-0"}), Ids{"dev-0"});
}

TEST_F(ReleaseTrackerTest, AReleaseRunningWhenTheDeviceIsReusedCountsForTheNewPod) {
  List({}, 0);
  tracker_.OnAllocated({"dev-0"}, T(1));
  List({{"dev-0", kPodA}}, 5);
  List({}, 10);
  ASSERT_EQ(List({}, 20), Ids{"dev-0"});
  tracker_.OnAllocated({"dev-0"}, T(21));  // reused while releasing
  tracker_.OnReleased({"dev-0"}, 0, "", T(22));
  // Released once; it is the new pod's, and PreStart has nothing to do.
  EXPECT_EQ(StateOf("dev-0"), State::kAssigned);
  EXPECT_TRUE(tracker_.ReleasesBeforeStart({"dev-0"}).empty());
}

// A release started by a List still runs (in an instance a reload
// replaced) when PreStart comes for the device: PreStart waits for it rather
// than releasing a second time, and its success makes the device the new
// pod's; its failure leaves the release to PreStart.
TEST_F(ReleaseTrackerTest, PreStartWaitsForAReleaseRunningElsewhere) {
  List({}, 0);
  tracker_.OnAllocated({"dev-0", "dev-1"}, T(1));
  List({{"dev-0", kPodA}, {"dev-1", kPodA}}, 5);
  List({}, 10);
  ASSERT_EQ(List({}, 20), (Ids{"dev-0", "dev-1"}));  // running now
  tracker_.OnAllocated({"dev-0"}, T(21));
  bool wait = false;
  EXPECT_TRUE(tracker_.ReleasesBeforeStart({"dev-0"}, &wait).empty());
  EXPECT_TRUE(wait);
  tracker_.OnReleased({"dev-0"}, 0, "", T(22));
  EXPECT_TRUE(tracker_.ReleasesBeforeStart({"dev-0"}, &wait).empty());
  EXPECT_FALSE(wait);
  EXPECT_EQ(StateOf("dev-0"), State::kAssigned);
  // The same device again, and this time the running release fails.
  tracker_.OnAllocated({"dev-1"}, T(23));
  EXPECT_TRUE(tracker_.ReleasesBeforeStart({"dev-1"}, &wait).empty());
  EXPECT_TRUE(wait);
  tracker_.OnReleased({"dev-1"}, -EIO, "scrub failed", T(24));
  EXPECT_EQ(tracker_.ReleasesBeforeStart({"dev-1"}, &wait), Ids{"dev-1"});
  EXPECT_FALSE(wait);
}

// Switched off (pod_resources_poll "0s"), the tracker forgets every device,
// holds nothing back and needs no List; on again, the next List is the
// truth, as after an agent start.
TEST_F(ReleaseTrackerTest, OffForgetsEverythingAndOnStartsOver) {
  List({}, 0);
  tracker_.OnAllocated({"dev-0"}, T(1));
  List({{"dev-0", kPodA}}, 5);
  List({}, 10);
  ASSERT_EQ(List({}, 20), Ids{"dev-0"});
  tracker_.OnReleased({"dev-0"}, -EIO, "scrub failed", T(21));
  const uint64_t g = tracker_.generation();
  EXPECT_EQ(tracker_.SetEnabled(false), Ids{"dev-0"});
  EXPECT_GT(tracker_.generation(), g);  // what the kubelet is told changes
  DeviceList list(1);
  list[0].id = "dev-0";
  list[0].healthy = true;
  EXPECT_FALSE(tracker_.Apply(list));
  EXPECT_TRUE(list[0].healthy);
  EXPECT_FALSE(tracker_.NeedsList());
  tracker_.OnAllocated({"dev-1"}, T(30));
  EXPECT_TRUE(List({}, 40).empty());
  EXPECT_FALSE(tracker_.View("dev-1").has_value());

  EXPECT_TRUE(tracker_.SetEnabled(true).empty());
  EXPECT_TRUE(tracker_.NeedsList());
  EXPECT_FALSE(tracker_.synced());
  // The first List: dev-1 is held, and released when its pod goes.
  EXPECT_TRUE(List({{"dev-1", kPodB}}, 50).empty());
  EXPECT_EQ(StateOf("dev-1"), State::kHeld);
  List({}, 55);
  EXPECT_EQ(List({}, 70), Ids{"dev-1"});
}

}  // namespace
}  // namespace devplug::lifecycle
