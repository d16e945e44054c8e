// The solarflare module's keys (README.md), read and checked at create().
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "devplug/common/cxx_module.h"

namespace devplug::solarflare {

using std::chrono::milliseconds;

// The library preload = true puts in LD_PRELOAD.
inline constexpr char kPreloadLib[] = "libonload.so";

inline constexpr milliseconds kDefaultAttachTimeout{10'000};
inline constexpr milliseconds kMaxAttachTimeout{29'000};

struct Settings {
  bool nic_mode = false;
  int64_t shares = 100;
  std::vector<std::string> drivers{"sfc", "sfc_ef100", "xilinx_efct"};
  std::vector<uint16_t> vendors{0x1924, 0x10ee};
  std::vector<std::string> ifnames;    // empty: any
  std::vector<std::string> addresses;  // normalised; empty: any
  bool require_nic = true;
  bool require_link = false;
  bool check_cplane = true;
  std::vector<std::string> devices{"/dev/onload", "/dev/onload_epoll", "/dev/sfc_char"};
  std::vector<std::string> optional_devices;
  std::string lib_dir;  // "" = auto
  std::vector<std::string> libraries{"libonload.so", "libonload_ext.so"};
  std::string container_lib_dir = "/opt/onload/usr/lib64";
  bool preload = true;
  bool onload_script = false;
  std::string bin_dir;  // "" = auto
  std::string container_bin_dir = "/opt/onload/usr/bin";
  common::Host::EnvList envs;
  std::string attach_command;  // "" = none
  milliseconds attach_timeout = kDefaultAttachTimeout;
};

// The settings, or nullopt after every mistake was reported through
// host.ConfigError.
std::optional<Settings> ParseSettings(common::Host& host);

}  // namespace devplug::solarflare
