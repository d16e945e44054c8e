// rdma module: RDMA adapters (InfiniBand and RoCE HCAs) for MPI, storage and
// GPUDirect workloads, shared among pods or one pod per adapter.
//
// Keys (see README.md): mode ("shared" | "exclusive"), shares, vendors,
// devices (IB device names), ifnames, umad, port_poll_ms.
//
// sysfs read (under host_root):
//   /sys/class/infiniband/<ibdev>/device -> the PCI function (vendor,
//     numa_node, net/<ifname>); /ports/<n>/state ("4: ACTIVE")
//   /sys/class/infiniband_verbs/uverbs<k>/ibdev   -> /dev/infiniband/uverbs<k>
//   /sys/class/infiniband_mad/{umad,issm}<j>/ibdev -> /dev/infiniband/{umad,issm}<j>
// An adapter is usable when one of its ports is ACTIVE and its uverbs node
// exists.
//
// Port state changes raise no uevent. RoCE ports follow their net device, so
// an rtnetlink listener (link up/down of the adapters' interfaces) reacts at
// once; InfiniBand port states are polled every port_poll_ms (a few small
// reads), and a change triggers a rescan. udev events of the infiniband,
// infiniband_verbs and net subsystems cover adapters coming and going.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "devplug/common/cxx_module.h"
#include "devplug/common/fs.h"
#include "devplug/common/netlink.h"
#include "devplug/common/pci.h"
#include "devplug/common/preferred.h"

namespace {

using devplug::common::DeviceSink;
using devplug::common::Dir;
using devplug::common::Host;
using devplug::common::HostRoot;
using devplug::common::Ids;
using devplug::common::Instance;
using devplug::common::ModuleError;

constexpr char kRdmaCm[] = "/dev/infiniband/rdma_cm";
constexpr int kPortActive = 4, kPortActiveDefer = 5;

struct Selection {
  std::vector<uint16_t> vendors;
  std::vector<std::string> devices;  // IB device names
  std::vector<std::string> ifnames;
};

struct Port {
  int number = 0;
  int state = 0;           // 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER; 0 unreadable
  std::string state_path;  // host path, for the poller
};

struct Hca {
  std::string ibdev;
  std::string pci;  // "" for adapters without a PCI function (soft RoCE)
  uint16_t vendor = 0;
  int numa_node = -1;
  std::vector<std::string> ifnames;
  std::vector<Port> ports;
  std::string uverbs;            // "/dev/infiniband/uverbs0", "" if none
  std::vector<std::string> mad;  // umad/issm node paths
  bool verbs_node = false;       // uverbs node present as a char device

  bool port_active() const {
    return std::any_of(ports.begin(), ports.end(), [](const Port& p) {
      return p.state == kPortActive || p.state == kPortActiveDefer;
    });
  }
  bool usable() const { return port_active() && verbs_node; }
  // A few words for the status: "port 1 DOWN", "uverbs0 missing".
  std::string Reason() const {
    if (!verbs_node) return uverbs.empty() ? "no verbs device" : uverbs + " missing";
    static constexpr const char* kStates[] = {"unreadable", "DOWN",   "INIT",
                                              "ARMED",      "ACTIVE", "ACTIVE_DEFER"};
    std::string s;
    for (const Port& p : ports) {
      if (!s.empty()) s += ", ";
      s += "port " + std::to_string(p.number) + " " +
           (p.state >= 0 && p.state <= 5 ? kStates[p.state] : std::to_string(p.state));
    }
    return s.empty() ? "no ports" : s;
  }
  std::string Why() const {
    if (!verbs_node)
      return uverbs.empty() ? "has no verbs device (is ib_uverbs loaded?)" : uverbs + " is missing";
    std::string s = "no port is ACTIVE (";
    for (size_t i = 0; i < ports.size(); i++)
      s +=
          (i ? ", " : "") + std::to_string(ports[i].number) + ": " + std::to_string(ports[i].state);
    return s + ")";
  }
};

// The first integer of a sysfs value such as "4: ACTIVE".
int LeadingInt(const std::string& s) {
  int v = 0;
  size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') v = v * 10 + (s[i++] - '0');
  return i == 0 ? 0 : v;
}

// Maps ib device -> class entries ("uverbs0", "umad1", ...) of a class folder.
std::map<std::string, std::vector<std::string>> ByIbdev(const HostRoot& root, const char* cls) {
  std::map<std::string, std::vector<std::string>> out;
  auto dir = Dir::Open(root.Path(std::string("/sys/class/") + cls));
  if (!dir.ok()) return out;
  auto names = dir->List();
  if (!names.ok()) return out;
  for (const std::string& n : *names) {
    auto entry = dir->Sub(n.c_str());
    if (!entry.ok()) continue;
    if (auto ibdev = entry->Read("ibdev")) out[*ibdev].push_back(n);
  }
  return out;
}

class Rdma : public Instance {
 public:
  Rdma(Host host, bool exclusive, int64_t shares, Selection sel, bool umad, int64_t poll_ms)
      : Instance(host),
        root_(std::string(host.host_root())),
        exclusive_(exclusive),
        shares_(shares),
        sel_(std::move(sel)),
        umad_(umad),
        poll_ms_(poll_ms) {}

