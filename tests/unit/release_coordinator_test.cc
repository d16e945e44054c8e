// When PodResources Lists are sent and what their answers release, on a fake
// clock, with real release trackers.
#include "lifecycle/release_coordinator.h"

#include <memory>

#include <gtest/gtest.h>

namespace devplug::lifecycle {
namespace {

using namespace std::chrono_literals;
using Ids = std::vector<std::string>;

const Holder kPod{"ns", "pod-a", "main"};

Clock::time_point T(double seconds) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
}

ReleaseTiming Timing() {
  ReleaseTiming t;
  t.grace = 10s;
  t.settle = 60s;
  t.unseen = 120s;
  return t;
}

PodSnapshotPtr Snapshot(const std::string& resource, const Holders& holders, double at) {
  auto s = std::make_shared<PodSnapshot>();
  s->asked = s->taken = T(at);
  if (!holders.empty()) s->holders[resource] = holders;
  return s;
}

class ReleaseCoordinatorTest : public ::testing::Test {
 protected:
  ReleaseCoordinatorTest() : coord_(5s), gpu_(Timing()), fpga_(Timing()) {}

  // A List answered at `at` with `gpu` held for "gpu" and nothing for "fpga".
  std::vector<Ids> Answer(const Holders& gpu, double at) {
    EXPECT_TRUE(coord_.in_flight());
    return coord_.OnList(OkStatus(), Snapshot("gpu", gpu, at), Tracked(), T(at));
  }
  std::vector<ReleaseCoordinator::Tracked> Tracked() { return {{"gpu", &gpu_}, {"fpga", &fpga_}}; }

  ReleaseCoordinator coord_;
  ReleaseTracker gpu_, fpga_;
};

TEST_F(ReleaseCoordinatorTest, TheEarliestWishWinsAndOneListIsInFlight) {
  EXPECT_FALSE(coord_.NextDeadline());
  coord_.Schedule(T(0), false);
  EXPECT_EQ(coord_.NextDeadline(), T(5));
  coord_.Schedule(T(1), true);  // a first List is wanted at once
  EXPECT_EQ(coord_.NextDeadline(), T(1));
  coord_.Schedule(T(2), false);  // later wishes do not move it
  EXPECT_EQ(coord_.NextDeadline(), T(1));
  EXPECT_FALSE(coord_.TakeDue(T(0.5)));
  EXPECT_TRUE(coord_.TakeDue(T(1)));
  EXPECT_FALSE(coord_.NextDeadline());
  // Wanted again while one is in flight: sent once the answer is in.
  coord_.Schedule(T(1), true);
  EXPECT_FALSE(coord_.TakeDue(T(2)));
  Answer({}, 2);
  EXPECT_TRUE(coord_.TakeDue(T(2)));
}

TEST_F(ReleaseCoordinatorTest, NoPollMeansNoList) {
  ReleaseCoordinator off(0s);
  off.Schedule(T(0), true);
  EXPECT_FALSE(off.NextDeadline());
  EXPECT_FALSE(off.TakeDue(T(100)));
  // Switched off by a reload: a List that was due is forgotten.
  coord_.Schedule(T(0), true);
  coord_.SetPoll(0s);
  EXPECT_FALSE(coord_.NextDeadline());
}

TEST_F(ReleaseCoordinatorTest, AFailedListHoldsNothingAndIsAskedAgainWhileNeeded) {
  coord_.Schedule(T(0), true);
  ASSERT_TRUE(coord_.TakeDue(T(0)));
  // No List has worked yet: every tracker needs one.
  auto due = coord_.OnList(UnavailableError("connection refused"), nullptr, Tracked(), T(0));
  EXPECT_EQ(due, (std::vector<Ids>{{}, {}}));
  EXPECT_EQ(coord_.problem(), "connection refused");
  EXPECT_EQ(coord_.NextDeadline(), T(5));
  EXPECT_FALSE(gpu_.synced());
  ASSERT_TRUE(coord_.TakeDue(T(5)));
  Answer({}, 5);
  EXPECT_EQ(coord_.problem(), "");
  EXPECT_TRUE(gpu_.synced());
  EXPECT_TRUE(fpga_.synced());
  // Nothing held anywhere: a failure now asks for nothing more.
  coord_.Schedule(T(6), true);
  ASSERT_TRUE(coord_.TakeDue(T(6)));
  coord_.OnList(UnavailableError("timeout"), nullptr, Tracked(), T(6));
  EXPECT_FALSE(coord_.NextDeadline());
}

TEST_F(ReleaseCoordinatorTest, AnswersReachEachTrackerAndReleaseAfterGrace) {
  coord_.Schedule(T(0), true);
  ASSERT_TRUE(coord_.TakeDue(T(0)));
  Answer({}, 0);
  gpu_.OnAllocated({"gpu-0"}, T(1));
  // Handed out: nothing new for the kubelet, but the tracker needs Lists now.
  uint64_t published = gpu_.generation();
  EXPECT_FALSE(coord_.OnTrackerChanged(gpu_, published, T(1)));
  EXPECT_EQ(coord_.NextDeadline(), T(6));
  ASSERT_TRUE(coord_.TakeDue(T(6)));
  EXPECT_EQ(Answer({{"gpu-0", kPod}}, 6), (std::vector<Ids>{{}, {}}));
  EXPECT_EQ(gpu_.View("gpu-0")->holder, kPod);
  // The other resource's answer is its own.
  EXPECT_FALSE(fpga_.View("gpu-0") && fpga_.View("gpu-0")->holder);
  // The pod is gone: two Lists and the grace period later, it is released.
  for (double at : {11, 16}) {
    coord_.Schedule(T(at), true);
    ASSERT_TRUE(coord_.TakeDue(T(at)));
    EXPECT_EQ(Answer({}, at), (std::vector<Ids>{{}, {}})) << at;
  }
  coord_.Schedule(T(21), true);
  ASSERT_TRUE(coord_.TakeDue(T(21)));
  EXPECT_EQ(Answer({}, 21), (std::vector<Ids>{{"gpu-0"}, {}}));
  // Now "releasing": the kubelet must hear it, once.
  EXPECT_TRUE(coord_.OnTrackerChanged(gpu_, published, T(21)));
  EXPECT_FALSE(coord_.OnTrackerChanged(gpu_, published, T(21)));
}

TEST_F(ReleaseCoordinatorTest, AfterAKubeletRestartNothingIsReleasedUntilItSettles) {
  coord_.Schedule(T(0), true);
  ASSERT_TRUE(coord_.TakeDue(T(0)));
  Answer({}, 0);
  gpu_.OnAllocated({"gpu-0"}, T(1));
  coord_.Schedule(T(1), true);
  ASSERT_TRUE(coord_.TakeDue(T(1)));
  Answer({{"gpu-0", kPod}}, 1);
  coord_.OnKubeletRestart(T(2));
  // Its List misses the pod for a while after the restart.
  for (double at = 3; at < 62; at += 5) {
    coord_.Schedule(T(at), true);
    ASSERT_TRUE(coord_.TakeDue(T(at)));
    EXPECT_EQ(Answer({}, at), (std::vector<Ids>{{}, {}})) << at;
  }
  coord_.Schedule(T(63), true);
  ASSERT_TRUE(coord_.TakeDue(T(63)));
  EXPECT_EQ(Answer({}, 63), (std::vector<Ids>{{"gpu-0"}, {}}));
}

}  // namespace
}  // namespace devplug::lifecycle
