// macvtap module: L2 networking for KubeVirt VMs. One resource per lower
// link: `capacity` device IDs <link_prefix><n> ("dataplaneMvp0"...), listed
// while the lower link exists. Allocate (re)creates a macvtap link named
// after each ID on the lower link, in the host's network namespace, and
// hands the container its /dev/tap<ifindex>; the macvtap CNI then moves the
// link into the pod. A link left in the host's namespace after its pod (a
// sandbox that failed before the CNI ran) is deleted on release.
//
// Keys: see README.md and the kKeys table below.
//
// Kernel state used:
//   rtnetlink (NETLINK_ROUTE) in the namespace of `netns`: the lower link
//     (RTM_GETLINK), RTM_NEWLINK/RTM_DELLINK of macvtap links, and the
//     RTMGRP_LINK messages that say when the lower link comes, goes, or
//     changes state (no uevent says when a link goes down).
//   The kernel's uevent of the macvtap class device (NETLINK_KOBJECT_UEVENT
//     in the same namespace): the device numbers of /dev/tap<ifindex>.
//   host_root/dev/tap<ifindex> (devtmpfs); host_root/sys/bus/pci/devices/
//     <lower's PCI function>/numa_node for topology.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "devplug/common/cxx_module.h"
#include "devplug/common/env.h"
#include "devplug/common/fs.h"
#include "devplug/common/netlink.h"
#include "links.h"
#include "settings.h"

namespace devplug::macvtap {
namespace {

using common::DeviceSink;
using common::Host;
using common::Ids;
using common::Instance;
using common::LinkInfo;
using common::ModuleError;
using common::Recipe;
using std::chrono::steady_clock;

// How long Allocate waits for a new link's /dev/tap node.
constexpr std::chrono::milliseconds kNodeWait{2000};
// A link this young may belong to a pod the kubelet has not recorded yet
// (it records an allocation after Allocate answers): release waits.
constexpr std::chrono::seconds kYoungLink{2};

// Link-name prefixes in use, per network namespace: two resources with one
// prefix would take each other's links. Counted per instance: a reload's
// new instance of the same resource (or one a refused reload staged) holds
// the entry beside the running one, and the last one out removes it.
struct PrefixOwner {
  std::string resource;
  int instances = 0;
};
std::mutex g_prefix_mu;
std::map<std::pair<std::string, std::string>, PrefixOwner> g_prefixes;  // (netns, prefix)

class Macvtap : public Instance {
 public:
  Macvtap(Host host, Settings s, int netns_fd)
      : Instance(host),
        s_(std::move(s)),
        root_(std::string(host.host_root())),
        netns_fd_(netns_fd),
        rt_(netns_fd),
        env_key_(common::EnvNameStrict("MACVTAP_INTERFACE", host.resource_name())) {}

  ~Macvtap() override {
    watcher_.Stop();
    {
      std::lock_guard lock(g_prefix_mu);
      auto it = g_prefixes.find({s_.netns, s_.link_prefix});
      if (it != g_prefixes.end() && it->second.resource == host().resource_name() &&
          --it->second.instances == 0)
        g_prefixes.erase(it);
    }
    if (netns_fd_ >= 0) close(netns_fd_);
  }

  const common::RouteSocket& route() const { return rt_; }

  void ListDevices(DeviceSink& sink) override {
    if (!watcher_.running()) StartWatcher();
    Found found = FindLower(rt_, root_, s_.lower);
    std::string state;
    std::optional<Lower> lower;
    if (auto* why = std::get_if<std::string>(&found)) {
      state = *why;
    } else {
      lower = std::get<std::optional<Lower>>(std::move(found));
      state = lower ? lower->link.name + "/" + std::to_string(lower->link.ifindex) : "gone";
    }
    {
      std::lock_guard lock(mu_);
      lower_ifindex_ = lower ? lower->link.ifindex : 0;
      lower_name_ = lower ? lower->link.name : std::string();
    }
    if (state != last_state_) {
      if (lower)
        host().Info("lower link " + lower->link.name + " (ifindex " +
                    std::to_string(lower->link.ifindex) + (lower->pci.empty() ? "" : ", PCI ") +
                    lower->pci + "): listing " + std::to_string(s_.capacity) + " devices");
      else if (state == "gone")
        host().Warn("lower link " + s_.lower.text + " does not exist: no devices listed");
      else
        host().Warn("lower link " + s_.lower.text + ": " + state + ": no devices listed");
      last_state_ = state;
    }
    if (!lower) return;
    const unsigned flags = lower->link.flags;
    std::string reason;
    if (s_.require_link) {
      if (!(flags & IFF_UP))
        reason = lower->link.name + " is down";
      else if (!(flags & IFF_LOWER_UP))
        reason = lower->link.name + " has no carrier";
    }
    for (int64_t n = 0; n < s_.capacity; ++n)
      sink.Add(s_.link_prefix + std::to_string(n), reason.empty(), lower->numa_node, reason);
  }

