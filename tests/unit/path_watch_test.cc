// The agent's path watches (host->watch_path, ABI 1.3) on a real inotify
// instance and a temporary tree.
#include "udev/path_watch.h"

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "test_util.h"

namespace devplug::udev {
namespace {

using devplug::testing::TempDir;
using devplug::testing::WriteFile;

// Waits (up to 10 s) for events and returns the tags reported.
std::set<uint64_t> Next(PathWatch& w) {
  pollfd p{w.fd(), POLLIN, 0};
  if (poll(&p, 1, 10000) != 1) return {};
  return w.Drain();
}

// Nothing pending after a short wait.
bool Quiet(PathWatch& w) {
  pollfd p{w.fd(), POLLIN, 0};
  return poll(&p, 1, 100) == 0 || w.Drain().empty();
}

TEST(PathWatchTest, ReportsTheNamedEntryOnly) {
  TempDir dir;
  auto w = PathWatch::Create();
  ASSERT_TRUE(w.ok());
  const uint64_t a = (*w)->NewOwner(7), b = (*w)->NewOwner(8);
  ASSERT_EQ((*w)->Add(a, dir / "tun"), 0);
  ASSERT_EQ((*w)->Add(b, dir / "vhost-net"), 0);
  ASSERT_EQ((*w)->Add(b, dir / "vhost-net"), 0);  // twice counts once
  EXPECT_EQ((*w)->watched_dirs(), 1u);            // one directory, one watch

  WriteFile(dir / "other", "");
  EXPECT_TRUE(Quiet(**w));
  WriteFile(dir / "tun", "");
  EXPECT_EQ(Next(**w), std::set<uint64_t>{7});
  std::remove((dir / "tun").c_str());
  EXPECT_EQ(Next(**w), std::set<uint64_t>{7});
  std::rename((dir / "other").c_str(), (dir / "vhost-net").c_str());
  EXPECT_EQ(Next(**w), std::set<uint64_t>{8});

  (*w)->Remove(b);
  std::remove((dir / "vhost-net").c_str());
  EXPECT_TRUE(Quiet(**w));
  (*w)->Remove(a);
  EXPECT_EQ((*w)->watched_dirs(), 0u);
}

TEST(PathWatchTest, PatternsInTheLastComponent) {
  TempDir dir;
  auto w = PathWatch::Create();
  ASSERT_TRUE(w.ok());
  ASSERT_EQ((*w)->Add((*w)->NewOwner(1), dir / "ttyUSB*"), 0);
  WriteFile(dir / "ttyS0", "");
  EXPECT_TRUE(Quiet(**w));
  WriteFile(dir / "ttyUSB3", "");
  EXPECT_EQ(Next(**w), std::set<uint64_t>{1});
}

TEST(PathWatchTest, FollowsDirectoriesThatComeAndGo) {
  TempDir dir;
  auto w = PathWatch::Create();
  ASSERT_TRUE(w.ok());
  // /dev/vfio/72 before the vfio module made /dev/vfio: the watch waits on
  // the nearest existing ancestor and moves down.
  ASSERT_EQ((*w)->Add((*w)->NewOwner(3), dir / "a/b/node"), 0);
  ASSERT_EQ(mkdir((dir / "a").c_str(), 0755), 0);
  EXPECT_EQ(Next(**w), std::set<uint64_t>{3});
  ASSERT_EQ(mkdir((dir / "a/b").c_str(), 0755), 0);
  EXPECT_EQ(Next(**w), std::set<uint64_t>{3});
  WriteFile(dir / "a/b/node", "");
  EXPECT_EQ(Next(**w), std::set<uint64_t>{3});
  // The directory removed: reported, and the watch climbs back up.
  std::filesystem::remove_all(dir / "a");
  EXPECT_EQ(Next(**w), std::set<uint64_t>{3});
  while (!Quiet(**w)) {
  }
  EXPECT_EQ((*w)->watched_dirs(), 1u);
  ASSERT_EQ(mkdir((dir / "a").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((dir / "a/b").c_str(), 0755), 0);
  std::set<uint64_t> got;
  for (int i = 0; i < 3 && !std::filesystem::exists(dir / "a/b/node"); i++) {
    got = Next(**w);
    if (std::filesystem::exists(dir / "a/b") && (*w)->watched_dirs() == 1u) break;
  }
  EXPECT_EQ(got, std::set<uint64_t>{3});
}

TEST(PathWatchTest, RefusesRelativePaths) {
  auto w = PathWatch::Create();
  ASSERT_TRUE(w.ok());
  const uint64_t o = (*w)->NewOwner(1);
  EXPECT_EQ((*w)->Add(o, "dev/kvm"), -EINVAL);
  EXPECT_EQ((*w)->Add(o, "/"), -EINVAL);
  EXPECT_EQ((*w)->Add(99, "/dev/kvm"), -EINVAL);  // no such owner
}

}  // namespace
}  // namespace devplug::udev
