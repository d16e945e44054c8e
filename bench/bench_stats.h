// Percentiles of a benchmark's samples, shared by the benchmark programs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace devplug::bench {

struct Stats {
  double p50 = 0, p99 = 0, max = 0;
  size_t n = 0;
  size_t timeouts = 0;  // samples that never completed (set by the caller)
};

// Milliseconds of a steady-clock duration.
inline double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// How a table row judges a number against its target.
inline const char* Verdict(bool met) { return met ? "met" : "MISSED"; }

// One row of a "| measurement | p50 | p99 | max | target |" table, judged
// by its p99 (or its p50, for targets on the median); a row with no limit
// (limit_ms 0) only informs.
inline void PrintRow(const std::string& what, const Stats& s, const char* target, double limit_ms,
                     bool by_p50 = false) {
  const std::string verdict =
      limit_ms > 0 ? std::string(" (") + Verdict((by_p50 ? s.p50 : s.p99) <= limit_ms) + ")" : "";
  std::printf("| %s (n=%zu) | %.3f ms | %.3f ms | %.3f ms | %s%s |\n", what.c_str(), s.n, s.p50,
              s.p99, s.max, target, verdict.c_str());
}

inline Stats Summarize(std::vector<double> samples, size_t timeouts = 0) {
  Stats s;
  s.timeouts = timeouts;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.n = samples.size();
  s.p50 = samples[samples.size() / 2];
  s.p99 = samples[std::min(samples.size() - 1, samples.size() * 99 / 100)];
  s.max = samples.back();
  return s;
}

}  // namespace devplug::bench