  bool Allocate(const Ids& ids, Recipe& resp) override {
    if (!rt_.ok()) throw ModuleError(EIO, rt_.error());
    Found found = FindLower(rt_, root_, s_.lower);
    if (auto* why = std::get_if<std::string>(&found))
      throw ModuleError(ENODEV, "lower link " + s_.lower.text + ": " + *why);
    const std::optional<Lower>& lower = std::get<std::optional<Lower>>(found);
    if (!lower) throw ModuleError(ENODEV, "lower link " + s_.lower.text + " does not exist");
    // Opened before any link is made, so that no uevent is missed.
    TapNodeWaiter nodes(netns_fd_, root_);
    std::string names;
    // The links this call made: a call that fails part-way takes them back,
    // since no pod will ever hold them and no release would run for them.
    std::vector<std::pair<std::string, int>> made;
    try {
      for (std::string_view id_view : ids) {
        const std::string id(id_view);
        const LinkInfo link = Recreate(id, lower->link);
        const int ifindex = link.ifindex;
        made.emplace_back(id, ifindex);
        if (std::string why = nodes.Wait(ifindex, steady_clock::now() + kNodeWait); !why.empty())
          throw ModuleError(ETIMEDOUT, "macvtap link " + id + ": " + why);
        const std::string node = "/dev/tap" + std::to_string(ifindex);
        resp.Node(node, node, "rw");
        // For DRA's claim status: the link, and the address the kernel gave it.
        resp.Network(id, id, common::FormatHwAddress(link.address));
        names += (names.empty() ? "" : ",") + id;
      }
    } catch (...) {
      for (const auto& [id, ifindex] : made) {
        const int del = rt_.Delete(ifindex);
        if (del < 0 && del != -ENODEV)
          host().Warn("taking back macvtap link " + id +
                      " after a failed Allocate: " + strerror(-del));
        else
          host().Debug("took back macvtap link " + id + " after a failed Allocate");
      }
      throw;
    }
    {
      std::lock_guard lock(mu_);
      for (const auto& [id, ifindex] : made) made_[id] = {ifindex, steady_clock::now()};
    }
    resp.Env(env_key_, names);
    return true;
  }

  bool Release(const Ids& ids) override {
    for (std::string_view id_view : ids) {
      const std::string id(id_view);
      LinkInfo link;
      const int rc = rt_.Link(id, &link);
      if (rc == -ENODEV) continue;  // moved into its pod, gone with it
      if (rc < 0) throw ModuleError(-rc, "asking the kernel for link " + id + ": " + strerror(-rc));
      if (link.kind != "macvtap") {
        host().Warn("link " + id + " is a " + (link.kind.empty() ? "hardware" : link.kind) +
                    " link, not one of ours: left alone");
        continue;
      }
      // The ID may be someone's again already: that pod's link stays.
      if (host().PodOf(id)) continue;  // throws EAGAIN when the kubelet cannot say
      {
        std::lock_guard lock(mu_);
        auto it = made_.find(id);
        if (it != made_.end() && it->second.ifindex == link.ifindex &&
            steady_clock::now() - it->second.at < kYoungLink)
          return false;  // asked again at the next poll
      }
      const int del = rt_.Delete(link.ifindex);
      if (del < 0 && del != -ENODEV)
        throw ModuleError(-del, "deleting link " + id + ": " + strerror(-del));
      host().Info("deleted macvtap link " + id + " (ifindex " + std::to_string(link.ifindex) +
                  "), left in the host's namespace after its pod");
    }
    return true;
  }

 private:
  struct Made {
    int ifindex = 0;
    steady_clock::time_point at;
  };

