// DeviceLanes: slow module calls per device. Tasks are held on latches the
// test opens, so every ordering below is forced, never timed.
#include "modules/device_lanes.h"

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace devplug::modules {
namespace {

using namespace std::chrono_literals;

// A gate a task waits at until the test opens it.
class Gate {
 public:
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }
  void Open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

class Log {
 public:
  void Add(const std::string& s) {
    std::lock_guard lock(mu_);
    lines_.push_back(s);
  }
  std::vector<std::string> lines() {
    std::lock_guard lock(mu_);
    return lines_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

// Waits (bounded) until `f` holds.
template <class F>
bool Soon(F f) {
  for (int i = 0; i < 2000 && !f(); ++i) std::this_thread::sleep_for(5ms);
  return f();
}

// Each test declares its lanes after what their tasks use: the lanes'
// threads end (the destructor joins them) before any of it goes. A thread
// still returning from hold.Wait() after Open() read a destroyed Gate when
// it came first (clang's AddressSanitizer: stack-use-after-scope).
TEST(DeviceLanesTest, DisjointDevicesRunTogether) {
  Gate hold;
  std::promise<void> a_running, b_running;
  DeviceLanes lanes("dp+test", 4);
  lanes.Post({"a"}, [&] {
    a_running.set_value();
    hold.Wait();
  });
  lanes.Post({"b"}, [&] {
    b_running.set_value();
    hold.Wait();
  });
  // Both run while the other is still held: never one after the other.
  EXPECT_EQ(a_running.get_future().wait_for(20s), std::future_status::ready);
  EXPECT_EQ(b_running.get_future().wait_for(20s), std::future_status::ready);
  EXPECT_EQ(lanes.threads(), 2u);
  hold.Open();
}

TEST(DeviceLanesTest, ACommonDeviceKeepsPostingOrder) {
  Gate first;
  Log log;
  std::promise<void> c_done;
  DeviceLanes lanes("dp+test", 4);
  lanes.Post({"a"}, [&] {
    first.Wait();
    log.Add("release a");
  });
  lanes.Post({"a", "b"}, [&] { log.Add("prestart a,b"); });
  lanes.Post({"c"}, [&] {
    log.Add("release c");
    c_done.set_value();
  });
  // c is free and runs; a,b waits for a's release, and is not overtaken by
  // a later task on b.
  ASSERT_EQ(c_done.get_future().wait_for(20s), std::future_status::ready);
  lanes.Post({"b"}, [&] { log.Add("release b"); });
  EXPECT_EQ(log.lines(), std::vector<std::string>{"release c"});
  first.Open();
  lanes.Stop();
  EXPECT_EQ(log.lines(),
            (std::vector<std::string>{"release c", "release a", "prestart a,b", "release b"}));
}

TEST(DeviceLanesTest, OneLaneIsTheOldSlowLane) {
  Log log;
  DeviceLanes lanes("dp+test", 1);
  for (const char* d : {"a", "b", "c", "a"}) lanes.Post({d}, [&log, d] { log.Add(d); });
  lanes.Stop();
  EXPECT_EQ(log.lines(), (std::vector<std::string>{"a", "b", "c", "a"}));
  EXPECT_LE(lanes.threads(), 1u);
}

// The bound holds, and a task waiting only for a lane has that wait
// measured while it waits; a task waiting for its own device has not.
TEST(DeviceLanesTest, LaneWaitCountsOnlyWaitingBehindOtherDevices) {
  Gate hold;
  std::promise<void> running;
  DeviceLanes lanes("dp+test", 1);
  lanes.Post({"a"}, [&] {
    running.set_value();
    hold.Wait();
  });
  ASSERT_EQ(running.get_future().wait_for(20s), std::future_status::ready);
  const auto t0 = LaneWait::Clock::now();
  auto same = lanes.Post({"a"}, [] {});
  auto other = lanes.Post({"b"}, [] {});
  std::this_thread::sleep_for(50ms);
  const auto now = LaneWait::Clock::now();
  EXPECT_EQ(same->Waited(now), LaneWait::Clock::duration::zero());
  EXPECT_GE(other->Waited(now), 50ms);
  EXPECT_LE(other->Waited(now), now - t0);
  hold.Open();
  lanes.Stop();
  // Once run, the wait stops growing.
  const auto final_wait = other->Waited(LaneWait::Clock::now());
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(other->Waited(LaneWait::Clock::now()), final_wait);
}

TEST(DeviceLanesTest, StopRunsWhatIsQueuedAndDropsWhatComesAfter) {
  std::atomic<int> ran{0};
  {
    Gate hold;
    DeviceLanes lanes("dp+test", 2);
    lanes.Post({"a"}, [&] {
      hold.Wait();
      ++ran;
    });
    lanes.Post({"a"}, [&] { ++ran; });
    lanes.Post({"b"}, [&] { ++ran; });
    ASSERT_TRUE(Soon([&] { return ran.load() == 1; }));  // b ran beside the held a
    hold.Open();
    lanes.Stop();
    EXPECT_EQ(ran.load(), 3);
    lanes.Post({"c"}, [&] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 3);
}

TEST(DeviceLanesTest, NoThreadUntilATaskComes) {
  DeviceLanes lanes("dp+test", 8);
  EXPECT_EQ(lanes.threads(), 0u);
  lanes.Stop();
}

}  // namespace
}  // namespace devplug::modules
