#include "udev/udev_monitor.h"

#include <libudev.h>

#include <cerrno>
#include <cstring>

#include "util/unix_socket.h"

namespace devplug::udev {
namespace {

// Large enough for event storms (thousands of VFs appearing at once);
// libudev uses SO_RCVBUFFORCE, which root may exceed rmem_max with.
constexpr int kReceiveBuffer = 32 * 1024 * 1024;

std::string Str(const char* s) { return s ? s : ""; }

}  // namespace

bool UdevdRunning(const std::string& control) { return UnixSocketIsLive(control, SOCK_SEQPACKET); }

UdevSource ResolveSource(UdevSource configured) {
  if (configured != UdevSource::kAuto) return configured;
  return UdevdRunning() ? UdevSource::kUdev : UdevSource::kKernel;
}

StatusOr<std::unique_ptr<Monitor>> Monitor::Create(UdevSource source,
                                                   const std::vector<std::string>& subsystems) {
  std::unique_ptr<Monitor> m(new Monitor());
  m->udev_ = udev_new();
  if (m->udev_ == nullptr) return InternalError(StrCat("udev_new: ", std::strerror(errno)));
  const char* name = source == UdevSource::kUdev ? "udev" : "kernel";
  m->monitor_ = udev_monitor_new_from_netlink(m->udev_, name);
  if (m->monitor_ == nullptr)
    return UnavailableError(
        StrCat("cannot open the ", name, " uevent netlink socket: ", std::strerror(errno)));
  for (const std::string& s : subsystems) {
    if (int rc = udev_monitor_filter_add_match_subsystem_devtype(m->monitor_, s.c_str(), nullptr);
        rc < 0)
      return InternalError(StrCat("udev filter for ", s, ": ", std::strerror(-rc)));
  }
  // Best effort: without it a storm may overflow (then everyone rescans).
  udev_monitor_set_receive_buffer_size(m->monitor_, kReceiveBuffer);
  if (int rc = udev_monitor_enable_receiving(m->monitor_); rc < 0)
    return UnavailableError(StrCat("cannot receive ", name, " uevents: ", std::strerror(-rc)));
  return m;
}

Monitor::~Monitor() {
  if (monitor_) udev_monitor_unref(monitor_);
  if (udev_) udev_unref(udev_);
}

int Monitor::fd() const { return udev_monitor_get_fd(monitor_); }

std::vector<Event> Monitor::Drain(bool* overflowed) {
  std::vector<Event> out;
  *overflowed = false;
  for (;;) {
    errno = 0;
    udev_device* d = udev_monitor_receive_device(monitor_);
    if (d == nullptr) {
      if (errno == ENOBUFS) {
        *overflowed = true;
        continue;
      }
      // EAGAIN: drained. Anything else (a malformed message) was skipped by
      // libudev; stop for this wake-up, the fd stays readable if more waits.
      break;
    }
    Event e;
    e.action = Str(udev_device_get_action(d));
    e.subsystem = Str(udev_device_get_subsystem(d));
    e.devtype = Str(udev_device_get_devtype(d));
    e.syspath = Str(udev_device_get_syspath(d));
    e.sysname = Str(udev_device_get_sysname(d));
    e.devnode = Str(udev_device_get_devnode(d));
    e.seqnum = udev_device_get_seqnum(d);
    udev_device_unref(d);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace devplug::udev
