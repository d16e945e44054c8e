// vfio module: whole PCI functions (typically SR-IOV VFs) bound to vfio-pci,
// for DPDK and KubeVirt workloads.
//
// Keys (see README.md): vendor (hex, required), devices (hex list),
// driver (default "vfio-pci"), addresses (PCI allow-list).
// Devices: one per matching function bound to the driver (read from the
// driver's folder, cached per binding: see DriverBindings), ID = its PCI
// address, NUMA node from sysfs. Healthy iff it has an IOMMU group whose
// node /dev/vfio/<N> (or /dev/vfio/noiommu-<N> in no-IOMMU mode) is a
// character device and the container node /dev/vfio/vfio exists.
// Allocate (default recipes, merged by the agent): /dev/vfio/vfio, the
// group node of every device (deduplicated), where the kernel has IOMMUFD
// also /dev/iommu and each device's /dev/vfio/devices/vfio<N>, and
// PCI_RESOURCE_<RESOURCE NAME> = the comma-separated addresses.
#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "devplug/common/cxx_module.h"
#include "devplug/common/env.h"
#include "devplug/common/fs.h"
#include "devplug/common/pci.h"
#include "devplug/common/preferred.h"

namespace {

using devplug::common::DeviceSink;
using devplug::common::Host;
using devplug::common::HostRoot;
using devplug::common::Ids;
using devplug::common::Instance;
using devplug::common::PciSelector;

constexpr const char* kContainerNode = "/dev/vfio/vfio";
constexpr const char* kIommuNode = "/dev/iommu";
constexpr const char* kCdevDir = "/dev/vfio/devices";

// Why a function is unusable (none: it is Healthy).
enum class Why { kNone, kNoGroup, kNoGroupNode, kNoContainerNode };

struct Seen {
  std::string address;
  int numa_node = -1;
  int group = -1;
  Why why = Why::kNone;
  bool healthy() const { return why == Why::kNone; }
};

// What the status shows for an Unhealthy function: a few words.
std::string Reason(const Seen& s) {
  switch (s.why) {
    case Why::kNoGroup:
      return "no IOMMU group";
    case Why::kNoGroupNode:
      return "/dev/vfio/" + std::to_string(s.group) + " missing";
    case Why::kNoContainerNode:
      return std::string(kContainerNode) + " missing";
    case Why::kNone:
      break;
  }
  return "";
}

std::string Describe(const Seen& s) {
  switch (s.why) {
    case Why::kNoGroup:
      return "has no IOMMU group (is the IOMMU enabled?)";
    case Why::kNoGroupNode:
      return "/dev/vfio/" + std::to_string(s.group) + " is missing";
    case Why::kNoContainerNode:
      return std::string(kContainerNode) + " is missing";
    case Why::kNone:
      break;
  }
  return "healthy";
}

class Vfio : public Instance {
 public:
  Vfio(Host host, PciSelector selector, std::string driver)
      : Instance(host),
        root_(std::string(host.host_root())),
        selector_(std::move(selector)),
        driver_(driver),
        env_key_(devplug::common::EnvNameForResource("PCI_RESOURCE", host.resource_name())),
        bindings_(root_, std::move(driver),
                  devplug::common::kPciIommuGroup | devplug::common::kPciNuma) {}