  // Makes link `id` anew on `lower`, replacing a macvtap link of that name
  // (a sandbox that failed before the CNI took it); the link made.
  LinkInfo Recreate(const std::string& id, const LinkInfo& lower) {
    LinkInfo old;
    const int rc = rt_.Link(id, &old);
    if (rc == 0) {
      if (old.kind != "macvtap")
        throw ModuleError(EEXIST, "a " + (old.kind.empty() ? std::string("hardware") : old.kind) +
                                      " link named " + id +
                                      " exists in the host's network namespace; devplug only "
                                      "replaces macvtap links");
      if (const int del = rt_.Delete(old.ifindex); del < 0 && del != -ENODEV)
        throw ModuleError(-del, "deleting the old link " + id + ": " + strerror(-del));
      host().Debug("replaced macvtap link " + id + " (ifindex " + std::to_string(old.ifindex) +
                   ")");
    } else if (rc != -ENODEV) {
      throw ModuleError(-rc, "asking the kernel for link " + id + ": " + strerror(-rc));
    }
    common::LinkRequest req(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
    req.SetFlags(IFF_UP, IFF_UP);
    req.PutString(IFLA_IFNAME, id);
    req.PutU32(IFLA_LINK, static_cast<uint32_t>(lower.ifindex));
    if (s_.mtu) req.PutU32(IFLA_MTU, s_.mtu);
    const size_t info = req.Nest(IFLA_LINKINFO);
    req.PutString(IFLA_INFO_KIND, "macvtap");
    const size_t data = req.Nest(IFLA_INFO_DATA);
    req.PutU32(IFLA_MACVLAN_MODE, s_.mode);
    req.End(data);
    req.End(info);
    std::string why;
    if (const int add = rt_.Execute(req, &why); add < 0)
      throw ModuleError(-add, "creating macvtap link " + id + " (" + s_.mode_name + ") on " +
                                  lower.name + ": " + strerror(-add) +
                                  (why.empty() ? "" : " (" + why + ")"));
    LinkInfo made;
    if (const int get = rt_.Link(id, &made); get < 0)
      throw ModuleError(-get, "the new link " + id + " is gone: " + strerror(-get));
    return made;
  }

  void StartWatcher() {
    const std::string why = watcher_.Start(
        {[this](const common::LinkMonitor::Link& l) {
           std::lock_guard lock(mu_);
           if (lower_ifindex_ == 0)  // looking for it: by name, or any new link
             return s_.lower.kind != LowerSelector::kName || l.ifname == s_.lower.value;
           return l.ifindex == lower_ifindex_ || l.ifname == lower_name_;
         },
         [this] { host().DevicesChanged(); }, nullptr},
        std::chrono::milliseconds(0), netns_fd_);
    if (!why.empty()) host().Warn(why + ": lower link changes are seen only at a resync");
  }

  Settings s_;
  common::HostRoot root_;
  int netns_fd_;
  common::RouteSocket rt_;  // the worker thread's
  const std::string env_key_;
  std::string last_state_;
  std::mutex mu_;
  int lower_ifindex_ = 0;  // guarded by mu_ (the watcher reads them)
  std::string lower_name_;
  std::map<std::string, Made> made_;
  common::LinkWatcher watcher_;  // last: stopped before the rest goes
};

std::unique_ptr<Instance> Create(Host& host) {
  std::optional<Settings> s = ParseSettings(host);
  if (!s) return nullptr;
  int netns_fd = -1;
  if (!s->netns.empty()) {
    netns_fd = open(s->netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (netns_fd < 0) {
      host.ConfigError("netns", s->netns + ": " + strerror(errno));
      return nullptr;
    }
  }
  {
    std::lock_guard lock(g_prefix_mu);
    PrefixOwner& owner = g_prefixes[std::make_pair(s->netns, s->link_prefix)];
    if (owner.instances > 0 && owner.resource != host.resource_name()) {
      host.ConfigError("link_prefix", "\"" + s->link_prefix + "\" is also the prefix of " +
                                          owner.resource +
                                          ": the two would take each other's links; give one a "
                                          "link_prefix of its own");
      if (netns_fd >= 0) close(netns_fd);
      return nullptr;
    }
    owner.resource = host.resource_name();
    ++owner.instances;  // given back by ~Macvtap, which every path below reaches
  }
  auto inst = std::make_unique<Macvtap>(host, std::move(*s), netns_fd);
  if (!inst->route().ok()) {
    const std::string why = inst->route().error();
    host.ConfigError(netns_fd >= 0 ? "netns" : "lower_device",
                     why + (netns_fd >= 0 ? " (is it a network namespace, and are we root?)" : ""));
    return nullptr;
  }
  return inst;
}

const devplug_config_key kKeys[] = {
    {"lower_device", DEVPLUG_CONFIG_STRING, DEVPLUG_CONFIG_REQUIRED,
     "the link the macvtap links sit on: an interface name, a MAC address or a PCI address"},
    {"mode", DEVPLUG_CONFIG_STRING, 0, "\"bridge\" (default), \"vepa\", \"private\", \"passthru\""},
    {"capacity", DEVPLUG_CONFIG_INT, 0, "devices listed (default 100; 1 for passthru)"},
    {"mtu", DEVPLUG_CONFIG_INT, 0, "MTU of the links made (default 0: the lower link's)"},
    {"netns", DEVPLUG_CONFIG_STRING, 0,
     "network namespace to work in, by path (default: the agent's own), e.g. /proc/1/ns/net"},
    {"require_link", DEVPLUG_CONFIG_BOOL, 0,
     "devices are Unhealthy while the lower link is down or has no carrier (default false)"},
    {"link_prefix", DEVPLUG_CONFIG_STRING, 0,
     "device IDs and link names are <link_prefix><n> (default <resource's short name>Mvp)"},
    {nullptr, 0, 0, nullptr},
};

}  // namespace
}  // namespace devplug::macvtap

DEVPLUG_CXX_MODULE(macvtap_module, "macvtap", "1.0.0",
                   "macvtap links on a lower link, for KubeVirt VMs' L2 networks",
                   devplug::macvtap::kKeys, nullptr, devplug::macvtap::Create,
                   devplug::common::kHookAllocate | devplug::common::kHookRelease)
