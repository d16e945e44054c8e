// A wall-clock time as Kubernetes and the status JSON write it: RFC 3339 in
// UTC, to the second ("2026-11-28T01:58:00Z").
#pragma once

#include <chrono>
#include <ctime>
#include <string>

namespace devplug {

inline std::string UtcTime(std::chrono::system_clock::time_point t) {
  const std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace devplug
