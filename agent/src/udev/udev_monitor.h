// One libudev netlink monitor for the whole agent, filtered (in the kernel,
// by BPF) to the subsystems the loaded modules declared.
//
// Thread safety: not thread-safe; owned by the agent's main loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/udev_source.h"
#include "model/uevent.h"
#include "util/status.h"

struct udev;
struct udev_monitor;

namespace devplug::udev {

class Monitor {
 public:
  // source: kUdev (events after udevd ran its rules) or kKernel (raw kernel
  // uevents); resolve kAuto with ResolveSource() first. Receiving starts
  // here: events that happen from now on are queued in the socket, so the
  // first device scans can run afterwards without missing anything.
  static StatusOr<std::unique_ptr<Monitor>> Create(UdevSource source,
                                                   const std::vector<std::string>& subsystems);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  int fd() const;
  // Reads every queued event without blocking. *overflowed is set when the
  // kernel dropped events (ENOBUFS): every subscriber must rescan.
  std::vector<Event> Drain(bool* overflowed);

 private:
  Monitor() = default;
  struct ::udev* udev_ = nullptr;
  struct ::udev_monitor* monitor_ = nullptr;
};

// "auto": "udev" when systemd-udevd answers on its control socket, else
// "kernel" (no udevd: minimal hosts, containers).
UdevSource ResolveSource(UdevSource configured);

inline constexpr char kUdevdControl[] = "/run/udev/control";
// Whether systemd-udevd accepts connections on `control`, a SOCK_SEQPACKET
// socket (udev-ctrl.c); a stale file left by a dead udevd does not count.
bool UdevdRunning(const std::string& control = kUdevdControl);

}  // namespace devplug::udev
