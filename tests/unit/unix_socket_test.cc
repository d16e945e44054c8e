// Whether a Unix socket is served, asked from the agent's main thread: it
// must answer at once whatever the other process does.
#include "util/unix_socket.h"

#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "test_util.h"

namespace devplug {
namespace {

TEST(UnixSocketTest, LiveDeadAndAbsentSockets) {
  testing::TempDir dir;
  const std::string live = dir / "live.sock", dead = dir / "dead.sock";
  const int fd = testing::ListenUnix(live);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(testing::LeaveDeadUnixSocket(dead));
  EXPECT_TRUE(UnixSocketIsLive(live));
  EXPECT_FALSE(UnixSocketIsLive(dead));
  EXPECT_FALSE(UnixSocketIsLive(dir / "absent.sock"));
  close(fd);
}

// A listener that never accepts fills its backlog; a blocking connect would
// then wait for ever. It is live, and the answer comes at once.
TEST(UnixSocketTest, AListenerThatNeverAcceptsIsLiveAndAnswersAtOnce) {
  testing::TempDir dir;
  const std::string path = dir / "stuck.sock";
  const int fd = testing::ListenUnix(path);  // backlog 8, never accepted
  ASSERT_GE(fd, 0);
  // (Blocking, the ninth connect would never return.)
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(UnixSocketIsLive(path)) << i;
  close(fd);
}

}  // namespace
}  // namespace devplug
