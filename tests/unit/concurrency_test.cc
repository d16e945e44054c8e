// Threads hammering the agent's own concurrent pieces, for ThreadSanitizer
// (scripts/test runs these in a TSan build) as much as for the asserts.
#include <atomic>
#include <future>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "fake_hooks.h"
#include "modules/loaded_module.h"
#include "modules/module_instance.h"
#include "test_util.h"
#include "util/timers.h"

namespace devplug {
namespace {

using namespace std::chrono_literals;

TEST(TimersTest, FiresInOrderAndCancelledOnesNever) {
  Timers timers;
  std::mutex mu;
  std::vector<int> fired;
  std::promise<void> last;
  const auto now = Timers::Clock::now();
  timers.Schedule(now + 30ms, [&] {
    std::lock_guard l(mu);
    fired.push_back(3);
    last.set_value();
  });
  timers.Schedule(now + 10ms, [&] {
    std::lock_guard l(mu);
    fired.push_back(1);
  });
  const uint64_t cancelled = timers.Schedule(now + 20ms, [&] {
    std::lock_guard l(mu);
    fired.push_back(2);
  });
  timers.Cancel(cancelled);
  last.get_future().get();
  std::lock_guard l(mu);
  EXPECT_EQ(fired, (std::vector<int>{1, 3}));
  EXPECT_EQ(timers.pending(), 0u);
}

TEST(TimersTest, ConcurrentScheduleAndCancel) {
  Timers timers;
  std::atomic<int> fired{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        const uint64_t id = timers.Schedule(
            Timers::Clock::now() + std::chrono::microseconds(i % 50), [&] { ++fired; });
        if (i % 2) timers.Cancel(id);
      }
    });
  }
  for (auto& t : threads) t.join();
  while (timers.pending() > 0) std::this_thread::sleep_for(1ms);
  // The 1000 never cancelled all fire; a cancelled one fires only if it
  // was already due before Cancel ran.
  EXPECT_GE(fired.load(), 1000);
  EXPECT_LE(fired.load(), 2000);
}

TEST(ModuleInstanceConcurrencyTest, RescansEventsAndCallsFromManyThreads) {
  auto m = modules::LoadedModule::Load(testing::FakeModuleDir() + "/fake_full.so");
  ASSERT_TRUE(m.ok());
  auto cfg = config::LoadString(
      "[[resource]]\nname = \"fake.example/full\"\nmodule = \"fake\"\ncount = 16\n", "t", {});
  std::atomic<int> changes{0};
  modules::ModuleInstance::Options o;
  o.lists = testing::ListsTo([&](DeviceListPtr) { ++changes; });
  auto inst = modules::ModuleInstance::Create(*m, cfg->resources[0], std::move(o));
  ASSERT_TRUE(inst.ok());
  // Every call gets exactly one answer: a result, or UNAVAILABLE when more
  // than kMaxQueuedCalls wait for the worker.
  std::atomic<int> answers{0}, refused{0};
  auto count = [&](const Status& st) {
    ++answers;
    if (st.code() == StatusCode::kUnavailable)
      ++refused;
    else
      EXPECT_TRUE(st.ok()) << st.message();
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        switch ((t + i) % 4) {
          case 0:
            (*inst)->RequestRescan();
            break;
          case 1: {
            udev::Event e;
            e.action = "change";
            e.subsystem = "misc";
            (*inst)->OnUdevEvents({e});
            break;
          }
          case 2:
            (*inst)->Allocate({"fake-" + std::to_string(i % 16)},
                              [&](StatusOr<Recipe> r) { count(r.status()); });
            break;
          default:
            (*inst)->PreferredAllocation(
                {"fake-1", "fake-2"}, {}, 1,
                [&](StatusOr<std::vector<std::string>> r) { count(r.status()); });
        }
        (void)(*inst)->devices()->size();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE((*inst)->Stop(10s));
  EXPECT_EQ(answers.load(), 400);  // every call answered before the worker stopped
  EXPECT_LT(refused.load(), 400 - modules::ModuleInstance::kMaxQueuedCalls + 1);
  EXPECT_EQ(changes.load(), 1);  // the list never changed after the first scan
}

}  // namespace
}  // namespace devplug

namespace devplug {
namespace {

using namespace std::chrono_literals;

// Seen in review: calls queued behind a hung module grew without bound, and
// calls already answered by their timeout still ran the module later.
TEST(ModuleInstanceConcurrencyTest, CallsBehindABusyModuleAreBoundedAndSkippedOnceAnswered) {
  auto m = modules::LoadedModule::Load(testing::FakeModuleDir() + "/fake_full.so");
  ASSERT_TRUE(m.ok());
  auto cfg = config::LoadString(
      "[[resource]]\nname = \"fake.example/full\"\nmodule = \"fake\"\nallocate_delay_ms = 300\n",
      "t", {});
  auto inst = modules::ModuleInstance::Create(*m, cfg->resources[0], {});
  ASSERT_TRUE(inst.ok());
  std::atomic<int> ran{0};
  // Keeps the worker in allocate() for 300 ms.
  (*inst)->Allocate({"fake-0"}, [&](StatusOr<Recipe>) { ++ran; });
  // Calls nobody waits for by their turn (their timeout answered them), one
  // more than the queue holds. Such a call's `done` runs only when it is
  // refused, and then at once, on this thread.
  std::vector<Status> refused;
  for (int i = 0; i <= modules::ModuleInstance::kMaxQueuedCalls; ++i)
    (*inst)->Allocate(
        {"fake-1"}, [&](StatusOr<Recipe> r) { refused.push_back(r.status()); },
        [] { return false; });
  // One refused, or two if the first call had not left the queue yet.
  ASSERT_GE(refused.size(), 1u);
  ASSERT_LE(refused.size(), 2u);
  EXPECT_EQ(refused[0].code(), StatusCode::kUnavailable) << refused[0].message();
  EXPECT_NE(refused[0].message().find("the module is busy (64 calls already wait for it)"),
            std::string::npos)
      << refused[0].message();
  // The skipped calls never reach the module: the queue drains after the
  // one 300 ms call, not after 64 of them (19 s).
  EXPECT_TRUE((*inst)->Stop(10s)) << "the module ran the calls nobody waited for";
  EXPECT_EQ(ran.load(), 1);
}

}  // namespace
}  // namespace devplug
