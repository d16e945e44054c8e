// The kernel's rtnetlink (NETLINK_ROUTE): link changes as they happen, and
// questions and changes about links.
//
// Carrier up/down and admin up/down of a network interface raise no uevent;
// the kernel announces them only as RTM_NEWLINK messages. Modules whose
// health follows a link (RoCE ports, Onload NICs, macvtap lower links) watch
// this socket from a thread of their own and rescan when a message names one
// of their interfaces.
//
// Every socket here can be opened in another network namespace (a netns
// file such as /proc/1/ns/net, open in `netns_fd`): a socket keeps the
// namespace it was made in, so an agent in a pod without host networking
// still sees and changes the host's links. -1 means the caller's namespace.
#pragma once

struct nlmsghdr;

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace devplug::common {

// socket(domain, type, protocol) made inside the network namespace of
// `netns_fd` (-1: the caller's), on a short-lived thread of its own so that
// no other thread ever changes namespace. The fd, or -errno.
int SocketInNetns(int netns_fd, int domain, int type, int protocol);

class LinkMonitor {
 public:
  // Opens and binds the socket (non-blocking, close-on-exec) in the network
  // namespace of `netns_fd`; on failure ok() is false and error() says why.
  explicit LinkMonitor(int netns_fd = -1);
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
    int ifindex = 0;
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
// normally calls host devices_changed) when `ours` accepts a link message
// (by name or ifindex) or messages were lost, and, with a `tick`, asks
// `on_tick` (true: changed) every tick and after every message that was not
// ours. Start it from list_devices(), after create() has returned, as the
// ABI asks of devices_changed callers; Stop() (or the destructor) joins it.
class LinkWatcher {
 public:
  struct Callbacks {
    std::function<bool(const LinkMonitor::Link&)> ours;  // any thread: the watcher's
    std::function<void()> changed;
    std::function<bool()> on_tick;  // optional
  };
  LinkWatcher() = default;
  ~LinkWatcher() { Stop(); }
  LinkWatcher(const LinkWatcher&) = delete;
  LinkWatcher& operator=(const LinkWatcher&) = delete;

  bool running() const { return thread_.joinable(); }
  // Starts the thread, watching the links of the network namespace of
  // `netns_fd` (-1: ours); "" or why link messages cannot be had (the thread
  // then only ticks). Throws std::system_error when no thread can be made.
  std::string Start(Callbacks callbacks, std::chrono::milliseconds tick, int netns_fd = -1);
  void Stop();

 private:
  void Run();

  std::unique_ptr<LinkMonitor> links_;
  Callbacks cb_;
  std::chrono::milliseconds tick_{0};
  int stop_fd_ = -1;
  std::thread thread_;
};

// What the kernel says about one link (RTM_NEWLINK).
struct LinkInfo {
  int ifindex = 0;
  std::string name;
  unsigned flags = 0;   // IFF_UP, IFF_LOWER_UP, ...
  std::string kind;     // IFLA_INFO_KIND: "veth", "macvtap"; "" for hardware
  int link = 0;         // IFLA_LINK: the lower link's ifindex (macvlan, vlan), or 0
  std::string address;  // IFLA_ADDRESS, raw bytes
  uint32_t mtu = 0;
  std::string parent_bus;     // IFLA_PARENT_DEV_BUS_NAME ("pci"); "" when the kernel
  std::string parent_dev;     // has no parent device or predates 5.15
  uint32_t macvlan_mode = 0;  // IFLA_MACVLAN_MODE of macvlan/macvtap links
};

// "aa:bb:cc:dd:ee:ff" for a 6-byte address; hex pairs joined by ':' else.
std::string FormatHwAddress(std::string_view raw);
// The 6 bytes of "aa:bb:cc:dd:ee:ff" (either case); "" when it is not one.
std::string ParseMacAddress(std::string_view text);

// An rtnetlink request: a message of `type` with an ifinfomsg header, then
// attributes. Nest() opens a nested attribute that End() closes.
class LinkRequest {
 public:
  LinkRequest(uint16_t type, uint16_t flags);
  void SetIndex(int ifindex);
  void SetFlags(unsigned flags, unsigned change);
  void Put(uint16_t attr, const void* data, size_t len);
  void PutU32(uint16_t attr, uint32_t v) { Put(attr, &v, sizeof(v)); }
  void PutString(uint16_t attr, std::string_view s);  // NUL-terminated
  size_t Nest(uint16_t attr);
  void End(size_t nest);
  std::vector<char>& bytes() { return buf_; }

 private:
  std::vector<char> buf_;
};

// A request socket: asks the kernel about links and changes them, one
// request at a time (not thread-safe; one per thread).
class RouteSocket {
 public:
  explicit RouteSocket(int netns_fd = -1);
  ~RouteSocket();
  RouteSocket(const RouteSocket&) = delete;
  RouteSocket& operator=(const RouteSocket&) = delete;

  bool ok() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }

  // Every link of the namespace; 0 or -errno.
  int Links(std::vector<LinkInfo>* out);
  // The link called `name`: 0, -ENODEV when there is none, or -errno.
  int Link(const std::string& name, LinkInfo* out);
  // Deletes link `ifindex`: 0, -ENODEV when it is gone already, or -errno.
  int Delete(int ifindex);
  // Sends `req` with NLM_F_ACK and waits for the answer: 0 or -errno, with
  // the kernel's own words (extended ack) in *why when it gave any.
  int Execute(LinkRequest& req, std::string* why = nullptr);

 private:
  // Sends and reads every answer up to NLMSG_DONE or the ack; `each` gets
  // every RTM_NEWLINK.
  int Transact(LinkRequest& req, const std::function<void(const nlmsghdr*)>& each,
               std::string* why);

  int fd_ = -1;
  uint32_t seq_ = 0;
  std::string error_;
};

}  // namespace devplug::common
