// The generic module's keys (README.md), read and checked at create().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "devplug/common/cxx_module.h"

namespace devplug::generic {

inline constexpr int64_t kMaxShares = 100000;

inline bool HasGlob(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

// One entry of `paths`.
struct Item {
  std::string pattern;         // host path or glob, without host_root
  std::string container_path;  // "" = the host path; ending in '/' = + basename
  bool mount = false;          // type = "mount"
  std::string permissions;
  bool read_only = false;
  bool optional = false;
  bool glob = false;
};

struct UsbSel {
  uint32_t vendor = 0, product = 0;
  std::optional<std::string> serial;
};

struct Settings {
  std::vector<Item> items;
  std::vector<UsbSel> usb;
  bool group = false;
  int64_t shares = 1;
  bool usb_all = false;  // usb_nodes = "all"
  bool usb_env = false;
  common::Host::EnvList envs;
  bool pack = false;  // preferred = "pack"
  bool preopen = false;
};

// The settings, or nullopt after every mistake was reported through
// host.ConfigError.
std::optional<Settings> ParseSettings(common::Host& host);

}  // namespace devplug::generic
