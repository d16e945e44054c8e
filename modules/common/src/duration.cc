#include "devplug/common/duration.h"

#include <cstdint>

namespace devplug::common {

std::variant<std::chrono::milliseconds, std::string> ParseDuration(std::string_view text,
                                                                   std::chrono::milliseconds max) {
  const std::string quoted = "\"" + std::string(text) + "\"";
  if (text.empty()) return std::string("empty duration (use e.g. \"500ms\", \"20s\", \"5m\")");
  if (text == "0") return std::chrono::milliseconds(0);
  const int64_t max_ms = max.count();
  int64_t total = 0;
  while (!text.empty()) {
    size_t i = 0;
    int64_t n = 0;
    bool over = false;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      if (n > max_ms)
        over = true;
      else
        n = n * 10 + (text[i] - '0');
    }
    if (i == 0) return quoted + ": expected a number, like \"20s\"";
    size_t j = i;
    while (j < text.size() && (text[j] < '0' || text[j] > '9')) ++j;
    const std::string_view unit = text.substr(i, j - i);
    int64_t scale = 0;
    if (unit == "ms")
      scale = 1;
    else if (unit == "s")
      scale = 1000;
    else if (unit == "m")
      scale = 60'000;
    else if (unit == "h")
      scale = 3'600'000;
    else if (unit.empty())
      return quoted + ": a number needs a unit (ms, s, m or h)";
    else
      return quoted + ": unknown unit \"" + std::string(unit) + "\" (ms, s, m or h)";
    if (over || n > max_ms / scale || total > max_ms - n * scale)
      return quoted + " is over the maximum of " + FormatDuration(max);
    total += n * scale;
    text.remove_prefix(j);
  }
  return std::chrono::milliseconds(total);
}

std::string FormatDuration(std::chrono::milliseconds d) {
  const int64_t ms = d.count();
  if (ms != 0 && ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms != 0 && ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  if (ms > 1000) {
    std::string frac = std::to_string(ms % 1000);
    frac.insert(0, 3 - frac.size(), '0');
    while (frac.back() == '0') frac.pop_back();
    return std::to_string(ms / 1000) + "." + frac + "s";
  }
  return std::to_string(ms) + "ms";
}

}  // namespace devplug::common
