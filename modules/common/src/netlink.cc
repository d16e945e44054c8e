#include "devplug/common/netlink.h"

#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <vector>

namespace devplug::common {

int SocketInNetns(int netns_fd, int domain, int type, int protocol) {
  if (netns_fd < 0) {
    const int fd = socket(domain, type, protocol);
    return fd >= 0 ? fd : -errno;
  }
  // setns() moves only the calling thread: a thread made for the purpose
  // enters the namespace, makes the socket and ends.
  int result = -EIO;
  try {
    std::thread([&] {
      if (setns(netns_fd, CLONE_NEWNET) != 0) {
        result = -errno;
        return;
      }
      const int fd = socket(domain, type, protocol);
      result = fd >= 0 ? fd : -errno;
    }).join();
  } catch (const std::system_error& e) {
    return -(e.code().value() ? e.code().value() : EAGAIN);
  }
  return result;
}

LinkMonitor::LinkMonitor(int netns_fd) {
  fd_ = SocketInNetns(netns_fd, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd_ < 0) {
    error_ = std::string("rtnetlink socket: ") + std::strerror(-fd_);
    fd_ = -1;
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
      link.ifindex = ifi->ifi_index;
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

std::string LinkWatcher::Start(Callbacks callbacks, std::chrono::milliseconds tick, int netns_fd) {
  Stop();
  cb_ = std::move(callbacks);
  tick_ = tick;
  links_ = std::make_unique<LinkMonitor>(netns_fd);
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  thread_ = std::thread([this] { Run(); });
  return links_->ok() ? std::string() : links_->error();
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
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {links_->fd(), POLLIN, 0}};
    const int n = poll(fds, links_->ok() ? 2 : 1, timeout);
    if (n < 0 && errno != EINTR) return;
    if (n > 0 && fds[0].revents) return;
    bool changed = false;
    if (n > 0 && links_->ok() && (fds[1].revents & POLLIN)) {
      const bool complete = links_->Drain([&](const LinkMonitor::Link& l) {
        if (!changed && cb_.ours(l)) changed = true;
      });
      changed = changed || !complete;
    }
    if (!changed && timeout >= 0 && n >= 0) changed = cb_.on_tick();
    if (changed) cb_.changed();
  }
}

// ---- requests ----

namespace {

// The attributes of one message from `p` on, `left` bytes, walked with
// unsigned sizes; fn(type, data, len).
template <class Fn>
void ForEachAttr(const char* p, size_t left, Fn&& fn) {
  while (left >= sizeof(rtattr)) {
    const auto* a = reinterpret_cast<const rtattr*>(p);
    if (a->rta_len < sizeof(rtattr) || a->rta_len > left) return;
    fn(static_cast<uint16_t>(a->rta_type & NLA_TYPE_MASK), static_cast<const char*>(RTA_DATA(a)),
       static_cast<size_t>(a->rta_len - RTA_LENGTH(0)));
    const size_t step = RTA_ALIGN(a->rta_len);
    if (step >= left) return;
    p += step;
    left -= step;
  }
}

std::string AttrString(const char* data, size_t len) {
  return std::string(data, strnlen(data, len));
}

uint32_t AttrU32(const char* data, size_t len) {
  uint32_t v = 0;
  if (len >= sizeof(v)) std::memcpy(&v, data, sizeof(v));
  return v;
}

LinkInfo ParseLink(const nlmsghdr* nh) {
  LinkInfo out;
  const auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(nh));
  out.ifindex = ifi->ifi_index;
  out.flags = ifi->ifi_flags;
  const char* p = reinterpret_cast<const char*>(nh) + NLMSG_SPACE(sizeof(ifinfomsg));
  ForEachAttr(p, nh->nlmsg_len - NLMSG_SPACE(sizeof(ifinfomsg)),
              [&](uint16_t type, const char* data, size_t len) {
                switch (type) {
                  case IFLA_IFNAME:
                    out.name = AttrString(data, len);
                    break;
                  case IFLA_ADDRESS:
                    out.address.assign(data, len);
                    break;
                  case IFLA_MTU:
                    out.mtu = AttrU32(data, len);
                    break;
                  case IFLA_LINK:
                    out.link = static_cast<int>(AttrU32(data, len));
                    break;
                  case IFLA_PARENT_DEV_NAME:
                    out.parent_dev = AttrString(data, len);
                    break;
                  case IFLA_PARENT_DEV_BUS_NAME:
                    out.parent_bus = AttrString(data, len);
                    break;
                  case IFLA_LINKINFO:
                    ForEachAttr(data, len, [&](uint16_t t, const char* d, size_t l) {
                      if (t == IFLA_INFO_KIND) out.kind = AttrString(d, l);
                      if (t == IFLA_INFO_DATA)
                        ForEachAttr(d, l, [&](uint16_t t2, const char* d2, size_t l2) {
                          if (t2 == IFLA_MACVLAN_MODE) out.macvlan_mode = AttrU32(d2, l2);
                        });
                    });
                    break;
                  default:
                    break;
                }
              });
  return out;
}

}  // namespace

