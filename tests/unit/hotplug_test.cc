// Hotplug over a fake resource set: which resources hear which real kernel
// uevent, how the filter follows the set of modules, and path watches.
#include "hotplug.h"

#include <poll.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "test_util.h"

namespace devplug {
namespace {

using namespace std::chrono_literals;

struct FakeResources final : Hotplug::Targets {
  std::map<uint64_t, std::vector<std::string>> subscriptions;
  std::map<uint64_t, std::vector<udev::Event>> delivered;
  std::set<uint64_t> paths;
  int rescans = 0;
  std::map<uint64_t, std::vector<std::string>> Subscriptions() const override {
    return subscriptions;
  }
  void Deliver(uint64_t id, std::vector<udev::Event> events) override {
    auto& d = delivered[id];
    d.insert(d.end(), events.begin(), events.end());
  }
  void PathChanged(uint64_t id) override { paths.insert(id); }
  void RescanAll() override { ++rescans; }
};

bool Trigger(const std::string& file) {
  std::ofstream out(file);
  out << "change";
  out.flush();
  return static_cast<bool>(out);
}

bool Saw(const std::vector<udev::Event>& events, const std::string& sysname) {
  for (const auto& e : events)
    if (e.sysname == sysname) return true;
  return false;
}

// Drains `fd` through `drain` until `done` or 10 s.
template <typename Drain, typename Done>
bool PollUntil(int fd, Drain drain, Done done) {
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (!done() && std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) > 0) drain();
  }
  return done();
}

TEST(HotplugTest, EachEventReachesTheResourcesThatAskedForItsSubsystem) {
  if (!testing::IsRoot()) GTEST_SKIP() << "writing uevent files needs root";
  const auto misc = testing::RealMiscDevice();
  ASSERT_TRUE(misc.has_value()) << "no /sys/class/misc/kvm or /sys/class/misc/tun";
  FakeResources set;
  set.subscriptions = {{1, {"misc"}}, {2, {"net"}}, {3, {"misc", ""}}, {4, {}}};
  Hotplug hotplug(&set, nullptr);
  hotplug.Update(UdevSource::kKernel, 1000ms);
  EXPECT_EQ(hotplug.subsystems(), (std::vector<std::string>{"misc", "net"}));
  ASSERT_GE(hotplug.udev_fd(), 0);

  ASSERT_TRUE(Trigger(misc->uevent));
  ASSERT_TRUE(Trigger("/sys/class/net/lo/uevent"));
  ASSERT_TRUE(PollUntil(
      hotplug.udev_fd(), [&] { hotplug.DrainUdev(); },
      [&] {
        return Saw(set.delivered[1], misc->name) && Saw(set.delivered[3], misc->name) &&
               Saw(set.delivered[2], "lo");
      }));
  EXPECT_FALSE(Saw(set.delivered[2], misc->name));
  EXPECT_FALSE(Saw(set.delivered[1], "lo"));
  EXPECT_EQ(set.delivered.count(4), 0u);
  EXPECT_EQ(set.rescans, 0);

  // The misc modules go: the filter follows, and a misc event reaches
  // nobody (a net event sent after it arrives, so the misc one had its
  // chance first).
  set.subscriptions = {{2, {"net"}}};
  set.delivered.clear();
  hotplug.Update(UdevSource::kKernel, 1000ms);
  EXPECT_EQ(hotplug.subsystems(), (std::vector<std::string>{"net"}));
  ASSERT_TRUE(Trigger(misc->uevent));
  ASSERT_TRUE(Trigger("/sys/class/net/lo/uevent"));
  ASSERT_TRUE(PollUntil(
      hotplug.udev_fd(), [&] { hotplug.DrainUdev(); },
      [&] { return Saw(set.delivered[2], "lo"); }));
  EXPECT_FALSE(Saw(set.delivered[2], misc->name));
  EXPECT_EQ(set.delivered.size(), 1u);

  // No module with subsystems: no monitor.
  set.subscriptions.clear();
  hotplug.Update(UdevSource::kKernel, 1000ms);
  EXPECT_TRUE(hotplug.subsystems().empty());
}

TEST(HotplugTest, AWatchedPathReachesItsResourceOnly) {
  FakeResources set;
  Hotplug hotplug(&set, nullptr);
  EXPECT_EQ(hotplug.path_fd(), -1);
  hotplug.OpenPathWatch();
  ASSERT_TRUE(hotplug.path_watch());
  testing::TempDir dir;
  udev::PathWatchSet seven(hotplug.path_watch(), 7);
  udev::PathWatchSet eight(hotplug.path_watch(), 8);
  ASSERT_EQ(seven.Add(dir / "node7"), 0);
  ASSERT_EQ(eight.Add(dir / "other/node8"), 0);
  std::ofstream(dir / "node7").put('x');
  ASSERT_TRUE(PollUntil(
      hotplug.path_fd(), [&] { hotplug.DrainPaths(); }, [&] { return set.paths.count(7) > 0; }));
  EXPECT_EQ(set.paths.count(8), 0u);
  seven.EndAll();
  eight.EndAll();
}

}  // namespace
}  // namespace devplug
