#include "devplug/common/netlink.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/if.h>
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
    int left = static_cast<int>(len);
    for (auto* nh = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(nh, left);
         nh = NLMSG_NEXT(nh, left)) {
      if (nh->nlmsg_type != RTM_NEWLINK && nh->nlmsg_type != RTM_DELLINK) continue;
      if (nh->nlmsg_len < NLMSG_LENGTH(sizeof(ifinfomsg))) continue;
      const auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(nh));
      int attr_len = static_cast<int>(nh->nlmsg_len) - static_cast<int>(NLMSG_LENGTH(sizeof(*ifi)));
      for (auto* a = IFLA_RTA(ifi); RTA_OK(a, attr_len); a = RTA_NEXT(a, attr_len)) {
        if (a->rta_type != IFLA_IFNAME) continue;
        const char* name = static_cast<const char*>(RTA_DATA(a));
        const size_t max = RTA_PAYLOAD(a);
        Link link;
        link.ifname = std::string_view(name, strnlen(name, max));
        link.removed = nh->nlmsg_type == RTM_DELLINK;
        link.up = (ifi->ifi_flags & IFF_UP) != 0;
        link.lower_up = (ifi->ifi_flags & IFF_LOWER_UP) != 0;
        fn(link);
        break;
      }
    }
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