  ~Rdma() override { watcher_.Stop(); }

  // The watcher thread: rtnetlink link changes of our interfaces, and
  // the InfiniBand port poll. Started by the first scan, so that it calls
  // devices_changed only after create() has returned, as the ABI asks.
  void StartWatcher() {
    const std::string why =
        watcher_.Start({[this](const devplug::common::LinkMonitor::Link& l) {
                          std::lock_guard lock(mu_);
                          return watch_ifnames_.count(std::string(l.ifname)) > 0;
                        },
                        [this] { host().DevicesChanged(); }, [this] { return PortsChanged(); }},
                       std::chrono::milliseconds(poll_ms_));
    if (!why.empty()) host().Warn(why + ": RoCE link changes are seen at the next poll or resync");
  }

  void ListDevices(DeviceSink& sink) override {
    if (!watcher_.running()) StartWatcher();
    std::vector<Hca> hcas = Discover();
    ReportChanges(hcas);
    const bool rdma_cm = devplug::common::IsCharDevice(root_.Path(kRdmaCm));
    if (rdma_cm != rdma_cm_ || first_scan_) {
      if (!rdma_cm)
        host().Warn(std::string(kRdmaCm) +
                    " is missing (is rdma_ucm loaded?): containers get verbs only, no RDMA CM");
      else if (!first_scan_)
        host().Info(std::string(kRdmaCm) + " is present again");
      rdma_cm_ = rdma_cm;
    }
    auto add_nodes = [&](devplug::common::Recipe& r, const Hca& h) {
      if (h.verbs_node) r.Node(h.uverbs);
      if (umad_)
        for (const std::string& m : h.mad) r.Node(m);
    };
    if (exclusive_) {
      for (const Hca& h : hcas) {
        auto r = sink.Add(h.ibdev, h.usable(), h.numa_node, h.usable() ? "" : h.Reason());
        if (r && !h.pci.empty()) sink.Pci(h.pci);
        if (r && !h.ifnames.empty()) sink.StringAttribute("netdev", h.ifnames.front());
        if (!r || !h.usable()) continue;
        add_nodes(*r, h);
        if (rdma_cm) r->Node(kRdmaCm);
      }
    } else {
      const bool healthy =
          std::any_of(hcas.begin(), hcas.end(), [](const Hca& h) { return h.usable(); });
      // Every node an adapter sits on; none when one adapter's is unknown.
      std::vector<int32_t> numa;
      for (const Hca& h : hcas) numa.push_back(h.numa_node);
      if (std::find(numa.begin(), numa.end(), -1) != numa.end()) numa.clear();
      std::string reason;
      if (!healthy) {
        reason = hcas.empty() ? "no adapter found" : "no usable adapter: ";
        for (size_t i = 0; i < hcas.size() && i < 4; ++i)
          reason += (i ? "; " : "") + hcas[i].ibdev + " " + hcas[i].Reason();
      }
      for (int64_t k = 0; k < shares_; k++) {
        auto r = sink.Add("rdma-" + std::to_string(k), healthy, numa, reason);
        if (r && shares_ > 1) sink.ShareOf("rdma");
        if (!r || !healthy) continue;
        for (const Hca& h : hcas) add_nodes(*r, h);
        if (rdma_cm) r->Node(kRdmaCm);
      }
    }
    {
      std::lock_guard lock(mu_);
      watch_ports_.clear();
      watch_ifnames_.clear();
      for (const Hca& h : hcas) {
        for (const Port& p : h.ports) watch_ports_.emplace_back(p.state_path, p.state);
        watch_ifnames_.insert(h.ifnames.begin(), h.ifnames.end());
      }
    }
    hcas_ = std::move(hcas);
    first_scan_ = false;
  }

  bool OnUdevEvent(const devplug_udev_event& ev) override {
    // net events matter only for interfaces an ifnames selector could
    // name; without one, only adapters' own events matter.
    if (ev.subsystem && std::string_view(ev.subsystem) == "net")
      return !sel_.ifnames.empty() && ev.sysname &&
             std::find(sel_.ifnames.begin(), sel_.ifnames.end(), ev.sysname) != sel_.ifnames.end();
    return true;
  }

