// Lane: one named thread and its queue. Orderings are forced with promises
// and latches, never timed; the one wake-up test checks a time only from
// below (a wake never comes early).
#include "modules/lane.h"

#include <pthread.h>

#include <atomic>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "util/sanitizers.h"

#if defined(DEVPLUG_ASAN)
#include <sanitizer/lsan_interface.h>
#define DEVPLUG_TEST_LEAK_ON_PURPOSE(p) __lsan_ignore_object(p)
#else
#define DEVPLUG_TEST_LEAK_ON_PURPOSE(p) ((void)(p))
#endif

namespace devplug::modules {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string ThreadName() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

TEST(LaneTest, RunsTasksInOrderOnOneNamedThread) {
  std::mutex mu;
  std::vector<std::string> seen;
  std::promise<void> started;
  Lane lane("dp:a-long-module-name", [&] { started.set_value(); }, {});
  lane.Start();
  started.get_future().wait();  // on_start ran first
  for (int i = 0; i < 50; ++i)
    lane.Post([&, i] {
      std::lock_guard lock(mu);
      seen.push_back(std::to_string(i) + "@" + ThreadName());
    });
  lane.RequestStop({});
  ASSERT_TRUE(lane.WaitStopped(Clock::now() + 60s));
  ASSERT_EQ(seen.size(), 50u);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(seen[i], std::to_string(i) + "@dp:a-long-modul");  // 15 characters
}

TEST(LaneTest, LastTaskRunsAfterWhatWasQueuedAndLaterPostsStillRun) {
  std::vector<int> order;  // written only on the lane
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  Lane lane("lane-test", {}, {});
  lane.Start();
  lane.Post([&] {
    open.wait();
    order.push_back(1);
  });
  lane.Post([&] { order.push_back(2); });
  lane.RequestStop([&] { order.push_back(99); });
  lane.RequestStop([&] { order.push_back(-1); });  // only the first counts
  // A caller that posted after the stop request still gets its answer.
  lane.Post([&] { order.push_back(3); });
  gate.set_value();
  ASSERT_TRUE(lane.WaitStopped(Clock::now() + 60s));
  EXPECT_EQ(order, (std::vector<int>{1, 2, 99, 3}));
  EXPECT_FALSE(lane.running());
}

TEST(LaneTest, WakeRunsOnceAtItsTimeUnlessCleared) {
  std::atomic<int> wakes{0};
  std::promise<Clock::time_point> woke;
  Lane* self = nullptr;
  Lane lane("lane-test", {}, [&] {
    if (wakes.fetch_add(1) == 0) woke.set_value(Clock::now());
  });
  self = &lane;
  lane.Start();
  const auto at = Clock::now() + 20ms;
  lane.Post([&] { self->WakeAt(at); });
  const Clock::time_point when = woke.get_future().get();
  EXPECT_GE(when, at);  // never early
  // A wake set and cleared before its time never runs: the lane then
  // idles well past that time (a wake left set would fire meanwhile).
  std::promise<void> cleared;
  lane.Post([&] {
    self->WakeAt(Clock::now() + 10ms);
    self->WakeAt(std::nullopt);
    cleared.set_value();
  });
  cleared.get_future().wait();
  std::this_thread::sleep_for(60ms);
  lane.RequestStop({});
  ASSERT_TRUE(lane.WaitStopped(Clock::now() + 60s));
  EXPECT_EQ(wakes.load(), 1);
  EXPECT_FALSE(lane.wake_at().has_value());
}

TEST(LaneTest, AThreadStuckPastTheDeadlineIsAbandoned) {
  // The lane is leaked with its thread, as ModuleInstance does with a
  // module stuck in a call; the test lets the thread go at the end.
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> go = release->get_future().share();
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  auto* lane = new Lane("lane-stuck", {}, {});
  DEVPLUG_TEST_LEAK_ON_PURPOSE(lane);  // its abandoned thread may use it to the end
  lane->Start();
  lane->Post([go] { go.wait(); });
  lane->RequestStop([done] { done->set_value(); });
  EXPECT_FALSE(lane->WaitStopped(Clock::now() + 10ms));
  EXPECT_FALSE(lane->running());  // detached: no longer the caller's to join
  release->set_value();
  finished.wait();  // the abandoned thread still runs its queue to the end
}

}  // namespace
}  // namespace devplug::modules