std::string FormatHwAddress(std::string_view raw) {
  std::string out;
  char b[4];
  for (size_t i = 0; i < raw.size(); ++i) {
    std::snprintf(b, sizeof(b), i ? ":%02x" : "%02x", static_cast<unsigned char>(raw[i]));
    out += b;
  }
  return out;
}

std::string ParseMacAddress(std::string_view text) {
  if (text.size() != 17) return {};
  std::string out;
  for (size_t i = 0; i < 17; i += 3) {
    if (i + 2 < 17 && text[i + 2] != ':') return {};
    unsigned v = 0;
    for (size_t k = i; k < i + 2; ++k) {
      const char c = text[k];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else
        return {};
    }
    out.push_back(static_cast<char>(v));
  }
  return out;
}

LinkRequest::LinkRequest(uint16_t type, uint16_t flags) : buf_(NLMSG_SPACE(sizeof(ifinfomsg)), 0) {
  auto* nh = reinterpret_cast<nlmsghdr*>(buf_.data());
  nh->nlmsg_type = type;
  nh->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  auto* ifi = static_cast<ifinfomsg*>(NLMSG_DATA(nh));
  ifi->ifi_family = AF_UNSPEC;
}

void LinkRequest::SetIndex(int ifindex) {
  static_cast<ifinfomsg*>(NLMSG_DATA(reinterpret_cast<nlmsghdr*>(buf_.data())))->ifi_index =
      ifindex;
}

void LinkRequest::SetFlags(unsigned flags, unsigned change) {
  auto* ifi = static_cast<ifinfomsg*>(NLMSG_DATA(reinterpret_cast<nlmsghdr*>(buf_.data())));
  ifi->ifi_flags = flags;
  ifi->ifi_change = change;
}

void LinkRequest::Put(uint16_t attr, const void* data, size_t len) {
  const size_t at = buf_.size();
  buf_.resize(at + RTA_SPACE(len), 0);
  auto* a = reinterpret_cast<rtattr*>(buf_.data() + at);
  a->rta_type = attr;
  a->rta_len = static_cast<unsigned short>(RTA_LENGTH(len));
  if (len) std::memcpy(RTA_DATA(a), data, len);
}

void LinkRequest::PutString(uint16_t attr, std::string_view s) {
  std::string z(s);
  Put(attr, z.c_str(), z.size() + 1);
}

size_t LinkRequest::Nest(uint16_t attr) {
  const size_t at = buf_.size();
  Put(static_cast<uint16_t>(attr | NLA_F_NESTED), nullptr, 0);
  return at;
}

void LinkRequest::End(size_t nest) {
  reinterpret_cast<rtattr*>(buf_.data() + nest)->rta_len =
      static_cast<unsigned short>(buf_.size() - nest);
}

