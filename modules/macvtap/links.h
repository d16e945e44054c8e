// The kernel side of the macvtap module: finding the lower link, making and
// removing macvtap links over rtnetlink, and waiting for a link's
// /dev/tap<ifindex> node.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "devplug/common/fs.h"
#include "devplug/common/netlink.h"
#include "settings.h"

namespace devplug::macvtap {

// Kinds of links stacked on another (they copy its MAC, have no PCI
// parent of their own); never taken for a lower link found by MAC.
bool IsStackedKind(const std::string& kind);

struct Lower {
  common::LinkInfo link;
  int numa_node = -1;
  std::string pci;  // its PCI function, "" for virtual links
};

// The lower link `sel` names as the kernel has it now: the link, nullopt
// when there is none, or a message when the selector is ambiguous or the
// kernel cannot be asked.
using Found = std::variant<std::optional<Lower>, std::string>;
Found FindLower(common::RouteSocket& rt, const common::HostRoot& root, const LowerSelector& sel);

// Waits for the /dev/tap<ifindex> node of a macvtap link being created: the
// kernel's own uevent of the macvtap class device (device numbers), then
// the node under host_root/dev with those numbers (devtmpfs makes it before
// the uevent leaves; a udevd-managed /dev is waited for by inotify).
class TapNodeWaiter {
 public:
  // Opens the kernel uevent socket in the network namespace of `netns_fd`,
  // where a macvtap device's uevent goes. Call before creating the link.
  TapNodeWaiter(int netns_fd, const common::HostRoot& root);
  ~TapNodeWaiter();
  TapNodeWaiter(const TapNodeWaiter&) = delete;
  TapNodeWaiter& operator=(const TapNodeWaiter&) = delete;

  // "" once host_root/dev/tap<ifindex> is the link's character device, or
  // why not by `deadline`.
  std::string Wait(int ifindex, std::chrono::steady_clock::time_point deadline);

 private:
  // The device numbers ("246:3") from the uevent, "" when not seen by
  // `deadline` or when events were lost.
  std::string DeviceNumbers(const std::string& devname,
                            std::chrono::steady_clock::time_point deadline);

  const common::HostRoot& root_;
  int fd_ = -1;
  bool lost_ = false;
};

}  // namespace devplug::macvtap