  void ListDevices(DeviceSink& sink) override {
    auto scan = bindings_.Scan(selector_);
    if (!scan.ok())
      throw devplug::common::ModuleError(scan.error().code,
                                         "PCI scan failed: " + scan.error().ToString());
    for (const auto& p : scan->problems) host().Debug("skipped during scan: " + p.ToString());

    // One listing of /dev/vfio answers every group's health.
    IndexNodes();
    const bool container_node = container_node_now_;
    if (container_node != container_node_ || first_scan_) {
      if (!container_node)
        host().Warn(std::string(kContainerNode) +
                    " is missing: every device is Unhealthy until the vfio module is loaded");
      else if (!first_scan_)
        host().Info(std::string(kContainerNode) + " is present again");
      container_node_ = container_node;
    }

    // IOMMUFD (CONFIG_IOMMUFD, CONFIG_VFIO_DEVICE_CDEV): /dev/iommu and a
    // node per VFIO device as well, for users that take that way (KubeVirt).
    const bool iommufd = devplug::common::IsCharDevice(root_.Path(kIommuNode)) &&
                         devplug::common::Exists(root_.Path(kCdevDir));

    std::vector<Seen> now;
    now.reserve(scan->functions.size());
    size_t healthy = 0;
    // Both the scan and the previous one are sorted by address: one merge
    // walk finds what appeared, changed and left.
    auto old = seen_.cbegin();
    const std::string left = "left (unbound from " + driver_ + " or removed)";
    for (const auto& f : scan->functions) {
      Seen& s = now.emplace_back();
      s.address = f.address;
      s.numa_node = f.numa_node;
      s.group = f.iommu_group;
      std::string node;
      if (f.iommu_group < 0)
        s.why = Why::kNoGroup;
      else if ((node = GroupNode(f.iommu_group)).empty())
        s.why = Why::kNoGroupNode;
      else if (!container_node)
        s.why = Why::kNoContainerNode;
      healthy += s.healthy();

      auto recipe = sink.Add(f.address, s.healthy(), f.numa_node, Reason(s));
      if (recipe) {
        sink.Pci(f.address)
            .StringAttribute("vendorID", devplug::common::PciIdString(f.vendor))
            .StringAttribute("deviceID", devplug::common::PciIdString(f.device));
        if (f.iommu_group >= 0) sink.IntAttribute("iommuGroup", f.iommu_group);
      }
      if (recipe && s.healthy()) {
        recipe->Node(kContainerNode).Node(node);
        if (iommufd) {
          if (std::string cdev = DeviceCdev(f.address); !cdev.empty())
            recipe->Node(kIommuNode).Node(cdev);
        }
        recipe->Env(env_key_, f.address);
      }
      for (; old != seen_.cend() && old->address < s.address; ++old)
        changes_[left].push_back(old->address);
      const bool known = old != seen_.cend() && old->address == s.address;
      Report(s, known ? &*old : nullptr);
      if (known) ++old;
    }
    for (; old != seen_.cend(); ++old) changes_[left].push_back(old->address);
    FlushReports();
    if (first_scan_ || now.size() != seen_.size())
      host().Info("found " + std::to_string(now.size()) + " function(s) bound to " + driver_ +
                  ", " + std::to_string(healthy) + " healthy");
    seen_ = std::move(now);
    first_scan_ = false;
  }

  bool OnUdevEvent(const devplug_udev_event& ev) override {
    // A pci event outside the allow-list cannot concern us; vfio events
    // (group nodes coming and going) always may.
    if (ev.subsystem != nullptr && std::string_view(ev.subsystem) == "pci" && ev.sysname) {
      if (!selector_.MatchesAddress(ev.sysname)) return false;
      bindings_.Forget(ev.sysname);  // re-read it, whatever the event was
    }
    return true;
  }

  std::vector<std::string> PreferredAllocation(const Ids& available, const Ids& must_include,
                                               size_t size) override {
    std::vector<devplug::common::Placement> places;
    places.reserve(available.size());
    for (std::string_view id : available) {
      devplug::common::Placement p{std::string(id), -1, -1};
      if (const Seen* s = Find(seen_, id)) {
        p.numa_node = s->numa_node;
        p.group = s->group;
      }
      places.push_back(std::move(p));
    }
    return devplug::common::PackByLocality(
        places, std::vector<std::string>(must_include.begin(), must_include.end()), size);
  }

