// Jitter for retry waits: agents of a fleet that failed together (an API
// server that went away) must not come back in step.
#pragma once

#include <chrono>
#include <cstdint>

namespace devplug {

// A wait of `d` spread over [d/2, d] by `random` (any 32-bit value):
// "equal jitter", which keeps half of the backoff and spreads the rest.
inline std::chrono::milliseconds Jittered(std::chrono::milliseconds d, uint32_t random) {
  if (d.count() <= 1) return d;
  const int64_t half = d.count() / 2;
  return std::chrono::milliseconds(d.count() - half + static_cast<int64_t>(random % (half + 1)));
}

}  // namespace devplug
