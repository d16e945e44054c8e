// solarflare module: AMD/Xilinx Solarflare NICs accelerated by OpenOnload
// (kernel-bypass sockets), as `shares` interchangeable devices or one device
// per NIC.
//
// Keys: see README.md and the kKeys table below.
//
// Host state read (under host_root):
//   /sys/module/onload                       the onload driver is loaded
//   /sys/module/onload/parameters/cplane_server_path  ("" = /sbin/onload_cp_server)
//   /dev/onload, /dev/onload_epoll, /dev/sfc_char     character devices
//   /sys/class/net/<if>/{type, carrier, device -> the PCI function}
//   <pci>/{driver -> .../sfc, vendor, numa_node, sfc.onload.<N>/sfc_resource/enable}
//   <lib_dir>/libonload.so*, libonload_ext.so*; <bin_dir>/onload
//
// Every rule of the contract lives in Scan(): node checks first (driver,
// nodes, control plane, libraries), then the NICs. Health flips and
// recovers on udev events (net, pci, module and the three Onload classes);
// a NIC's carrier raises no uevent, so with require_link a thread watches
// rtnetlink for the selected interfaces.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "devplug/common/cxx_module.h"
#include "devplug/common/duration.h"
#include "devplug/common/env.h"
#include "devplug/common/fs.h"
#include "devplug/common/netlink.h"
#include "devplug/common/pci.h"
#include "devplug/common/preferred.h"
#include "devplug/common/run.h"
#include "settings.h"

namespace {

using devplug::common::DeviceSink;
using devplug::common::Dir;
using devplug::common::Host;
using devplug::common::HostRoot;
using devplug::common::Ids;
using devplug::common::Instance;
using devplug::common::ModuleError;
using devplug::common::Recipe;
using devplug::solarflare::kPreloadLib;
using devplug::solarflare::Settings;
using std::chrono::milliseconds;

constexpr const char* kLibDirs[] = {"/usr/lib64", "/usr/lib/x86_64-linux-gnu",
                                    "/opt/onload/usr/lib64"};
constexpr const char* kBinDirs[] = {"/usr/bin", "/opt/onload/usr/bin"};
constexpr char kOnloadModule[] = "/sys/module/onload";
constexpr char kCplaneParam[] = "/sys/module/onload/parameters/cplane_server_path";
constexpr char kDefaultCplane[] = "/sbin/onload_cp_server";
// One NIC: a PCI function and its network interface(s).
struct Nic {
  std::string address;
  std::vector<std::string> ifnames;  // sorted
  std::string driver;
  int numa_node = -1;
  std::string enable_path;  // host path of sfc_resource/enable, "" without one
  bool onload_enabled = true;
  bool carrier = true;     // read only with require_link
  int links_up = 0;        // interfaces with carrier
  std::string no_carrier;  // the interfaces without carrier

