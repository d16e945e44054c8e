// Link changes from the kernel's rtnetlink (NETLINK_ROUTE, RTMGRP_LINK).
//
// Carrier up/down and admin up/down of a network interface raise no uevent;
// the kernel announces them only as RTM_NEWLINK messages. Modules whose
// health follows a link (RoCE ports, Onload NICs) watch this socket from a
// thread of their own and rescan when a message names one of their
// interfaces.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace devplug::common {

class LinkMonitor {
 public:
  // Opens and binds the socket (non-blocking, close-on-exec); on failure
  // ok() is false and error() says why.
  LinkMonitor();
  ~LinkMonitor();
  LinkMonitor(LinkMonitor&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), error_(std::move(other.error_)) {}
  LinkMonitor(const LinkMonitor&) = delete;
  LinkMonitor& operator=(const LinkMonitor&) = delete;
  LinkMonitor& operator=(LinkMonitor&&) = delete;

  bool ok() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }
  // For poll(): readable when messages wait.
  int fd() const { return fd_; }

  // What one link message says about its interface.
  struct Link {
    std::string_view ifname;
    bool removed = false;   // RTM_DELLINK
    bool up = false;        // IFF_UP (admin state)
    bool lower_up = false;  // IFF_LOWER_UP (carrier)
  };
  // Reads every message waiting, calling fn for each link message. Returns
  // false when the kernel dropped messages (the socket's buffer overflowed):
  // the caller cannot know what it missed and should rescan everything.
  bool Drain(const std::function<void(const Link&)>& fn);

 private:
  int fd_ = -1;
  std::string error_;
};

}  // namespace devplug::common
