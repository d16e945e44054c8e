// devplugctl inspect-module: loads a module the way devplugd does and prints
// what it is and what it finds.
#pragma once

#include <string>
#include <vector>

namespace devplug::ctl {

struct InspectOptions {
  std::string path;
  std::string host_root = "/";
  std::vector<std::string> settings;  // key=value, as in a [[resource]] table
  bool all_devices = false;
};

// Prints to stdout; reasons for failure to stderr. Returns the exit code.
int InspectModule(const InspectOptions& options);

}  // namespace devplug::ctl