  bool usable() const { return onload_enabled && carrier; }
  // A few words for the status: "Onload disabled", "no carrier on ens1f0".
  std::string Reason() const {
    if (!onload_enabled) return "Onload disabled";
    if (!carrier) return "no carrier on " + no_carrier;
    return "";
  }
  // The log line's longer story.
  std::string Why() const {
    if (!onload_enabled) return "Onload disabled (" + enable_path + " is not 1)";
    return Reason();
  }
  std::string Label() const {
    std::string s = address + " (";
    for (size_t i = 0; i < ifnames.size(); i++) s += (i ? "," : "") + ifnames[i];
    return s + ")";
  }
};

// What the node offers, the same for every device.
struct NodeState {
  std::string problem;             // why nothing is usable; "" when the node is fine
  std::vector<std::string> nodes;  // device nodes every container gets
  std::string lib_dir;             // resolved host dir, "" when none
  std::vector<std::string> libs;   // file names in lib_dir
  std::string script;              // host path of the onload wrapper, "" when not used
};

bool Contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string Join(const std::vector<std::string>& v, const char* sep = ",") {
  std::string s;
  for (size_t i = 0; i < v.size(); i++) s += (i ? sep : "") + v[i];
  return s;
}

// Files (regular or symlinks) in `dir` whose names start with one of
// `prefixes`, sorted.
std::vector<std::string> Libraries(const std::string& dir,
                                   const std::vector<std::string>& prefixes) {
  std::vector<std::string> out;
  devplug::common::ForEachEntry(dir, [&](int dir_fd, const struct dirent& e) {
    const std::string_view name = e.d_name;
    if (std::none_of(prefixes.begin(), prefixes.end(),
                     [&](const std::string& p) { return name.rfind(p, 0) == 0; }))
      return;
    unsigned char type = e.d_type;
    if (type == DT_UNKNOWN) {
      struct stat st;
      if (fstatat(dir_fd, e.d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
      type = S_ISREG(st.st_mode) ? DT_REG : S_ISLNK(st.st_mode) ? DT_LNK : DT_UNKNOWN;
    }
    if (type == DT_REG || type == DT_LNK) out.emplace_back(name);
  });
  std::sort(out.begin(), out.end());
  return out;
}

class Solarflare : public Instance {
 public:
  Solarflare(Host host, Settings s)
      : Instance(host),
        root_(std::string(host.host_root())),
        s_(std::move(s)),
        env_name_(devplug::common::EnvNameStrict("SFC_RESOURCE", host.resource_name())) {}

  ~Solarflare() override { watcher_.Stop(); }

  void ListDevices(DeviceSink& sink) override {
    if (s_.require_link && !watcher_.running()) StartWatcher();
    NodeState node = ScanNode();
    std::vector<Nic> nics = ScanNics();
    Report(node, nics);

    if (s_.nic_mode) {
      for (const Nic& n : nics) {
        std::string reason = node.problem;
        if (reason.empty() && s_.require_nic && !n.usable()) reason = n.Reason();
        auto r = sink.Add(n.address, reason.empty(), n.numa_node, reason);
        if (r) sink.Pci(n.address);
        if (r && reason.empty()) Fill(*r, node, &n);
      }
    } else {
      std::string reason = node.problem;
      if (reason.empty() && s_.require_nic &&
          std::none_of(nics.begin(), nics.end(), [](const Nic& n) { return n.usable(); })) {
        reason = nics.empty() ? "no Solarflare NIC found" : "no usable NIC: ";
        for (size_t i = 0; i < nics.size() && i < 4; i++)
          reason += (i ? "; " : "") + nics[i].address + " " + nics[i].Reason();
      }
      // Every node a selected NIC sits on (a pod may use any of them);
      // none when one NIC's node is unknown, which leaves the topology
      // manager free.
      std::vector<int32_t> numa;
      for (const Nic& n : nics) numa.push_back(n.numa_node);
      if (std::find(numa.begin(), numa.end(), -1) != numa.end()) numa.clear();
      for (int64_t k = 0; k < s_.shares; k++) {
        auto r = sink.Add("onload-" + std::to_string(k), reason.empty(), numa, reason);
        if (r && s_.shares > 1) sink.ShareOf("onload");
        if (r && reason.empty()) Fill(*r, node, nullptr);
      }
    }
    std::lock_guard lock(mu_);
    watch_ifnames_.clear();
    for (const Nic& n : nics) watch_ifnames_.insert(n.ifnames.begin(), n.ifnames.end());
    nics_ = std::move(nics);
    problem_ = node.problem;
    first_scan_ = false;
  }

  bool OnUdevEvent(const devplug_udev_event& ev) override {
    const std::string_view subsystem = ev.subsystem ? ev.subsystem : "";
    // Pods' veth pairs and other virtual interfaces come and go all day on
    // a Kubernetes node; a NIC is always a device under a bus.
    if (subsystem == "net")
      return !(ev.syspath && std::string_view(ev.syspath).rfind("/sys/devices/virtual/", 0) == 0);
    // Only the NIC and Onload drivers matter among kernel modules.
    if (subsystem == "module") {
      const std::string_view name = ev.sysname ? ev.sysname : "";
      return name == "onload" || name.rfind("sfc", 0) == 0 || name == "xilinx_efct";
    }
    return true;
  }

  std::vector<std::string> PreferredAllocation(const Ids& available, const Ids& must_include,
                                               size_t size) override {
    return devplug::common::PackByNuma(available, must_include, size, [&](std::string_view id) {
      for (const Nic& n : nics_)
        if (n.address == id) return n.numa_node;
      return -1;
    });
  }

  void PreStart(const Ids& ids) override;

 private:
  NodeState ScanNode() const;
  std::vector<Nic> ScanNics() const;
  void Report(const NodeState& node, const std::vector<Nic>& nics);

  // The Allocate recipe of one device: `nic` in nic mode.
  void Fill(Recipe& r, const NodeState& node, const Nic* nic) const {
    for (const std::string& path : node.nodes) r.Node(path);
    for (const std::string& lib : node.libs)
      r.Mount(node.lib_dir + "/" + lib, s_.container_lib_dir + "/" + lib, true);
    if (!node.script.empty()) r.Mount(node.script, s_.container_bin_dir + "/onload", true);
    if (s_.preload) r.Env("LD_PRELOAD", s_.container_lib_dir + "/" + kPreloadLib);
    for (const auto& [key, value] : s_.envs) r.Env(key, value);
    // The agent joins the values of several NICs with ','.
    if (nic) r.Env(env_name_, Join(nic->ifnames));
  }

  // The watcher thread (require_link): a link message naming a selected
  // interface (or lost messages) triggers a rescan, which reads the carrier
  // from sysfs. Started by the first scan, after create() has returned.
  void StartWatcher() {
    const std::string why =
        watcher_.Start({[this](const devplug::common::LinkMonitor::Link& l) {
                          std::lock_guard lock(mu_);
                          return watch_ifnames_.count(std::string(l.ifname)) > 0;
                        },
                        [this] { host().DevicesChanged(); },
                        {}},
                       milliseconds(0));
    if (!why.empty()) host().Warn(why + ": carrier changes are seen at the next event or resync");
  }

  HostRoot root_;
  const Settings s_;
  const std::string env_name_;  // SFC_RESOURCE_<NAME>
  // Threads: scans and PreferredAllocation on the instance's worker,
  // PreStart (the attach command) on its slow lane at the same time
  // (kConcurrentSlowCalls), the link watcher on its own. The worker alone
  // writes nics_ (under mu_) and reads it freely; PreStart copies what it
  // needs under mu_ and runs the command without it.
  std::vector<Nic> nics_;   // the last scan; written under mu_
  std::string problem_;     // worker only: the last scan's node problem
  bool first_scan_ = true;  // worker only

  std::mutex mu_;                         // guards nics_ writes and what other threads read
  std::set<std::string> watch_ifnames_;   // guarded by mu_
  devplug::common::LinkWatcher watcher_;  // last: stopped before the rest goes
};

NodeState Solarflare::ScanNode() const {
  NodeState node;
  auto fail = [&](std::string why) {
    if (node.problem.empty()) node.problem = std::move(why);
  };
  if (!devplug::common::Exists(root_.Path(kOnloadModule)))
    fail("onload driver not loaded (" + std::string(kOnloadModule) + " missing)");
  for (const std::string& path : s_.devices) {
    if (devplug::common::IsCharDevice(root_.Path(path)))
      node.nodes.push_back(path);
    else
      fail(path + " missing");
  }
  for (const std::string& path : s_.optional_devices)
    if (devplug::common::IsCharDevice(root_.Path(path))) node.nodes.push_back(path);
  if (s_.check_cplane && node.problem.empty()) {
    std::string server = devplug::common::ReadAttr(root_.Path(kCplaneParam)).value_or("");
    if (server.empty() || server == "(null)") server = kDefaultCplane;
    // The Onload operator runs the server through crictl from a container.
    const bool operator_layout = server.find("crictl") != std::string::npos;
    if (!operator_layout && !devplug::common::Exists(root_.Path(server)))
      fail("control-plane server " + server + " missing");
  }

  // The libraries: the configured folder, or the first that holds libonload.so.
  if (!s_.lib_dir.empty()) {
    node.lib_dir = s_.lib_dir;
  } else {
    for (const char* dir : kLibDirs)
      if (devplug::common::Exists(root_.Path(std::string(dir) + "/" + kPreloadLib))) {
        node.lib_dir = dir;
        break;
      }
  }
  if (!node.lib_dir.empty()) node.libs = Libraries(root_.Path(node.lib_dir), s_.libraries);
  // What the recipe promises must exist: LD_PRELOAD of a missing file is
  // ignored by ld.so, and the pod would run without acceleration.
  if (s_.preload && !Contains(node.libs, kPreloadLib))
    fail(std::string(kPreloadLib) + " not found in " +
         (s_.lib_dir.empty() ? Join({kLibDirs[0], kLibDirs[1], kLibDirs[2]}, ", ") : s_.lib_dir));
  if (s_.onload_script) {
    std::string bin = s_.bin_dir;
    if (bin.empty())
      for (const char* dir : kBinDirs)
        if (devplug::common::Exists(root_.Path(std::string(dir) + "/onload"))) {
          bin = dir;
          break;
        }
    if (!bin.empty() && devplug::common::Exists(root_.Path(bin + "/onload")))
      node.script = bin + "/onload";
    else
      fail("the onload script is not in " +
           (s_.bin_dir.empty() ? Join({kBinDirs[0], kBinDirs[1]}, ", ") : s_.bin_dir));
  }
  return node;
}

std::vector<Nic> Solarflare::ScanNics() const {
  std::map<std::string, Nic> by_address;
  auto net = Dir::Open(root_.Path("/sys/class/net"));
  if (!net.ok()) return {};
  auto names = net->List();
  if (!names.ok()) return {};
  for (const std::string& ifname : *names) {
    if (!s_.ifnames.empty() && !Contains(s_.ifnames, ifname)) continue;
    // One readlink tells a virtual interface (veth, bridge, VLAN: the many
    // a Kubernetes node has) from a device's: ../../devices/virtual/net/<if>.
    if (auto target = net->ReadLink(ifname.c_str());
        target.ok() && target->find("/devices/virtual/") != std::string::npos)
      continue;
    auto dir = net->Sub(ifname.c_str());
    if (!dir.ok()) continue;  // gone mid-scan
    // Virtual interfaces (veth, bridges, VLANs) have no device link.
    auto address = dir->LinkName("device");
    if (!address.ok() || !devplug::common::IsPciAddress(*address)) continue;
    if (!s_.addresses.empty() && !Contains(s_.addresses, *address)) continue;
    if (dir->ReadInt("type").value_or(-1) != 1) continue;  // ARPHRD_ETHER
    auto dev = dir->Sub("device");
    if (!dev.ok()) continue;
    const std::string driver = dev->LinkName("driver").value_or("");
    if (!Contains(s_.drivers, driver)) continue;
    const uint32_t vendor = dev->ReadHex("vendor").value_or(0);
    if (std::find(s_.vendors.begin(), s_.vendors.end(), vendor) == s_.vendors.end()) continue;

    Nic& n = by_address[*address];
    if (n.address.empty()) {
      n.address = *address;
      n.driver = driver;
      n.numa_node = static_cast<int>(dev->ReadInt("numa_node").value_or(-1));
      // Where sfc_resource is bound: sfc.onload.<N>/sfc_resource/enable.
      if (auto aux = dev->List("sfc.onload."); aux.ok()) {
        for (const std::string& a : *aux) {
          const std::string path = dev->path() + "/" + a + "/sfc_resource/enable";
          if (auto v = devplug::common::ReadAttr(path); v.ok()) {
            n.enable_path = path;
            n.onload_enabled = *v == "1";
            break;
          }
        }
      }
    }
    n.ifnames.push_back(ifname);
    if (s_.require_link) {
      // carrier reads EINVAL while the interface is administratively down.
      if (dir->Read("carrier").value_or("0") == "1")
        n.links_up++;
      else
        n.no_carrier += (n.no_carrier.empty() ? "" : ",") + ifname;
    }
  }
  std::vector<Nic> out;
  for (auto& [address, n] : by_address) {
    std::sort(n.ifnames.begin(), n.ifnames.end());
    // A NIC with several interfaces needs one with carrier.
    n.carrier = !s_.require_link || n.links_up > 0;
    out.push_back(std::move(n));
  }
  return out;
}

// One log line per change: the node's state, NICs found, gone, (un)usable.
void Solarflare::Report(const NodeState& node, const std::vector<Nic>& nics) {
  if (node.problem != problem_ || first_scan_) {
    if (!node.problem.empty())
      host().Warn("Onload not usable: " + node.problem);
    else if (!first_scan_)
      host().Info("Onload usable again");
    else
      host().Info("Onload usable" + (node.libs.empty() ? std::string(", no libraries to mount")
                                                       : ", libraries from " + node.lib_dir));
  }
  std::map<std::string, bool> before;
  for (const Nic& n : nics_) before[n.address] = n.usable();
  for (const Nic& n : nics) {
    auto it = before.find(n.address);
    const bool was_known = it != before.end() && !first_scan_;
    if (!was_known || it->second != n.usable()) {
      if (n.usable())
        host().Info(n.Label() + (was_known ? ": usable again" : ": found, driver " + n.driver) +
                    (n.numa_node >= 0 ? ", NUMA node " + std::to_string(n.numa_node) : ""));
      else
        host().Warn(n.Label() + ": not usable, " + n.Why());
    }
    if (it != before.end()) before.erase(it);
  }
  for (const auto& [address, usable] : before) host().Warn(address + ": left");
  if (first_scan_ && nics.empty()) host().Warn("no Solarflare NIC matches the selectors");
}

// nic mode with attach_command: tell the command which pod got which NICs.
void Solarflare::PreStart(const Ids& ids) {
  // An agent older than ABI 1.5 calls even without a command.
  if (s_.attach_command.empty() || ids.empty()) return;
  std::vector<std::string> ifnames;
  std::string id_list;
  {
    std::lock_guard lock(mu_);
    for (std::string_view id : ids) {
      auto it =
          std::find_if(nics_.begin(), nics_.end(), [&](const Nic& n) { return n.address == id; });
      if (it == nics_.end()) throw ModuleError(ENOENT, std::string(id) + ": NIC gone");
      ifnames.insert(ifnames.end(), it->ifnames.begin(), it->ifnames.end());
      id_list += (id_list.empty() ? "" : ",") + std::string(id);
    }
  }
  // The pod that holds them. Every NIC must name the same one: a NIC the
  // kubelet lists under two pods, or NICs of different pods, would move a
  // NIC into a pod that does not hold it, so the start fails instead (the
  // kubelet tries it again).
  std::optional<Host::Pod> pod;
  std::string unknown_why;
  for (std::string_view id : ids) {
    std::optional<Host::Pod> p;
    try {
      p = host().PodOf(std::string(id));
    } catch (const ModuleError& e) {
      if (e.code() == ENOTUNIQ) throw ModuleError(EBUSY, std::string(e.what()) + "; not attaching");
      unknown_why = e.what();
      break;
    }
    if (!p) continue;
    if (pod && (pod->pod_namespace != p->pod_namespace || pod->pod_name != p->pod_name))
      throw ModuleError(EBUSY, id_list + ": held by " + pod->pod_namespace + "/" + pod->pod_name +
                                   " and " + p->pod_namespace + "/" + p->pod_name +
                                   "; not attaching");
    if (!pod) pod = std::move(p);
  }
  std::vector<std::string> env{
      "DEVPLUG_RESOURCE=" + std::string(host().resource_name()),
      "DEVPLUG_DEVICE_IDS=" + id_list,
      "DEVPLUG_IFNAMES=" + Join(ifnames),
  };
  std::string who;
  if (pod) {
    env.push_back("DEVPLUG_POD_NAMESPACE=" + pod->pod_namespace);
    env.push_back("DEVPLUG_POD_NAME=" + pod->pod_name);
    if (!pod->pod_uid.empty()) env.push_back("DEVPLUG_POD_UID=" + pod->pod_uid);
    env.push_back("DEVPLUG_CONTAINER=" + pod->container);
    who = pod->pod_namespace + "/" + pod->pod_name + "/" + pod->container;
  } else {
    who = "an unknown pod";
    host().Warn(id_list + ": " +
                (unknown_why.empty()
                     ? "no pod holds it in the kubelet's PodResources (an init container?)"
                     : unknown_why) +
                "; running " + s_.attach_command + " without DEVPLUG_POD_*");
  }
  const auto start = std::chrono::steady_clock::now();
  auto r = devplug::common::RunProgram({s_.attach_command}, env, s_.attach_timeout);
  const auto took =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
  if (!r.ok())
    throw ModuleError(EIO, "attach " + id_list + " to " + who + ": " +
                               r.Describe(s_.attach_command, s_.attach_timeout));
  host().Info("attached " + id_list + " (" + Join(ifnames) + ") to " + who + " in " +
              devplug::common::FormatDuration(took));
}

std::unique_ptr<Instance> Create(Host& host) {
  std::optional<Settings> s = devplug::solarflare::ParseSettings(host);
  if (!s) return nullptr;
  // PreStartContainer only where there is a command to run.
  host.UsePreStart(!s->attach_command.empty());
  return std::make_unique<Solarflare>(host, std::move(*s));
}

const devplug_config_key kKeys[] = {
    {"mode", DEVPLUG_CONFIG_STRING, 0, "\"shared\" (default) or \"nic\" (one device per NIC)"},
    {"shares", DEVPLUG_CONFIG_INT, 0,
     "shared mode: pods that may use Onload at once (default 100)"},
    {"drivers", DEVPLUG_CONFIG_STRING_ARRAY, 0,
     "NIC drivers (default sfc, sfc_ef100, xilinx_efct)"},
    {"vendors", DEVPLUG_CONFIG_STRING_ARRAY, 0, "PCI vendor IDs in hex (default 1924, 10ee)"},
    {"ifnames", DEVPLUG_CONFIG_STRING_ARRAY, 0, "only these interfaces (default: any)"},
    {"addresses", DEVPLUG_CONFIG_STRING_ARRAY, 0, "only these PCI functions (default: any)"},
    {"require_nic", DEVPLUG_CONFIG_BOOL, 0,
     "no usable NIC makes the devices Unhealthy (default true)"},
    {"require_link", DEVPLUG_CONFIG_BOOL, 0, "a NIC without carrier is not usable (default false)"},
    {"check_cplane", DEVPLUG_CONFIG_BOOL, 0, "the control-plane server must exist (default true)"},
    {"devices", DEVPLUG_CONFIG_STRING_ARRAY, 0, "nodes every container gets; each must exist"},
    {"optional_devices", DEVPLUG_CONFIG_STRING_ARRAY, 0, "nodes passed only when present"},
    {"lib_dir", DEVPLUG_CONFIG_STRING, 0, "host folder of libonload.so (default auto)"},
    {"libraries", DEVPLUG_CONFIG_STRING_ARRAY, 0, "file-name prefixes mounted read-only"},
    {"container_lib_dir", DEVPLUG_CONFIG_STRING, 0,
     "where the libraries appear (default /opt/onload/usr/lib64)"},
    {"preload", DEVPLUG_CONFIG_BOOL, 0, "set LD_PRELOAD to libonload.so (default true)"},
    {"onload_script", DEVPLUG_CONFIG_BOOL, 0,
     "mount the onload wrapper script (needs preload = false)"},
    {"bin_dir", DEVPLUG_CONFIG_STRING, 0, "host folder of the onload script (default auto)"},
    {"container_bin_dir", DEVPLUG_CONFIG_STRING, 0,
     "where the script appears (default /opt/onload/usr/bin)"},
    {"envs", DEVPLUG_CONFIG_TABLE, 0,
     "environment variables for every container (EF_* profile values)"},
    {"attach_command", DEVPLUG_CONFIG_STRING, 0,
     "nic mode: program run at PreStartContainer with the pod"},
    {"attach_timeout", DEVPLUG_CONFIG_STRING, 0, "longest attach_command may run (default 10s)"},
    {nullptr, 0, 0, nullptr},
};

const char* const kSubsystems[] = {"net",          "pci",      "module", "onload",
                                   "onload_epoll", "sfc_char", nullptr};

}  // namespace

DEVPLUG_CXX_MODULE(solarflare_module, "solarflare", "1.0.0",
                   "Solarflare NICs with OpenOnload, shared or one pod per NIC", kKeys, kSubsystems,
                   Create,
                   devplug::common::kHookUdev | devplug::common::kHookPreferred |
                       devplug::common::kHookPreStart | devplug::common::kConcurrentSlowCalls)
