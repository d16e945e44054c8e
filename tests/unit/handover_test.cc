// util/handover.h: starting the program again with a socket pair, and the
// one line the new process writes on it.
#include "util/handover.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace devplug::handover {
namespace {

// Reads from `fd` until `kind` (or 5 s).
Reading ReadUntil(int fd, std::string* buffer, Reading::Kind kind) {
  Reading r;
  for (int i = 0; i < 500 && r.kind != kind; ++i) {
    r = Read(fd, buffer);
    if (r.kind == Reading::kNothingYet) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return r;
}

TEST(HandoverProcessTest, AReadyLineCountsOnceWholeAndEvenRightBeforeTheClose) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair), 0);
  std::string buffer;
  EXPECT_EQ(Read(pair[0], &buffer).kind, Reading::kNothingYet);
  ASSERT_EQ(write(pair[1], "rea", 3), 3);
  EXPECT_EQ(Read(pair[0], &buffer).kind, Reading::kNothingYet);
  const std::string rest = ReadyLine("1.2.3").substr(3);
  ASSERT_EQ(write(pair[1], rest.data(), rest.size()), static_cast<ssize_t>(rest.size()));
  close(pair[1]);
  const Reading r = Read(pair[0], &buffer);
  EXPECT_EQ(r.kind, Reading::kReady);
  EXPECT_EQ(r.version, "1.2.3");
  EXPECT_EQ(Read(pair[0], &buffer).kind, Reading::kClosed);
  close(pair[0]);
}

TEST(HandoverProcessTest, APeerThatClosesWithoutAReadyLineIsClosed) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair), 0);
  ASSERT_EQ(write(pair[1], "starting\n", 9), 9);
  close(pair[1]);
  std::string buffer;
  EXPECT_EQ(Read(pair[0], &buffer).kind, Reading::kClosed);
  close(pair[0]);
}

// The new program gets the pair as descriptor 3, named in its environment,
// no blocked signal (devplugd blocks the ones its signalfd reads), and no
// WATCHDOG_PID of the old process.
TEST(HandoverProcessTest, SpawnPassesThePairAndAFreshSignalMask) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &block, &old), 0);
  setenv("WATCHDOG_PID", "1", 1);
  auto child = Spawn({"/bin/sh", "-c",
                      "blocked=$(sed -n 's/^SigBlk:[[:space:]]*//p' /proc/self/status); "
                      "printf 'ready fd=%s,blocked=%s,wd=%s\\n' \"$DEVPLUG_HANDOVER_FD\" "
                      "\"$blocked\" \"${WATCHDOG_PID-none}\" >&3"});
  unsetenv("WATCHDOG_PID");
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(child.ok()) << child.status().message();
  std::string buffer;
  const Reading r = ReadUntil(child->fd, &buffer, Reading::kReady);
  EXPECT_EQ(r.kind, Reading::kReady);
  EXPECT_EQ(r.version, "fd=3,blocked=0000000000000000,wd=none");
  EXPECT_EQ(ReadUntil(child->fd, &buffer, Reading::kClosed).kind, Reading::kClosed);
  EXPECT_EQ(Reap(child->pid, /*wait=*/true), "exited with status 0");
  close(child->fd);
}

TEST(HandoverProcessTest, HowAChildEndedIsSaid) {
  auto exits = Spawn({"/bin/sh", "-c", "exit 78"});
  ASSERT_TRUE(exits.ok());
  EXPECT_EQ(Reap(exits->pid, true), "exited with status 78");
  close(exits->fd);
  auto killed = Spawn({"sleep", "30"});  // found in $PATH
  ASSERT_TRUE(killed.ok()) << killed.status().message();
  EXPECT_EQ(Reap(killed->pid, false), "");  // still running
  kill(killed->pid, SIGKILL);
  EXPECT_EQ(Reap(killed->pid, true), "was killed by SIGKILL");
  close(killed->fd);
  EXPECT_FALSE(Spawn({"/nonexistent/devplugd"}).ok());
  EXPECT_FALSE(Spawn({}).ok());
}

}  // namespace
}  // namespace devplug::handover
