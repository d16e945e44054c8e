// Publisher: how a scan's list becomes an instance's current list, with
// the hooks it calls faked.
#include "modules/publisher.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace devplug::modules {
namespace {

Device Dev(const std::string& id, bool healthy = true) {
  Device d;
  d.id = id;
  d.healthy = healthy;
  return d;
}

// Refuses lists longer than `max` and records what was published.
struct Sink final : ListSink {
  size_t max = 100;
  std::vector<DeviceListPtr> published;
  std::string Accept(const DeviceList& list) override {
    return list.size() > max ? "too many devices" : "";
  }
  void Publish(const DeviceListPtr& list) override { published.push_back(list); }
};

struct Observer final : InstanceObserver {
  std::vector<std::vector<uint64_t>> health;
  void Scanned(ScanCause) override {}
  void Health(uint64_t healthy, uint64_t unhealthy, uint64_t to_healthy,
              uint64_t to_unhealthy) override {
    health.push_back({healthy, unhealthy, to_healthy, to_unhealthy});
  }
  void Released(int, size_t) override {}
};

// Holds back the devices named in `held`.
struct Holds final : ReleaseHooks {
  std::vector<std::string> held;
  bool Apply(DeviceList& list) override {
    bool changed = false;
    for (Device& d : list)
      if (std::find(held.begin(), held.end(), d.id) != held.end() && d.healthy) {
        d.healthy = false;
        d.held_back = true;
        changed = true;
      }
    return changed;
  }
  std::vector<std::string> DueBeforeStart(const std::vector<std::string>&, bool*) override {
    return {};
  }
  void Released(const std::vector<std::string>&, int, const std::string&, bool) override {}
};

TEST(PublisherTest, PublishesOnlyChangesAndCountsHealthTurns) {
  auto sink = std::make_shared<Sink>();
  auto observer = std::make_shared<Observer>();
  Publisher p("test/res", sink, nullptr, nullptr, observer);
  EXPECT_TRUE(p.devices()->empty());
  EXPECT_FALSE(p.published());
  ASSERT_TRUE(p.Scanned({Dev("a"), Dev("b", false)}, false).ok());
  ASSERT_TRUE(p.Scanned({Dev("a"), Dev("b", false)}, false).ok());  // same: not again
  ASSERT_EQ(sink->published.size(), 1u);
  EXPECT_TRUE(p.published());
  ASSERT_TRUE(p.Scanned({Dev("a", false), Dev("b")}, false).ok());
  ASSERT_EQ(sink->published.size(), 2u);
  EXPECT_EQ(p.devices(), sink->published.back());
  ASSERT_EQ(observer->health.size(), 2u);
  EXPECT_EQ(observer->health[0], (std::vector<uint64_t>{1, 1, 0, 0}));  // a new list: no turns
  EXPECT_EQ(observer->health[1], (std::vector<uint64_t>{1, 1, 1, 1}));
}

TEST(PublisherTest, ARefusedListNeverBecomesCurrent) {
  auto sink = std::make_shared<Sink>();
  sink->max = 1;
  Publisher p("test/res", sink, nullptr, nullptr, nullptr);
  // The first list refused: nothing to keep, the caller hears why.
  Status first = p.Scanned({Dev("a"), Dev("b")}, false);
  EXPECT_EQ(first.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(first.message().find("too many devices"), std::string::npos);
  EXPECT_TRUE(p.devices()->empty());
  ASSERT_TRUE(p.Scanned({Dev("a")}, false).ok());
  // A later one refused: logged, the current list stays.
  EXPECT_TRUE(p.Scanned({Dev("a"), Dev("c")}, false).ok());
  ASSERT_EQ(p.devices()->size(), 1u);
  EXPECT_EQ(p.devices()->front().id, "a");
  EXPECT_EQ(sink->published.size(), 1u);
}

TEST(PublisherTest, RepublishAppliesTheReleaseStateToTheLastScan) {
  auto sink = std::make_shared<Sink>();
  auto holds = std::make_shared<Holds>();
  Publisher p("test/res", sink, holds, nullptr, nullptr);
  p.Republish(true);  // nothing published yet: nothing happens
  EXPECT_TRUE(sink->published.empty());
  ASSERT_TRUE(p.Scanned({Dev("a"), Dev("b")}, true).ok());
  holds->held = {"b"};
  p.Republish(true);
  ASSERT_EQ(sink->published.size(), 2u);
  const Device& b = sink->published.back()->at(1);
  EXPECT_FALSE(b.healthy);
  EXPECT_TRUE(b.held_back);
  holds->held.clear();
  p.Republish(true);
  ASSERT_EQ(sink->published.size(), 3u);
  EXPECT_TRUE(sink->published.back()->at(1).healthy);
  // Without tracking the agent's state does not apply.
  holds->held = {"a"};
  ASSERT_TRUE(p.Scanned({Dev("a"), Dev("b")}, false).ok());
  EXPECT_EQ(sink->published.size(), 3u);
}

// What the agent withholds (a draining DRA side's claims) applies to every
// list, tracking or not, and a change of it is published from the last scan.
struct Claimed final : Withholds {
  std::vector<std::string> ids;
  void Apply(DeviceList& list) const override {
    for (Device& d : list)
      if (std::find(ids.begin(), ids.end(), d.id) != ids.end()) {
        d.healthy = false;
        d.health_reason = "claimed";
      }
  }
};

TEST(PublisherTest, WithheldDevicesAreUnhealthyInEveryListUntilWithheldNoMore) {
  auto sink = std::make_shared<Sink>();
  auto claimed = std::make_shared<Claimed>();
  claimed->ids = {"b"};
  Publisher p("test/res", sink, nullptr, claimed, nullptr);
  ASSERT_TRUE(p.Scanned({Dev("a"), Dev("b")}, false).ok());
  ASSERT_EQ(sink->published.size(), 1u);
  EXPECT_TRUE(sink->published.back()->at(0).healthy);
  EXPECT_FALSE(sink->published.back()->at(1).healthy);
  EXPECT_EQ(p.devices()->at(1).health_reason, "claimed");
  claimed->ids.clear();
  p.Republish(false);
  ASSERT_EQ(sink->published.size(), 2u);
  EXPECT_TRUE(sink->published.back()->at(1).healthy);
  EXPECT_TRUE(p.devices()->at(1).healthy);
}

TEST(PublisherTest, ASilencedPublisherKeepsItsListButTellsNobody) {
  auto sink = std::make_shared<Sink>();
  Publisher p("test/res", sink, nullptr, nullptr, nullptr);
  ASSERT_TRUE(p.Scanned({Dev("a")}, false).ok());
  p.Silence();
  ASSERT_TRUE(p.Scanned({Dev("a"), Dev("b")}, false).ok());
  EXPECT_EQ(p.devices()->size(), 2u);
  EXPECT_EQ(sink->published.size(), 1u);
}

}  // namespace
}  // namespace devplug::modules
