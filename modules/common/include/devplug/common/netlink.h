// Link changes from the kernel's rtnetlink (NETLINK_ROUTE, RTMGRP_LINK).
//
// Carrier up/down and admin up/down of a network interface raise no uevent;
// the kernel announces them only as RTM_NEWLINK messages. Modules whose
// health follows a link (RoCE ports, Onload NICs) watch this socket from a
// thread of their own and rescan when a message names one of their
// interfaces.
#pragma once

struct nlmsghdr;

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
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
  static void Parse(const struct nlmsghdr* nh, const std::function<void(const Link&)>& fn);

  int fd_ = -1;
  std::string error_;
};

// A module's watcher thread around a LinkMonitor: it calls `changed` (which
// normally calls host devices_changed) when a link message names an
// interface `ours` accepts or messages were lost, and, with a `tick`, asks
// `on_tick` (true: changed) every tick and after every message that was not
// ours. Start it from list_devices(), after create() has returned, as the
// ABI asks of devices_changed callers; Stop() (or the destructor) joins it.
class LinkWatcher {
 public:
  struct Callbacks {
    std::function<bool(std::string_view ifname)> ours;  // any thread: the watcher's
    std::function<void()> changed;
    std::function<bool()> on_tick;  // optional
  };
  LinkWatcher() = default;
  ~LinkWatcher() { Stop(); }
  LinkWatcher(const LinkWatcher&) = delete;
  LinkWatcher& operator=(const LinkWatcher&) = delete;

  bool running() const { return thread_.joinable(); }
  // Starts the thread; "" or why link messages cannot be had (the thread
  // then only ticks). Throws std::system_error when no thread can be made.
  std::string Start(Callbacks callbacks, std::chrono::milliseconds tick);
  void Stop();

 private:
  void Run();

  LinkMonitor links_;
  Callbacks cb_;
  std::chrono::milliseconds tick_{0};
  int stop_fd_ = -1;
  std::thread thread_;
};

}  // namespace devplug::common
