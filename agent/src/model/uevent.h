// One hotplug event, as the udev monitor hands it to module instances: a
// vocabulary type, so that modules/ needs nothing of udev/ (which watches
// paths for the modules, and so sits above them).
#pragma once

#include <cstdint>
#include <string>

namespace devplug::udev {

struct Event {
  std::string action;  // add, remove, change, bind, unbind, move, online, offline
  std::string subsystem;
  std::string devtype;  // may be empty
  std::string syspath;
  std::string sysname;
  std::string devnode;  // may be empty
  uint64_t seqnum = 0;
};

}  // namespace devplug::udev
