// vfio module: whole PCI functions (typically SR-IOV VFs) bound to vfio-pci,
// for DPDK and KubeVirt workloads.
//
// Keys (see README.md): vendor (hex, required), devices (hex list),
// driver (default "vfio-pci"), addresses (PCI allow-list).
// Devices: one per matching function bound to the driver, ID = its PCI
// address, NUMA node from sysfs. Healthy iff it has an IOMMU group whose
// node /dev/vfio/<N> (or /dev/vfio/noiommu-<N> in no-IOMMU mode) is a
// character device and the container node /dev/vfio/vfio exists.
// Allocate (default recipes, merged by the agent): /dev/vfio/vfio, the
// group node of every device (deduplicated), and
// PCI_RESOURCE_<RESOURCE NAME> = the comma-separated addresses.
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

struct Seen {
  int numa_node = -1;
  int group = -1;
  bool healthy = false;
  std::string why;  // reason it is unhealthy
};

class Vfio : public Instance {
 public:
  Vfio(Host host, PciSelector selector, std::string driver)
      : Instance(host),
        root_(std::string(host.host_root())),
        selector_(std::move(selector)),
        driver_(std::move(driver)),
        env_key_(devplug::common::EnvNameForResource("PCI_RESOURCE", host.resource_name())) {}

  void ListDevices(DeviceSink& sink) override {
    auto scan = devplug::common::EnumeratePci(
        root_, &selector_, devplug::common::kPciIommuGroup | devplug::common::kPciNuma);
    if (!scan.ok())
      throw devplug::common::ModuleError(scan.error().code, "PCI scan failed: " +
                                                                scan.error().ToString());
    for (const auto& p : scan->problems) host().Debug("skipped during scan: " + p.ToString());

    const bool container_node = devplug::common::IsCharDevice(root_.Path(kContainerNode));
    if (container_node != container_node_ || first_scan_) {
      if (!container_node)
        host().Warn(std::string(kContainerNode) +
                    " is missing: every device is Unhealthy until the vfio module is loaded");
      else if (!first_scan_)
        host().Info(std::string(kContainerNode) + " is present again");
      container_node_ = container_node;
    }

    std::map<std::string, Seen> now;
    std::map<int, std::string> group_nodes;  // group -> node path, "" if none
    size_t healthy = 0;
    for (const auto& f : scan->functions) {
      Seen s;
      s.numa_node = f.numa_node;
      s.group = f.iommu_group;
      std::string node;
      if (f.iommu_group < 0) {
        s.why = "has no IOMMU group (is the IOMMU enabled?)";
      } else {
        auto [it, fresh] = group_nodes.try_emplace(f.iommu_group);
        if (fresh) it->second = GroupNode(f.iommu_group);
        node = it->second;
        if (node.empty()) s.why = "/dev/vfio/" + std::to_string(f.iommu_group) + " is missing";
      }
      if (s.why.empty() && !container_node) s.why = std::string(kContainerNode) + " is missing";
      s.healthy = s.why.empty();
      healthy += s.healthy;

      auto recipe = sink.Add(f.address, s.healthy, f.numa_node);
      if (recipe && s.healthy)
        recipe->Node(kContainerNode).Node(node).Env(env_key_, f.address);
      Report(f.address, s);
      now.emplace(f.address, std::move(s));
    }
    for (const auto& [address, s] : seen_)
      if (!now.count(address)) changes_["left (unbound from " + driver_ + " or removed)"].push_back(address);
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
    if (ev.subsystem != nullptr && std::string_view(ev.subsystem) == "pci" && ev.sysname)
      return selector_.MatchesAddress(ev.sysname);
    return true;
  }

  std::vector<std::string> PreferredAllocation(const Ids& available, const Ids& must_include,
                                               size_t size) override {
    std::vector<devplug::common::Placement> places;
    places.reserve(available.size());
    for (std::string_view id : available) {
      devplug::common::Placement p{std::string(id), -1, -1};
      if (auto it = seen_.find(p.id); it != seen_.end()) {
        p.numa_node = it->second.numa_node;
        p.group = it->second.group;
      }
      places.push_back(std::move(p));
    }
    return devplug::common::PackByLocality(
        places, std::vector<std::string>(must_include.begin(), must_include.end()), size);
  }

 private:
  // The group's device node as the container sees it, or "" if missing.
  std::string GroupNode(int group) {
    std::string node = "/dev/vfio/" + std::to_string(group);
    if (devplug::common::IsCharDevice(root_.Path(node))) return node;
    node = "/dev/vfio/noiommu-" + std::to_string(group);
    if (devplug::common::IsCharDevice(root_.Path(node))) {
      if (!warned_noiommu_) {
        host().Warn("VFIO runs in no-IOMMU mode (" + node +
                    "): devices are passed without DMA isolation");
        warned_noiommu_ = true;
      }
      return node;
    }
    return {};
  }

  // Notes what changed for one device since the last scan.
  void Report(const std::string& address, const Seen& s) {
    auto it = seen_.find(address);
    if (it == seen_.end()) {
      if (!s.healthy)
        changes_["Unhealthy, " + s.why].push_back(address);
      else if (!first_scan_)
        changes_["appeared"].push_back(address);
      return;
    }
    if (it->second.healthy == s.healthy) return;
    if (s.healthy)
      changes_["Healthy again"].push_back(address);
    else
      changes_["Unhealthy, " + s.why].push_back(address);
  }

  // One line per kind of change; long lists (thousands of VFs) shortened.
  void FlushReports() {
    constexpr size_t kNamed = 4;
    for (const auto& [what, addresses] : changes_) {
      std::string who;
      for (size_t i = 0; i < addresses.size() && i < kNamed; i++) who += (i ? ", " : "") + addresses[i];
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
  std::map<std::string, Seen> seen_;  // the last scan, by address
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
      host.ConfigError(key, "\"" + s + "\" is not a 16-bit PCI ID in hex, like \"8086\" or \"0x1889\"");
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
  if (driver.empty() || driver == "." || driver == ".." ||
      driver.find('/') != std::string::npos) {
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
