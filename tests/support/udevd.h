// systemd-udevd for tests and benchmarks, in a private mount namespace with
// a private /run and no rules at all: it only relays kernel events to "udev"
// netlink listeners, and changes nothing on the machine.
#pragma once

#include <sys/types.h>

#include <string>

namespace devplug::testing {

class Udevd {
 public:
  // Starts it (as root, when the udev package is installed); check ready().
  Udevd();
  ~Udevd();
  Udevd(const Udevd&) = delete;
  Udevd& operator=(const Udevd&) = delete;
  bool ready() const { return ready_; }
  // Its control socket, reached through its own mount namespace.
  std::string control_path() const;

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace devplug::testing