RouteSocket::RouteSocket(int netns_fd) {
  fd_ = SocketInNetns(netns_fd, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd_ < 0) {
    error_ = std::string("rtnetlink socket: ") + std::strerror(-fd_);
    fd_ = -1;
    return;
  }
  const int one = 1;
  // The kernel's own words on a refused request; best effort.
  setsockopt(fd_, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
  setsockopt(fd_, SOL_NETLINK, NETLINK_GET_STRICT_CHK, &one, sizeof(one));
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  if (bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    error_ = std::string("rtnetlink bind: ") + std::strerror(errno);
    close(fd_);
    fd_ = -1;
  }
}

RouteSocket::~RouteSocket() {
  if (fd_ >= 0) close(fd_);
}

int RouteSocket::Transact(LinkRequest& req, const std::function<void(const nlmsghdr*)>& each,
                          std::string* why) {
  if (fd_ < 0) return -EBADF;
  std::vector<char>& out = req.bytes();
  auto* nh = reinterpret_cast<nlmsghdr*>(out.data());
  nh->nlmsg_len = static_cast<uint32_t>(out.size());
  nh->nlmsg_seq = ++seq_;
  const bool dump = (nh->nlmsg_flags & NLM_F_DUMP) == NLM_F_DUMP;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  for (;;) {
    const ssize_t n = sendto(fd_, out.data(), out.size(), 0, reinterpret_cast<sockaddr*>(&kernel),
                             sizeof(kernel));
    if (n >= 0) break;
    if (errno != EINTR) return -errno;
  }
  std::vector<char> buf(32768);
  for (;;) {
    // A dump's parts can be larger than the buffer: MSG_PEEK|MSG_TRUNC
    // says how large the next one is.
    ssize_t len = recv(fd_, buf.data(), 0, MSG_PEEK | MSG_TRUNC);
    if (len < 0 && errno == EINTR) continue;
    if (len > static_cast<ssize_t>(buf.size())) buf.resize(static_cast<size_t>(len));
    len = recv(fd_, buf.data(), buf.size(), 0);
    if (len < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    size_t left = static_cast<size_t>(len);
    for (const char* p = buf.data(); left >= sizeof(nlmsghdr);) {
      const auto* m = reinterpret_cast<const nlmsghdr*>(p);
      if (m->nlmsg_len < sizeof(nlmsghdr) || m->nlmsg_len > left) break;
      if (m->nlmsg_seq == seq_) {
        if (m->nlmsg_type == NLMSG_DONE) return 0;
        if (m->nlmsg_type == NLMSG_ERROR) {
          if (m->nlmsg_len < NLMSG_SPACE(sizeof(nlmsgerr))) return -EIO;
          const auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(m));
          if (why && err->error != 0 && (m->nlmsg_flags & NLM_F_ACK_TLVS)) {
            // After the error: the request echoed (its header only when
            // NLM_F_CAPPED), then the TLVs.
            size_t skip = NLMSG_SPACE(sizeof(nlmsgerr));
            if (!(m->nlmsg_flags & NLM_F_CAPPED))
              skip += NLMSG_ALIGN(err->msg.nlmsg_len) - sizeof(nlmsghdr);
            if (skip < m->nlmsg_len)
              ForEachAttr(reinterpret_cast<const char*>(m) + skip, m->nlmsg_len - skip,
                          [&](uint16_t type, const char* data, size_t l) {
                            if (type == NLMSGERR_ATTR_MSG) *why = AttrString(data, l);
                          });
          }
          if (err->error != 0 || !dump) return err->error;
        } else if (m->nlmsg_type == RTM_NEWLINK && m->nlmsg_len >= NLMSG_SPACE(sizeof(ifinfomsg)) &&
                   each) {
          each(m);
        }
        if (!dump && m->nlmsg_type == RTM_NEWLINK && !(m->nlmsg_flags & NLM_F_MULTI) &&
            !(nh->nlmsg_flags & NLM_F_ACK))
          return 0;
      }
      const size_t step = NLMSG_ALIGN(m->nlmsg_len);
      if (step >= left) break;
      p += step;
      left -= step;
    }
  }
}

int RouteSocket::Links(std::vector<LinkInfo>* out) {
  out->clear();
  LinkRequest req(RTM_GETLINK, NLM_F_DUMP);
  const uint32_t mask = RTEXT_FILTER_SKIP_STATS;
  req.PutU32(IFLA_EXT_MASK, mask);
  return Transact(
      req, [&](const nlmsghdr* m) { out->push_back(ParseLink(m)); }, nullptr);
}

int RouteSocket::Link(const std::string& name, LinkInfo* out) {
  if (name.empty() || name.size() >= IFNAMSIZ) return -ENODEV;
  LinkRequest req(RTM_GETLINK, 0);
  req.PutString(IFLA_IFNAME, name);
  req.PutU32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
  bool found = false;
  const int rc = Transact(
      req,
      [&](const nlmsghdr* m) {
        *out = ParseLink(m);
        found = true;
      },
      nullptr);
  if (rc < 0) return rc;
  return found ? 0 : -ENODEV;
}

int RouteSocket::Delete(int ifindex) {
  LinkRequest req(RTM_DELLINK, NLM_F_ACK);
  req.SetIndex(ifindex);
  return Execute(req);
}

int RouteSocket::Execute(LinkRequest& req, std::string* why) {
  auto* nh = reinterpret_cast<nlmsghdr*>(req.bytes().data());
  nh->nlmsg_flags = static_cast<uint16_t>(nh->nlmsg_flags | NLM_F_ACK);
  return Transact(req, nullptr, why);
}

}  // namespace devplug::common
