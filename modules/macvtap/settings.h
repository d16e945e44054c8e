// The macvtap module's keys (README.md), read and checked at create().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "devplug/common/cxx_module.h"

namespace devplug::macvtap {

// How the lower link is named in the configuration. The kernel's rule for
// interface names (no ':', at most 15 bytes) keeps the three apart.
struct LowerSelector {
  enum Kind { kName, kMac, kPci } kind = kName;
  std::string value;  // the name; the MAC's 6 raw bytes; "0000:3b:00.0"
  std::string text;   // as written, for messages
};

inline constexpr int64_t kDefaultCapacity = 100;
inline constexpr int64_t kMaxCapacity = 10000;
// IFNAMSIZ is 16 with the terminating NUL.
inline constexpr size_t kMaxIfName = 15;

struct Settings {
  LowerSelector lower;
  uint32_t mode = 0;  // MACVLAN_MODE_*
  std::string mode_name = "bridge";
  int64_t capacity = kDefaultCapacity;
  uint32_t mtu = 0;   // 0: the lower link's
  std::string netns;  // "" : the agent's own network namespace
  bool require_link = false;
  std::string link_prefix;  // device IDs and link names: <prefix><n>
};

// Why `name` cannot be a Linux interface name (the kernel's
// dev_valid_name()), or "".
std::string IfNameProblem(std::string_view name);

// The settings, or nullopt after every mistake was reported through
// host.ConfigError.
std::optional<Settings> ParseSettings(common::Host& host);

}  // namespace devplug::macvtap
