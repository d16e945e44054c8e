#include "mig.h"

#include <cctype>
#include <cstdint>

namespace devplug::nvidia {

std::string MigProfileName(unsigned gi_slices, unsigned ci_slices, unsigned long long memory_mib,
                           unsigned long long parent_total_bytes) {
  if (gi_slices == 0 || parent_total_bytes == 0 || memory_mib == 0) return {};
  constexpr unsigned long long kMiB = 1ULL << 20, kGiB = 1ULL << 30;
  // In integers, so that a share of exactly k/8 stays k/8.
  if (memory_mib > parent_total_bytes / kMiB) return {};  // more than its GPU has: not a MIG device
  const unsigned long long bytes = memory_mib * kMiB;
  const unsigned long long eighths = (bytes * 8 + parent_total_bytes - 1) / parent_total_bytes;
  const unsigned long long total_gb = (parent_total_bytes + kGiB - 1) / kGiB;
  const unsigned long long gb = (eighths * total_gb * 2 + 8) / 16;  // eighths*total_gb/8, rounded
  std::string name;
  if (ci_slices != 0 && ci_slices < gi_slices) name = std::to_string(ci_slices) + "c.";
  return name + std::to_string(gi_slices) + "g." + std::to_string(gb) + "gb";
}

namespace {

// Consumes digits then `suffix`; false when either is missing.
bool Eat(std::string_view& s, std::string_view suffix) {
  size_t n = 0;
  while (n < s.size() && std::isdigit(static_cast<unsigned char>(s[n]))) n++;
  if (n == 0 || n > 4 || s.substr(n, suffix.size()) != suffix) return false;
  s.remove_prefix(n + suffix.size());
  return true;
}

}  // namespace

bool IsMigProfileName(std::string_view name) {
  std::string_view s = name;
  if (s.find("c.") != std::string_view::npos && !Eat(s, "c.")) return false;
  return Eat(s, "g.") && Eat(s, "gb") && s.empty();
}

std::optional<unsigned> ParseCapabilityMinor(std::string_view text) {
  constexpr std::string_view kKey = "DeviceFileMinor:";
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.substr(0, kKey.size()) != kKey) continue;
    line.remove_prefix(kKey.size());
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r'))
      line.remove_suffix(1);
    if (line.empty() || line.size() > 9) return std::nullopt;
    unsigned v = 0;
    for (char c : line) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
      v = v * 10 + static_cast<unsigned>(c - '0');
    }
    return v;
  }
  return std::nullopt;
}

}  // namespace devplug::nvidia