  std::vector<std::string> PreferredAllocation(const Ids& available, const Ids& must_include,
                                               size_t size) override {
    return devplug::common::PackByNuma(available, must_include, size, [&](std::string_view id) {
      for (const Hca& h : hcas_)
        if (h.ibdev == id) return h.numa_node;
      return -1;
    });
  }

 private:
  std::vector<Hca> Discover() {
    std::vector<Hca> out;
    auto cls = Dir::Open(root_.Path("/sys/class/infiniband"));
    if (!cls.ok()) {
      if (cls.error().code == ENOENT) return out;  // no RDMA stack loaded
      throw ModuleError(cls.error().code, cls.error().ToString());
    }
    auto names = cls->List();
    if (!names.ok()) throw ModuleError(names.error().code, names.error().ToString());
    const auto verbs = ByIbdev(root_, "infiniband_verbs");
    const auto mad = umad_ ? ByIbdev(root_, "infiniband_mad")
                           : std::map<std::string, std::vector<std::string>>{};
    auto dev_nodes = devplug::common::ListCharDevices(root_.Path("/dev/infiniband"));
    const std::vector<std::string> nodes = dev_nodes.ok() ? *dev_nodes : std::vector<std::string>{};
    auto has_node = [&](const std::string& n) {
      return std::binary_search(nodes.begin(), nodes.end(), n);
    };

    for (const std::string& ibdev : *names) {
      if (!sel_.devices.empty() &&
          std::find(sel_.devices.begin(), sel_.devices.end(), ibdev) == sel_.devices.end())
        continue;
      auto dir = cls->Sub(ibdev.c_str());
      if (!dir.ok()) continue;  // left mid-scan
      Hca h;
      h.ibdev = ibdev;
      if (auto pci = dir->LinkName("device"); pci.ok() && devplug::common::IsPciAddress(*pci)) {
        h.pci = *pci;
        auto f = devplug::common::ReadPciFunction(
            root_, h.pci, devplug::common::kPciNuma | devplug::common::kPciNet);
        if (f.ok()) {
          h.vendor = f->vendor;
          h.numa_node = f->numa_node;
          h.ifnames = f->net_interfaces;
        }
      }
      if (!sel_.vendors.empty() &&
          std::find(sel_.vendors.begin(), sel_.vendors.end(), h.vendor) == sel_.vendors.end())
        continue;
      if (!sel_.ifnames.empty() &&
          std::none_of(h.ifnames.begin(), h.ifnames.end(), [&](const std::string& i) {
            return std::find(sel_.ifnames.begin(), sel_.ifnames.end(), i) != sel_.ifnames.end();
          }))
        continue;
      if (auto ports = dir->Sub("ports"); ports.ok()) {
        if (auto list = ports->List(); list.ok()) {
          for (const std::string& n : *list) {
            Port p;
            p.number = LeadingInt(n);
            p.state_path = ports->path() + "/" + n + "/state";
            p.state = LeadingInt(devplug::common::ReadAttr(p.state_path).value_or(""));
            h.ports.push_back(std::move(p));
          }
        }
      }
      std::sort(h.ports.begin(), h.ports.end(),
                [](const Port& a, const Port& b) { return a.number < b.number; });
      if (auto v = verbs.find(ibdev); v != verbs.end() && !v->second.empty()) {
        h.uverbs = "/dev/infiniband/" + v->second.front();
        h.verbs_node = has_node(v->second.front());
      }
      if (auto m = mad.find(ibdev); m != mad.end())
        for (const std::string& n : m->second)
          if (has_node(n)) h.mad.push_back("/dev/infiniband/" + n);
      out.push_back(std::move(h));
    }
    return out;
  }

  void ReportChanges(const std::vector<Hca>& now) {
    std::map<std::string, bool> before;
    for (const Hca& h : hcas_) before[h.ibdev] = h.usable();
    for (const Hca& h : now) {
      auto it = before.find(h.ibdev);
      const bool was_known = it != before.end() && !first_scan_;
      if (!was_known || it->second != h.usable()) {
        if (h.usable())
          host().Info(h.ibdev + (was_known ? ": usable again" : ": found") +
                      (h.pci.empty() ? "" : " at " + h.pci) +
                      (h.numa_node >= 0 ? ", NUMA node " + std::to_string(h.numa_node) : ""));
        else
          host().Warn(h.ibdev + ": not usable, " + h.Why());
      }
      if (it != before.end()) before.erase(it);
    }
    for (const auto& [ibdev, usable] : before) host().Warn(ibdev + ": left");
    if (first_scan_ && now.empty()) host().Warn("no RDMA adapter matches the selectors");
  }

