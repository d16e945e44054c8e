// modules::ModuleCall and CallDeadline: the deadline rule both front ends
// use. Each test's module thread is the test's own, so the order of
// events is set by the test, not by timing.
#include "modules/module_call.h"

#include <thread>

#include <gtest/gtest.h>

namespace devplug::modules {
namespace {

using namespace std::chrono_literals;
using Clock = CallDeadline::Clock;

TEST(ModuleCallTest, AnAnswerBeforeTheDeadlineIsTheAnswer) {
  std::vector<std::optional<int>> late;
  ModuleCall<int> call(10s, 10s, [&](std::optional<int> v) { late.push_back(v); });
  ASSERT_TRUE(call.Wanted()());
  call.Callback()(7);
  EXPECT_EQ(call.Wait(), std::optional<int>(7));
  EXPECT_FALSE(call.Wanted()());  // decided
  EXPECT_TRUE(late.empty());
}

TEST(ModuleCallTest, ACallNotStartedByItsDeadlineNeverStartsAndSaysSo) {
  std::vector<std::optional<int>> late;
  ModuleCall<int> call(20ms, 20ms, [&](std::optional<int> v) { late.push_back(v); });
  EXPECT_EQ(call.Wait(), std::nullopt);
  // The module's thread asks before it runs the call: no.
  EXPECT_FALSE(call.Wanted()());
  EXPECT_FALSE(call.Wanted()());  // asked again: still no, told once
  ASSERT_EQ(late.size(), 1U);
  EXPECT_EQ(late[0], std::nullopt);
}

TEST(ModuleCallTest, AnAnswerAfterTheDeadlineGoesToLate) {
  std::vector<std::optional<int>> late;
  ModuleCall<int> call(20ms, 20ms, [&](std::optional<int> v) { late.push_back(v); });
  ASSERT_TRUE(call.Wanted()());  // the module started in time
  EXPECT_EQ(call.Wait(), std::nullopt);
  call.Callback()(3);
  ASSERT_EQ(late.size(), 1U);
  EXPECT_EQ(late[0], std::optional<int>(3));
}

TEST(ModuleCallTest, TheWaitEndsAtTheCallersLimitBeforeTheDeadline) {
  ModuleCall<int> call(10s, 10s);
  const auto t0 = Clock::now();
  EXPECT_EQ(call.Wait(t0 + 30ms), std::nullopt);
  EXPECT_LT(Clock::now() - t0, 5s);
  EXPECT_FALSE(call.Wanted()());
}

TEST(ModuleCallTest, AnAnswerFromAnotherThreadWakesTheWait) {
  ModuleCall<int> call(30s, 30s);
  std::thread module([cb = call.Callback(), wanted = call.Wanted()] {
    if (wanted()) cb(42);
  });
  EXPECT_EQ(call.Wait(), std::optional<int>(42));
  module.join();
}

TEST(CallDeadlineTest, TimeQueuedBehindOtherDevicesMovesTheDeadlineUpToTheCap) {
  const auto start = Clock::now();
  CallDeadline d(100ms, 100ms, start);
  EXPECT_EQ(d.Due(start), start + 100ms);
  // Without a lane wait the cap changes nothing until time is not counted.
  d.NotCounting(nullptr, 250ms);
  EXPECT_EQ(d.Due(start + 50ms), start + 100ms);
  EXPECT_TRUE(d.Decide());
  EXPECT_FALSE(d.Decide());
  EXPECT_FALSE(d.wanted());
  EXPECT_EQ(d.TimeoutMessage("allocate(a)", 40ms),
            "allocate(a): the module did not answer within 100 ms (not counting 40 ms queued "
            "behind other devices' work)");
}

}  // namespace
}  // namespace devplug::modules
