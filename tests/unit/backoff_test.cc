// Jittered retry waits: within [d/2, d], and spread, for any random input.
#include "util/backoff.h"

#include <set>

#include <gtest/gtest.h>

namespace devplug {
namespace {

using std::chrono::milliseconds;

TEST(BackoffTest, JitterKeepsHalfTheWaitAndSpreadsTheRest) {
  std::set<int64_t> seen;
  for (uint32_t r : {0u, 1u, 7u, 499u, 500u, 501u, 65'537u, 0xffff'ffffu}) {
    const milliseconds w = Jittered(milliseconds(1000), r);
    EXPECT_GE(w, milliseconds(500)) << r;
    EXPECT_LE(w, milliseconds(1000)) << r;
    seen.insert(w.count());
  }
  EXPECT_GE(seen.size(), 5u);
  EXPECT_EQ(Jittered(milliseconds(1000), 0), milliseconds(500));
  EXPECT_EQ(Jittered(milliseconds(1000), 500), milliseconds(1000));
  EXPECT_EQ(Jittered(milliseconds(1), 12345), milliseconds(1));  // nothing to spread
  EXPECT_EQ(Jittered(milliseconds(0), 12345), milliseconds(0));
  EXPECT_EQ(Jittered(milliseconds(3), 1), milliseconds(3));  // [2, 3]
  EXPECT_EQ(Jittered(milliseconds(3), 0), milliseconds(2));
}

}  // namespace
}  // namespace devplug
