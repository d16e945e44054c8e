// Mailbox: events from many threads reach the main loop once each, in each
// thread's order, and the eventfd says when there are some.
#include "mailbox.h"

#include <poll.h>

#include <map>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace devplug {
namespace {

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

TEST(MailboxTest, EveryPostIsDrainedOnceInItsThreadsOrder) {
  Mailbox box;
  ASSERT_GE(box.fd(), 0);
  EXPECT_FALSE(Readable(box.fd()));
  constexpr int kThreads = 4, kEach = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&box, t] {
      for (int i = 0; i < kEach; ++i)
        box.Post(AgentEvent{AgentEvent::kCreated, static_cast<uint64_t>(t),
                            static_cast<uint64_t>(i), OkStatus(), nullptr});
    });
  std::map<uint64_t, std::vector<uint64_t>> seen;
  size_t total = 0;
  for (auto& th : threads) th.join();
  ASSERT_TRUE(Readable(box.fd()));
  for (const AgentEvent& e : box.Drain()) {
    seen[e.resource].push_back(e.number);
    ++total;
  }
  EXPECT_EQ(total, static_cast<size_t>(kThreads * kEach));
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(kEach));
    for (int i = 0; i < kEach; ++i) EXPECT_EQ(seen[t][i], static_cast<uint64_t>(i));
  }
  // Drained: the eventfd is quiet until the next post.
  EXPECT_FALSE(Readable(box.fd()));
  EXPECT_TRUE(box.Drain().empty());
}

TEST(MailboxTest, AClosedMailboxDropsWhatComesLate) {
  Mailbox box;
  box.Post(AgentEvent{AgentEvent::kPodList, 0, 1, OkStatus(), nullptr});
  box.Close();  // the agent is gone: a late callback must find nothing to wake
  box.Post(AgentEvent{AgentEvent::kPodList, 0, 2, OkStatus(), nullptr});
  EXPECT_TRUE(box.Drain().empty());
}

}  // namespace
}  // namespace devplug