  bool PortsChanged() {
    std::vector<std::pair<std::string, int>> ports;
    {
      std::lock_guard lock(mu_);
      ports = watch_ports_;
    }
    for (const auto& [path, state] : ports)
      if (LeadingInt(devplug::common::ReadAttr(path).value_or("")) != state) return true;
    return false;
  }

  HostRoot root_;
  bool exclusive_;
  int64_t shares_;
  Selection sel_;
  bool umad_;
  int64_t poll_ms_;
  std::vector<Hca> hcas_;  // the last scan (worker thread only)
  bool first_scan_ = true;
  bool rdma_cm_ = true;

  std::mutex mu_;                                         // guards what the watcher reads
  std::vector<std::pair<std::string, int>> watch_ports_;  // state path, state at the last scan
  std::set<std::string> watch_ifnames_;
  devplug::common::LinkWatcher watcher_;  // last: stopped before the rest goes
};

std::unique_ptr<Instance> Create(Host& host) {
  bool ok = true;
  const std::string mode = host.String("mode").value_or("shared");
  if (mode != "shared" && mode != "exclusive") {
    host.ConfigError("mode", "must be \"shared\" or \"exclusive\", not \"" + mode + "\"");
    ok = false;
  }
  const bool exclusive = mode == "exclusive";
  const auto shares = host.Int("shares");
  if (shares && exclusive) {
    host.ConfigError("shares", "applies to mode = \"shared\" only");
    ok = false;
  } else if (shares && (*shares < 1 || *shares > 10000)) {
    host.ConfigError("shares", "must be between 1 and 10000");
    ok = false;
  }
  Selection sel;
  if (auto vendors = host.Strings("vendors")) {
    for (const std::string& v : *vendors) {
      auto id = devplug::common::ParsePciId(v);
      if (!id) {
        host.ConfigError("vendors",
                         "\"" + v + "\" is not a 16-bit PCI vendor ID in hex, like \"15b3\"");
        ok = false;
      } else {
        sel.vendors.push_back(*id);
      }
    }
  }
  auto names = [&](const char* key, std::vector<std::string>& into) {
    if (auto v = host.Strings(key)) {
      for (const std::string& n : *v) {
        if (n.empty() || n.size() > 64 || n.find('/') != std::string::npos || n == "." ||
            n == "..") {
          host.ConfigError(key, "\"" + n + "\" is not a device or interface name");
          ok = false;
        }
      }
      if (v->empty()) {
        host.ConfigError(key, "is empty; leave it out to select any");
        ok = false;
      }
      into = *v;
    }
  };
  names("devices", sel.devices);
  names("ifnames", sel.ifnames);
  const bool umad = host.Bool("umad").value_or(false);
  const int64_t poll_ms = host.Int("port_poll_ms").value_or(1000);
  if (poll_ms < 0 || poll_ms > 3'600'000) {
    host.ConfigError("port_poll_ms", "must be between 0 (off) and 3600000");
    ok = false;
  }
  if (!ok) return nullptr;
  return std::make_unique<Rdma>(host, exclusive, shares.value_or(100), std::move(sel), umad,
                                poll_ms);
}

const devplug_config_key kKeys[] = {
    {"mode", DEVPLUG_CONFIG_STRING, 0,
     "\"shared\" (default) or \"exclusive\" (one pod per adapter)"},
    {"shares", DEVPLUG_CONFIG_INT, 0,
     "shared mode: pods that may use the adapters at once (default 100)"},
    {"vendors", DEVPLUG_CONFIG_STRING_ARRAY, 0, "PCI vendor IDs in hex (default: any)"},
    {"devices", DEVPLUG_CONFIG_STRING_ARRAY, 0, "RDMA device names, e.g. mlx5_0 (default: any)"},
    {"ifnames", DEVPLUG_CONFIG_STRING_ARRAY, 0,
     "adapters with one of these net interfaces (default: any)"},
    {"umad", DEVPLUG_CONFIG_BOOL, 0, "also hand out umad/issm nodes for subnet management tools"},
    {"port_poll_ms", DEVPLUG_CONFIG_INT, 0,
     "InfiniBand port state poll in ms (default 1000; 0 off)"},
    {nullptr, 0, 0, nullptr},
};

const char* const kSubsystems[] = {"infiniband", "infiniband_verbs", "net", nullptr};

}  // namespace

DEVPLUG_CXX_MODULE(rdma_module, "rdma", "1.0.0",
                   "RDMA adapters (InfiniBand, RoCE), shared or exclusive", kKeys, kSubsystems,
                   Create, devplug::common::kHookUdev | devplug::common::kHookPreferred)