 private:
  static const Seen* Find(const std::vector<Seen>& list, std::string_view address) {
    auto it = std::lower_bound(list.begin(), list.end(), address,
                               [](const Seen& s, std::string_view a) { return s.address < a; });
    return it != list.end() && it->address == address ? &*it : nullptr;
  }

  // Reads /dev/vfio once: the container node and the groups' nodes.
  void IndexNodes() {
    container_node_now_ = false;
    groups_.clear();
    noiommu_groups_.clear();
    auto err =
        devplug::common::ForEachEntry(root_.Path("/dev/vfio"), [&](int dir, const dirent& ent) {
          if (!devplug::common::IsCharDeviceEntry(dir, ent)) return;
          std::string_view v = ent.d_name;
          if (v == "vfio") container_node_now_ = true;
          std::vector<int>* into = &groups_;
          if (v.rfind("noiommu-", 0) == 0) {
            v.remove_prefix(8);
            into = &noiommu_groups_;
          }
          if (auto g = devplug::common::ParseInt(v); g && *g >= 0 && *g <= INT32_MAX)
            into->push_back(static_cast<int>(*g));
        });
    if (err && err->code != ENOENT) throw devplug::common::ModuleError(err->code, err->ToString());
    std::sort(groups_.begin(), groups_.end());
    std::sort(noiommu_groups_.begin(), noiommu_groups_.end());
  }

  // The function's VFIO device node (/dev/vfio/devices/vfio<N>), or "" when
  // it has none. The kernel names the device vfio<N> in class vfio-dev under
  // its PCI function (<function>/vfio-dev/vfio<N>) and makes its node in
  // vfio/devices/.
  std::string DeviceCdev(const std::string& address) {
    std::string node;
    devplug::common::ForEachEntry(root_.Path("/sys/bus/pci/devices/" + address + "/vfio-dev"),
                                  [&](int, const dirent& ent) {
                                    const std::string_view n = ent.d_name;
                                    if (node.empty() && n.rfind("vfio", 0) == 0 && n.size() > 4 &&
                                        devplug::common::ParseInt(n.substr(4)))
                                      node = std::string(kCdevDir) + "/" + std::string(n);
                                  });
    if (node.empty() || !devplug::common::IsCharDevice(root_.Path(node))) return {};
    return node;
  }

  // The group's device node as the container sees it, or "" if missing.
  std::string GroupNode(int group) {
    if (std::binary_search(groups_.begin(), groups_.end(), group))
      return "/dev/vfio/" + std::to_string(group);
    if (std::binary_search(noiommu_groups_.begin(), noiommu_groups_.end(), group)) {
      std::string node = "/dev/vfio/noiommu-" + std::to_string(group);
      if (!warned_noiommu_) {
        host().Warn("VFIO runs in no-IOMMU mode (" + node +
                    "): devices are passed without DMA isolation");
        warned_noiommu_ = true;
      }
      return node;
    }
    return {};
  }

  // Notes what changed for one device since the last scan (`old`: its
  // previous state, if it had one).
  void Report(const Seen& s, const Seen* old) {
    if (old == nullptr) {
      if (!s.healthy())
        changes_["Unhealthy, " + Describe(s)].push_back(s.address);
      else if (!first_scan_)
        changes_["appeared"].push_back(s.address);
      return;
    }
    if (old->healthy() == s.healthy()) return;
    if (s.healthy())
      changes_["Healthy again"].push_back(s.address);
    else
      changes_["Unhealthy, " + Describe(s)].push_back(s.address);
  }

  // One line per kind of change; long lists (thousands of VFs) shortened.
  void FlushReports() {
    constexpr size_t kNamed = 4;
    for (const auto& [what, addresses] : changes_) {
      std::string who;
      for (size_t i = 0; i < addresses.size() && i < kNamed; i++)
        who += (i ? ", " : "") + addresses[i];
      if (addresses.size() > kNamed)
        who = std::to_string(addresses.size()) + " functions (" + who + ", ...)";
      const bool bad = what.rfind("Unhealthy", 0) == 0 || what.rfind("left", 0) == 0;
      host().Log(bad ? DEVPLUG_LOG_WARN : DEVPLUG_LOG_INFO, who + ": " + what);
    }
    changes_.clear();
  }

