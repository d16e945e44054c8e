#include "links.h"

#include <linux/netlink.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "devplug/common/pci.h"

namespace devplug::macvtap {

using common::LinkInfo;
using std::chrono::steady_clock;

bool IsStackedKind(const std::string& kind) {
  static constexpr const char* kStacked[] = {"vlan",   "macvlan", "macvtap", "ipvlan",
                                             "ipvtap", "macsec",  "vxlan"};
  return std::any_of(std::begin(kStacked), std::end(kStacked),
                     [&](const char* k) { return kind == k; });
}

namespace {

std::string Names(const std::vector<const LinkInfo*>& links) {
  std::string out;
  for (const LinkInfo* l : links) out += (out.empty() ? "" : ", ") + l->name;
  return out;
}

// The PCI function a link sits on: the kernel says so itself from 5.15
// on; older kernels through sysfs.
std::string PciOf(const common::HostRoot& root, const LinkInfo& l) {
  if (l.parent_bus == "pci") return l.parent_dev;
  if (!l.parent_bus.empty()) return {};
  std::error_code ec;
  const auto target =
      std::filesystem::read_symlink(root.Path("/sys/class/net/" + l.name + "/device"), ec);
  if (ec) return {};
  const std::string name = target.filename().string();
  return common::IsPciAddress(name) ? name : std::string();
}

}  // namespace

Found FindLower(common::RouteSocket& rt, const common::HostRoot& root, const LowerSelector& sel) {
  std::optional<LinkInfo> found;
  if (sel.kind == LowerSelector::kName) {
    LinkInfo l;
    const int rc = rt.Link(sel.value, &l);
    if (rc == -ENODEV) return std::optional<Lower>();
    if (rc < 0) return std::string("asking the kernel for ") + sel.value + ": " + strerror(-rc);
    found = std::move(l);
  } else {
    std::vector<LinkInfo> links;
    if (const int rc = rt.Links(&links); rc < 0)
      return std::string("listing links: ") + strerror(-rc);
    std::vector<const LinkInfo*> match;
    for (const LinkInfo& l : links) {
      if (IsStackedKind(l.kind)) continue;
      if (sel.kind == LowerSelector::kMac ? l.address == sel.value : PciOf(root, l) == sel.value)
        match.push_back(&l);
    }
    if (match.size() > 1)
      return std::to_string(match.size()) + " links match " + sel.text + " (" + Names(match) +
             "): name one in lower_device";
    if (match.empty()) return std::optional<Lower>();
    found = *match.front();
  }
  Lower out;
  out.link = std::move(*found);
  out.pci = PciOf(root, out.link);
  out.numa_node =
      out.pci.empty() ? -1 : common::NumaNodeOf(root.Path("/sys/bus/pci/devices/" + out.pci));
  return std::optional<Lower>(std::move(out));
}

TapNodeWaiter::TapNodeWaiter(int netns_fd, const common::HostRoot& root) : root_(root) {
  fd_ = common::SocketInNetns(netns_fd, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK,
                              NETLINK_KOBJECT_UEVENT);
  if (fd_ < 0) {
    fd_ = -1;
    lost_ = true;
    return;
  }
  // The kernel's multicast group (1), not udevd's.
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = 1;
  const int size = 1 << 20;
  setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  if (bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd_);
    fd_ = -1;
    lost_ = true;
  }
}

TapNodeWaiter::~TapNodeWaiter() {
  if (fd_ >= 0) close(fd_);
}

std::string TapNodeWaiter::DeviceNumbers(const std::string& devname,
                                         steady_clock::time_point deadline) {
  if (fd_ < 0) return {};
  char buf[8192];
  for (;;) {
    const ssize_t len = recv(fd_, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    if (len < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {
        lost_ = true;
        continue;
      }
      if (errno != EAGAIN) return {};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady_clock::now());
      if (left.count() <= 0) return {};
      pollfd p{fd_, POLLIN, 0};
      poll(&p, 1, static_cast<int>(left.count()) + 1);
      continue;
    }
    // "add@/devices/...\0ACTION=add\0SUBSYSTEM=macvtap\0DEVNAME=tap7\0MAJOR=..."
    buf[len] = '\0';
    std::string subsystem, name, major, minor, action;
    for (const char* p = buf; p < buf + len; p += std::strlen(p) + 1) {
      const std::string_view kv(p);
      auto take = [&](std::string_view key, std::string* into) {
        if (kv.substr(0, key.size()) == key) *into = std::string(kv.substr(key.size()));
      };
      take("ACTION=", &action);
      take("SUBSYSTEM=", &subsystem);
      take("DEVNAME=", &name);
      take("MAJOR=", &major);
      take("MINOR=", &minor);
    }
    if (action == "add" && subsystem == "macvtap" && name == devname && !major.empty())
      return major + ":" + minor;
  }
}

std::string TapNodeWaiter::Wait(int ifindex, steady_clock::time_point deadline) {
  const std::string devname = "tap" + std::to_string(ifindex);
  const std::string node = root_.Path("/dev/" + devname);
  const std::string numbers = DeviceNumbers(devname, deadline);
  auto matches = [&]() {
    struct stat st {};
    if (stat(node.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return false;
    if (numbers.empty()) return true;  // the uevent was lost: the name must do
    return std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev)) == numbers;
  };
  if (matches()) return {};
  if (numbers.empty() && !lost_)
    return "the kernel sent no uevent for " + devname + " (is the macvtap driver loaded?)";
  // A /dev that udevd fills in: wait for the node to be made or replaced.
  const int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (in >= 0) {
    inotify_add_watch(in, root_.Path("/dev").c_str(), IN_CREATE | IN_ATTRIB | IN_MOVED_TO);
    while (!matches()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{in, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count()) + 1) > 0) {
        char drain[4096];
        while (read(in, drain, sizeof(drain)) > 0) {
        }
      }
    }
    close(in);
  }
  if (matches()) return {};
  struct stat st {};
  if (stat(node.c_str(), &st) == 0)
    return node + " is not the device " + numbers +
           " of the new link (another network namespace's macvtap link has the same ifindex)";
  return node + " did not appear (is " + root_.Path("/dev") + " the host's devtmpfs?)";
}

}  // namespace devplug::macvtap
