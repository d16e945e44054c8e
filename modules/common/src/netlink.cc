#include "devplug/common/netlink.h"

#include <linux/if.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

namespace devplug::common {

LinkMonitor::LinkMonitor() {
  fd_ = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd_ < 0) {
    error_ = std::string("rtnetlink socket: ") + std::strerror(errno);
    return;
  }
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = RTMGRP_LINK;
  if (bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    error_ = std::string("rtnetlink bind: ") + std::strerror(errno);
    close(fd_);
    fd_ = -1;
  }
}

LinkMonitor::~LinkMonitor() {
  if (fd_ >= 0) close(fd_);
}

bool LinkMonitor::Drain(const std::function<void(const Link&)>& fn) {
  if (fd_ < 0) return true;
  // Link messages carry many attributes (stats, VF info); 32 KiB holds a
  // batch of them.
  std::vector<char> buf(32768);
  bool complete = true;
  for (;;) {
    const ssize_t len = recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
    if (len < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {
        complete = false;  // lost messages; what is queued after is still valid
        continue;
      }
      return complete;  // EAGAIN: nothing more waits
    }
    if (len == 0) return complete;
    // The walk NLMSG_OK/RTA_OK do, written out with unsigned sizes.
    size_t left = static_cast<size_t>(len);
    for (const char* p = buf.data(); left >= sizeof(nlmsghdr);) {
      const auto* nh = reinterpret_cast<const nlmsghdr*>(p);
      if (nh->nlmsg_len < sizeof(nlmsghdr) || nh->nlmsg_len > left) break;
      const size_t step = NLMSG_ALIGN(nh->nlmsg_len);
      if ((nh->nlmsg_type == RTM_NEWLINK || nh->nlmsg_type == RTM_DELLINK) &&
          nh->nlmsg_len >= NLMSG_SPACE(sizeof(ifinfomsg)))
        Parse(nh, fn);
      if (step >= left) break;
      p += step;
      left -= step;
    }
  }
}

void LinkMonitor::Parse(const nlmsghdr* nh, const std::function<void(const Link&)>& fn) {
  const auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(nh));
  const char* p = reinterpret_cast<const char*>(nh) + NLMSG_SPACE(sizeof(ifinfomsg));
  size_t left = nh->nlmsg_len - NLMSG_SPACE(sizeof(ifinfomsg));
  while (left >= sizeof(rtattr)) {
    const auto* a = reinterpret_cast<const rtattr*>(p);
    if (a->rta_len < sizeof(rtattr) || a->rta_len > left) return;
    if (a->rta_type == IFLA_IFNAME) {
      const char* name = static_cast<const char*>(RTA_DATA(a));
      const size_t max = a->rta_len - RTA_LENGTH(0);
      Link link;
      link.ifname = std::string_view(name, strnlen(name, max));
      link.removed = nh->nlmsg_type == RTM_DELLINK;
      link.up = (ifi->ifi_flags & IFF_UP) != 0;
      link.lower_up = (ifi->ifi_flags & IFF_LOWER_UP) != 0;
      fn(link);
      return;
    }
    const size_t step = RTA_ALIGN(a->rta_len);
    if (step >= left) return;
    p += step;
    left -= step;
  }
}

std::string LinkWatcher::Start(Callbacks callbacks, std::chrono::milliseconds tick) {
  Stop();
  cb_ = std::move(callbacks);
  tick_ = tick;
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  thread_ = std::thread([this] { Run(); });
  return links_.ok() ? std::string() : links_.error();
}

void LinkWatcher::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    if (write(stop_fd_, &one, sizeof(one)) < 0) {
    }
    thread_.join();
  }
  if (stop_fd_ >= 0) close(stop_fd_);
  stop_fd_ = -1;
}

void LinkWatcher::Run() {
  const int timeout = tick_.count() > 0 && cb_.on_tick ? static_cast<int>(tick_.count()) : -1;
  for (;;) {
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {links_.fd(), POLLIN, 0}};
    const int n = poll(fds, links_.ok() ? 2 : 1, timeout);
    if (n < 0 && errno != EINTR) return;
    if (n > 0 && fds[0].revents) return;
    bool changed = false;
    if (n > 0 && links_.ok() && (fds[1].revents & POLLIN)) {
      const bool complete = links_.Drain([&](const LinkMonitor::Link& l) {
        if (!changed && cb_.ours(l.ifname)) changed = true;
      });
      changed = changed || !complete;
    }
    if (!changed && timeout >= 0 && n >= 0) changed = cb_.on_tick();
    if (changed) cb_.changed();
  }
}

}  // namespace devplug::common