  HostRoot root_;
  PciSelector selector_;
  std::string driver_;
  std::string env_key_;
  devplug::common::DriverBindings bindings_;
  std::vector<int> groups_, noiommu_groups_;  // nodes in /dev/vfio, sorted
  bool container_node_now_ = false;
  std::vector<Seen> seen_;                                   // the last scan, sorted by address
  std::map<std::string, std::vector<std::string>> changes_;  // what -> addresses
  bool first_scan_ = true;
  bool container_node_ = true;
  bool warned_noiommu_ = false;
};

// Reads a list of hex PCI IDs; false after a config error.
bool ParseIds(Host& host, const char* key, const std::vector<std::string>& in,
              std::vector<uint16_t>& out) {
  for (const std::string& s : in) {
    auto id = devplug::common::ParsePciId(s);
    if (!id) {
      host.ConfigError(key,
                       "\"" + s + "\" is not a 16-bit PCI ID in hex, like \"8086\" or \"0x1889\"");
      return false;
    }
    out.push_back(*id);
  }
  return true;
}

std::unique_ptr<Instance> Create(Host& host) {
  PciSelector sel;
  bool ok = ParseIds(host, "vendor", {host.String("vendor").value_or("")}, sel.vendors);
  if (auto devices = host.Strings("devices")) {
    if (devices->empty()) {
      host.ConfigError("devices", "is empty; leave it out to take every device of the vendor");
      ok = false;
    } else {
      ok = ParseIds(host, "devices", *devices, sel.devices) && ok;
    }
  }
  std::string driver = host.String("driver").value_or("vfio-pci");
  if (driver.empty() || driver == "." || driver == ".." || driver.find('/') != std::string::npos) {
    host.ConfigError("driver", "must be a kernel driver name, like \"vfio-pci\"");
    ok = false;
  }
  sel.drivers = {driver};
  if (auto addresses = host.Strings("addresses")) {
    for (const std::string& a : *addresses) {
      auto norm = devplug::common::NormalizePciAddress(a);
      if (!norm) {
        host.ConfigError("addresses", "\"" + a +
                                          "\" is not a PCI function address, like "
                                          "\"0000:3b:02.0\" or \"3b:02.0\"");
        ok = false;
        continue;
      }
      sel.addresses.push_back(*norm);
    }
    if (addresses->empty()) {
      host.ConfigError("addresses", "is empty; leave it out to take every matching function");
      ok = false;
    }
  }
  if (!ok) return nullptr;
  return std::make_unique<Vfio>(host, std::move(sel), std::move(driver));
}

const devplug_config_key kKeys[] = {
    {"vendor", DEVPLUG_CONFIG_STRING, DEVPLUG_CONFIG_REQUIRED,
     "PCI vendor ID in hex, e.g. \"8086\""},
    {"devices", DEVPLUG_CONFIG_STRING_ARRAY, 0, "PCI device IDs in hex (default: any)"},
    {"driver", DEVPLUG_CONFIG_STRING, 0, "driver the functions are bound to (default vfio-pci)"},
    {"addresses", DEVPLUG_CONFIG_STRING_ARRAY, 0, "only these PCI addresses (default: any)"},
    {nullptr, 0, 0, nullptr},
};

const char* const kSubsystems[] = {"pci", "vfio", nullptr};

}  // namespace

DEVPLUG_CXX_MODULE(vfio_module, "vfio", "1.0.0",
                   "PCI functions bound to vfio-pci, for DPDK and KubeVirt", kKeys, kSubsystems,
                   Create, devplug::common::kHookUdev | devplug::common::kHookPreferred)
