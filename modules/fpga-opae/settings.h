// fpga-opae's settings: its keys, read and checked once at create().
//
// Thread safety: plain values, read-only after ParseSettings().
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "devplug/common/cxx_module.h"
#include "dfl.h"

namespace devplug::fpga {

enum class Mode { kAf, kRegion, kRegionDevel };
enum class ProgramWith { kAuto, kFpgaconf, kIoctl };

struct Settings {
  Mode mode = Mode::kAf;
  std::optional<Driver> driver;  // nullopt: auto
  std::string afu_id;
  std::optional<std::string> interface_id;
  std::vector<std::string> addresses;
  std::vector<std::string> ports;
  std::string bitstream_dir = "/srv/intel.com/fpga";
  ProgramWith program_with = ProgramWith::kAuto;
  std::string fpgaconf = "/usr/bin/fpgaconf";
  std::chrono::milliseconds program_timeout = std::chrono::seconds(20);
  std::chrono::milliseconds failure_hold = std::chrono::seconds(60);
  std::vector<std::string> release_actions;
  std::string idle_afu_id;
  std::string release_command;
  std::chrono::milliseconds release_timeout = std::chrono::seconds(60);
  bool health_errors = false;
  bool env = true;
  std::chrono::milliseconds state_poll = std::chrono::seconds(1);  // 0: off

  bool region() const { return mode != Mode::kAf; }
  bool Releases(std::string_view action) const {
    return std::find(release_actions.begin(), release_actions.end(), action) !=
           release_actions.end();
  }
};

// An ID of all f: nothing usable (firmware crashed).
bool AllF(const std::string& id);

template <class T>
bool Contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// What a claim decision needs to know about a port.
struct PortFacts {
  std::string name;
  std::string function;
  std::optional<std::string> interface_id;
  std::optional<std::string> afu_id;
};

// The resource's selectors (and, in mode "af", its accelerator) take the port.
bool Selects(const Settings& s, const PortFacts& f);

// Reads and checks the instance's keys; nullopt after host.ConfigError()
// for every mistake.
std::optional<Settings> ParseSettings(common::Host& host);

// The keys ParseSettings() reads, for the module descriptor.
extern const devplug_config_key kSettingsKeys[];

}  // namespace devplug::fpga
