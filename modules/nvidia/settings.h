// The nvidia module's keys (README.md), read and checked at create().
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "devplug/common/cxx_module.h"

namespace devplug::nvidia {

// The variable the container runtime reads the devices from.
inline constexpr char kVisible[] = "NVIDIA_VISIBLE_DEVICES";

enum class Discovery { kAuto, kNvml, kProcfs };
enum class Strategy { kEnvvar, kVolumeMounts, kCdi };

inline const char* StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kEnvvar:
      return "envvar";
    case Strategy::kVolumeMounts:
      return "volume-mounts";
    case Strategy::kCdi:
      return "cdi";
  }
  return "?";
}

struct HostMount {
  std::string host, container;
};

struct Settings {
  Discovery discovery = Discovery::kAuto;
  std::string library = "libnvidia-ml.so.1";
  int64_t shares = 1;
  std::set<int64_t> ignored_xids;
  bool cdi = false;
  bool mig_only = false;
  std::string mig_profile;  // "" = every profile
  Strategy strategy = Strategy::kEnvvar;
  std::optional<HostMount> driver_mount;
  std::vector<HostMount> extra_mounts;
  common::Host::EnvList envs;
};

// The settings, or nullopt after every mistake was reported through
// host.ConfigError.
std::optional<Settings> ParseSettings(common::Host& host);

}  // namespace devplug::nvidia
