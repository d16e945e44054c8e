// nvidia module: NVIDIA GPUs or their MIG devices, discovered through NVML
// (loaded at run time, one session per process, see session.h) or the
// driver's /proc/driver/nvidia, with XID-based health.
//
// Keys (see README.md): discovery, nvml_library, shares, ignored_xids, cdi,
// mig, mig_profile, device_list_strategy, driver_mount, extra_mounts, envs.
// Devices: one per GPU (mig = "none") or per MIG device (mig = "only"), ID =
// its UUID ("GPU-…", "MIG-…"), or <uuid>::<k> for shares > 1 (time-slicing
// replicas, not isolated). Topology: the (parent) GPU's numa_node. Health:
// found, /dev/nvidia<minor>, its procfs entry, a MIG device's two
// capability nodes and the driver mount exist, and no critical XID since
// the GPU last (re)appeared; every Unhealthy device carries a short reason.
// Allocate (default recipes, merged by the agent): the control nodes that
// exist, /dev/nvidia<minor>, a MIG device's capability nodes, the devices
// named per device_list_strategy, the driver and extra mounts, envs.
#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "devplug/common/cxx_module.h"
#include "devplug/common/fs.h"
#include "devplug/common/pci.h"
#include "devplug/common/preferred.h"
#include "mig.h"
#include "nvml.h"
#include "peers.h"
#include "placement.h"
#include "session.h"
#include "settings.h"

namespace {

constexpr uint32_t kNvidiaVendor = 0x10de;

using devplug::common::DeviceSink;
using devplug::common::Host;
using devplug::common::HostRoot;
using devplug::common::Ids;
using devplug::common::Instance;
using devplug::common::ModuleError;
using devplug::nvidia::Discovery;
using devplug::nvidia::GpuInfo;
using devplug::nvidia::HostMount;
using devplug::nvidia::Inventory;
using devplug::nvidia::kVisible;
using devplug::nvidia::MigDevice;
using devplug::nvidia::Session;
using devplug::nvidia::Settings;
using devplug::nvidia::Strategy;
namespace nvml = devplug::nvidia::nvml;

constexpr const char* kControlNodes[] = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                         "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};
constexpr char kProcGpus[] = "/proc/driver/nvidia/gpus";
constexpr char kProcCaps[] = "/proc/driver/nvidia/capabilities";
constexpr char kVolumeDir[] = "/var/run/nvidia-container-devices";
// One advertised device before replicas: a whole GPU or a MIG device.
struct Unit {
  std::string uuid;    // GPU-… or MIG-…
  std::string parent;  // the GPU's UUID (its own for a whole GPU)
  std::string pci;     // the GPU's
  std::string model;
  unsigned minor = 0;  // the GPU's /dev/nvidia<minor>
  bool mig = false;
  unsigned gi = 0, ci = 0;
  std::string profile;
  uint64_t memory = 0;  // bytes, the GPU's or the MIG device's; 0: unknown
  int numa_node = -1;
  bool found = false;   // in the latest discovery
  std::string problem;  // from discovery, for the log; "" when usable
  std::string reason;   // the same in a few words
};

// "Key:   value" lines of a procfs information file.
std::map<std::string, std::string> ParseInformation(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    auto trim = [](std::string s) {
      const char* ws = " \t\r";
      s.erase(0, s.find_first_not_of(ws));
      s.erase(s.find_last_not_of(ws) + 1);
      return s;
    };
    out[trim(line.substr(0, colon))] = trim(line.substr(colon + 1));
  }
  return out;
}

std::string_view UuidOf(std::string_view id) {
  const size_t sep = id.find("::");
  return sep == std::string_view::npos ? id : id.substr(0, sep);
}

// XID bookkeeping key: a whole GPU, or one MIG instance of it.
std::string XidKey(const std::string& gpu, unsigned gi, unsigned ci) {
  if (gi == nvml::kNoInstance) return gpu;
  return gpu + "/" + std::to_string(gi) + "/" + std::to_string(ci);
}

class Nvidia : public Instance, public Session::Listener {
 public:
  Nvidia(Host host, Settings settings)
      : Instance(host), root_(std::string(host.host_root())), s_(std::move(settings)) {}

  ~Nvidia() override {
    if (session_) session_->Unsubscribe(this);
    session_.reset();  // the last one stops the event thread and shuts NVML down
    devplug::nvidia::LeavePeers(this);
  }

  // Chooses NVML or procfs. Throws when NVML is required and not usable.
  void Start() {
    for (const std::string& w :
         devplug::nvidia::JoinPeers(this, std::string(host().resource_name()), s_.strategy))
      host().Warn(w);
    if (s_.discovery == Discovery::kProcfs) return;
    std::string why;
    session_ = Session::Acquire(s_.library, &why);
    if (!session_) {
      if (s_.discovery == Discovery::kNvml)
        throw ModuleError(ENODEV, "discovery = \"nvml\": " + why);
      if (s_.mig_only)
        throw ModuleError(ENODEV, "mig = \"only\" needs NVML, which is not usable: " + why);
      host().Warn("NVML is not usable (" + why + "); discovering GPUs from " + kProcGpus +
                  ", without XID health events or NVLink topology");
      return;
    }
    if (!session_->api().has_mig()) {
      if (s_.mig_only) {
        session_.reset();
        throw ModuleError(ENOTSUP, s_.library +
                                       " lacks NVML's MIG calls (driver older than R450?): MIG "
                                       "devices cannot be listed");
      }
      host().Info(s_.library + " lacks NVML's MIG calls: every GPU is served whole");
    }
    session_->Subscribe(this);
  }

  // ---- Session::Listener (event thread) ----
  void OnXid(const std::string& uuid, unsigned gi, unsigned ci, int64_t xid) override {
    bool changed = false;
    {
      std::lock_guard lock(mu_);
      std::vector<std::string> hit;
      if (uuid.empty())
        hit.assign(parents_.begin(), parents_.end());
      else if (parents_.count(uuid))
        hit.push_back(uuid);
      for (const std::string& gpu : hit) {
        std::string what = gpu;
        if (gi != nvml::kNoInstance)
          what += " (GPU instance " + std::to_string(gi) + ", compute instance " +
                  std::to_string(ci) + ")";
        if (s_.ignored_xids.count(xid)) {
          host().Info(what + ": XID " + std::to_string(xid) + " (application error, ignored)");
          continue;
        }
        host().Warn(what + ": critical XID " + std::to_string(xid) + ": marking " +
                    (gi == nvml::kNoInstance ? "it" : "that MIG device") + " Unhealthy");
        bad_xid_[XidKey(gpu, gi, ci)] = xid;
        changed = true;
      }
    }
    if (changed) host().DevicesChanged();
  }

  void OnChange() override { host().DevicesChanged(); }
  void Log(int32_t level, const std::string& msg) override { host().Log(level, msg); }

  // ---- Instance ----
  void ListDevices(DeviceSink& sink) override {
    const std::map<std::string, GpuInfo>* gpus = nullptr;
    if (session_) {
      inventory_ = session_->Current(*this);
      gpus = &inventory_->gpus;
    } else {
      DiscoverProcfs();
      gpus = &procfs_gpus_;
    }
    Collect(*gpus);

    std::vector<std::string> control;
    for (const char* n : kControlNodes)
      if (devplug::common::IsCharDevice(root_.Path(n))) control.push_back(n);
    const bool procfs = devplug::common::Exists(root_.Path(kProcGpus));
    const bool driver_ok =
        !s_.driver_mount || devplug::common::Exists(root_.Path(s_.driver_mount->host));
    std::vector<const HostMount*> extra;
    for (const HostMount& m : s_.extra_mounts)
      if (devplug::common::Exists(root_.Path(m.host))) extra.push_back(&m);
    std::map<std::string, int64_t> bad_xid;
    {
      std::lock_guard lock(mu_);
      bad_xid = bad_xid_;
      parents_.clear();
      for (const auto& [id, u] : units_) parents_.insert(u.parent);
    }

    for (const auto& [id, u] : units_) {
      // `problem` for the log, `reason` (a few words) for the status.
      std::string problem = u.problem, reason = u.reason;
      const std::string node = "/dev/nvidia" + std::to_string(u.minor);
      std::vector<std::string> caps;
      auto check = [&](bool ok, const std::string& p, const std::string& r) {
        if (problem.empty() && !ok) {
          problem = p;
          reason = r;
        }
      };
      check(devplug::common::IsCharDevice(root_.Path(node)), node + " is missing",
            node + " missing");
      if (procfs) {
        const std::string info = std::string(kProcGpus) + "/" + u.pci + "/information";
        check(devplug::common::Exists(root_.Path(info)), info + " is missing",
              "procfs entry missing");
      }
      if (u.mig && problem.empty()) caps = CapabilityNodes(u, &problem, &reason);
      if (problem.empty()) {
        auto whole = bad_xid.find(u.parent);
        auto mine = bad_xid.find(XidKey(u.parent, u.gi, u.ci));
        const auto hit = whole != bad_xid.end() ? whole : (u.mig ? mine : bad_xid.end());
        if (hit != bad_xid.end()) {
          problem = "critical XID " + std::to_string(hit->second) +
                    "; Unhealthy until the GPU is reset or re-appears";
          reason = "XID " + std::to_string(hit->second);
        }
      }
      check(driver_ok, s_.driver_mount ? s_.driver_mount->host + " (driver_mount) is missing" : "",
            "driver mount missing");
      Report(u, problem);
      const bool healthy = problem.empty();
      for (int64_t k = 0; k < s_.shares; k++) {
        const std::string dev_id = s_.shares == 1 ? u.uuid : u.uuid + "::" + std::to_string(k);
        auto r = sink.Add(dev_id, healthy, u.numa_node, reason);
        if (r) Describe(sink, u);
        if (r && s_.shares > 1) sink.ShareOf(u.uuid);
        if (!r || !healthy) continue;
        for (const std::string& c : control) r->Node(c);
        r->Node(node);
        for (const std::string& c : caps) r->Node(c);
        switch (s_.strategy) {
          case Strategy::kEnvvar:
            r->Env(kVisible, u.uuid);
            break;
          case Strategy::kVolumeMounts:
            r->Mount("/dev/null", std::string(kVolumeDir) + "/" + u.uuid, true);
            r->Env(kVisible, kVolumeDir);
            break;
          case Strategy::kCdi:
            // Named by devplugd's own CDI spec (the resource's `cdi`),
            // which holds this recipe under the device's ID, the UUID.
            break;
        }
        if (s_.cdi) r->Cdi("nvidia.com/gpu=" + u.uuid);  // the toolkit's spec's names
        if (s_.driver_mount) r->Mount(s_.driver_mount->host, s_.driver_mount->container, true);
        for (const HostMount* m : extra) r->Mount(m->host, m->container, true);
        for (const auto& [key, value] : s_.envs) r->Env(key, value);
      }
    }
  }

  bool OnUdevEvent(const devplug_udev_event& ev) override {
    if (!ev.sysname) return true;
    const std::string name = ev.sysname, action = ev.action ? ev.action : "";
    auto it = gpu_by_pci_.find(name);
    if (it != gpu_by_pci_.end()) {
      // The GPU was reset, re-bound or plugged back: forget its XIDs (and
      // its MIG devices'), take fresh NVML handles, and see its MIG layout
      // again before the next scan.
      if (action == "add" || action == "bind" || action == "change") {
        std::lock_guard lock(mu_);
        const std::string& gpu = it->second;
        size_t cleared = 0;
        for (auto x = bad_xid_.begin(); x != bad_xid_.end();) {
          if (x->first == gpu || x->first.rfind(gpu + "/", 0) == 0) {
            x = bad_xid_.erase(x);
            cleared++;
          } else {
            ++x;
          }
        }
        if (cleared) host().Info(gpu + ": " + action + " event; XID cleared");
      }
      if (session_) session_->Invalidate(true);
      return true;
    }
    // Another PCI function. Only a new NVIDIA one can be a new GPU: SR-IOV
    // VFs of a NIC coming and going on a GPU node must not re-initialise
    // NVML (or rescan). A function we never listed leaving changes nothing.
    if ((action == "add" || action == "bind") && IsNvidiaFunction(ev)) {
      if (session_) session_->Invalidate(true);
      return true;
    }
    return false;
  }

  std::vector<std::string> PreferredAllocation(const Ids& available, const Ids& must_include,
                                               size_t size) override {
    if (s_.mig_only) {
      return devplug::nvidia::PreferByParent(
          available, must_include, size, [this](std::string_view id) -> devplug::nvidia::Place {
            auto it = units_.find(std::string(UuidOf(id)));
            if (it == units_.end()) return {std::string(id), -1};  // a group of its own
            return {it->second.parent, it->second.numa_node};
          });
    }
    if (s_.shares == 1 && inventory_ && !inventory_->links.empty())
      return devplug::nvidia::PreferByTopology(*inventory_, available, must_include, size);
    // Replicas of one GPU form a group; NUMA first.
    std::map<std::string_view, int> index;
    int next = 0;
    for (const auto& [uuid, u] : units_) index[uuid] = next++;
    std::vector<devplug::common::Placement> places;
    for (std::string_view id : available) {
      devplug::common::Placement p{std::string(id), -1, -1};
      auto it = units_.find(std::string(UuidOf(id)));
      if (it != units_.end()) {
        p.numa_node = it->second.numa_node;
        p.group = index[it->first];
      }
      places.push_back(std::move(p));
    }
    return devplug::common::PackByLocality(
        places, std::vector<std::string>(must_include.begin(), must_include.end()), size);
  }

 private:
  // Folds a discovery into units_: found, new, reconfigured away.
  void Collect(const std::map<std::string, GpuInfo>& gpus) {
    for (auto& [id, u] : units_) u.found = false;
    gpu_by_pci_.clear();
    for (const auto& [uuid, g] : gpus) {
      if (!g.pci.empty()) gpu_by_pci_[g.pci] = uuid;
      const int numa = Numa(g.pci);
      // Structured bindings are named into the lambda: clang 14 (the
      // sanitizer build's compiler) cannot capture them.
      auto fill = [&, &uuid = uuid, &g = g](Unit& u) {
        u.parent = uuid;
        u.pci = g.pci;
        u.model = g.model;
        u.memory = g.memory;
        u.minor = g.minor;
        u.numa_node = numa;
        u.found = true;
        u.problem = g.problem;
        u.reason = g.problem.empty() ? "" : g.lost ? "lost (NVML)" : "NVML error";
      };
      if (!s_.mig_only) {
        if (g.mig_enabled) {
          if (noted_.insert(uuid).second)
            host().Info(uuid + (g.pci.empty() ? "" : " at " + g.pci) +
                        ": MIG is enabled; not served whole (its MIG devices go to resources "
                        "with mig = \"only\")");
          continue;
        }
        noted_.erase(uuid);
        Unit& u = units_[uuid];
        u.uuid = uuid;
        fill(u);
        continue;
      }
      if (!g.mig_enabled) {
        if (!g.lost && noted_.insert(uuid).second)
          host().Info(uuid + (g.pci.empty() ? "" : " at " + g.pci) +
                      ": MIG is not enabled; no MIG devices to serve");
        continue;
      }
      noted_.erase(uuid);
      for (const MigDevice& m : g.migs) {
        if (!s_.mig_profile.empty() && m.profile != s_.mig_profile) continue;
        Unit& u = units_[m.uuid];
        u.uuid = m.uuid;
        u.mig = true;
        u.gi = m.gi;
        u.ci = m.ci;
        u.profile = m.profile;
        fill(u);
        u.memory = m.memory;
      }
    }
    for (auto it = units_.begin(); it != units_.end();) {
      Unit& u = it->second;
      if (u.found) {
        ++it;
        continue;
      }
      auto p = gpus.find(u.parent);
      // The GPU is there and fully listed, this device is not: MIG was
      // reconfigured (instances destroyed, MIG switched on or off). It
      // leaves; a GPU that vanished keeps its devices listed Unhealthy.
      if (p != gpus.end() && !p->second.lost && p->second.problem.empty() &&
          p->second.mig_problem.empty()) {
        host().Info(u.uuid + ": no longer there (MIG reconfigured on " + u.parent + ")");
        reported_.erase(u.uuid);
        it = units_.erase(it);
        continue;
      }
      if (p == gpus.end()) {
        u.problem = "is gone (not reported by " + std::string(session_ ? "NVML" : "procfs") + ")";
        u.reason = "gone";
      } else if (p->second.lost || !p->second.problem.empty()) {
        u.problem = "its GPU " + (p->second.problem.empty() ? "is lost" : p->second.problem);
        u.reason = p->second.lost ? "lost (NVML)" : "NVML error";
      } else {
        u.problem = "NVML could not list it: " + p->second.mig_problem;
        u.reason = "NVML error";
      }
      ++it;
    }
  }

  // The two capability nodes of a MIG device, from the driver's access
  // files; empty with *problem set when one is missing.
  std::vector<std::string> CapabilityNodes(const Unit& u, std::string* problem,
                                           std::string* reason) const {
    const std::string gi_dir = std::string(kProcCaps) + "/gpu" + std::to_string(u.minor) +
                               "/mig/gi" + std::to_string(u.gi);
    std::vector<std::string> nodes;
    for (const std::string& access :
         {gi_dir + "/access", gi_dir + "/ci" + std::to_string(u.ci) + "/access"}) {
      auto text = devplug::common::ReadAttr(root_.Path(access));
      std::optional<unsigned> minor;
      if (text.ok()) minor = devplug::nvidia::ParseCapabilityMinor(*text);
      if (!minor) {
        *problem = access + (text.ok() ? " has no DeviceFileMinor" : " is missing");
        *reason = "MIG capability missing";
        return {};
      }
      const std::string node = "/dev/nvidia-caps/nvidia-cap" + std::to_string(*minor);
      if (!devplug::common::IsCharDevice(root_.Path(node))) {
        *problem = node + " is missing";
        *reason = node + " missing";
        return {};
      }
      nodes.push_back(node);
    }
    return nodes;
  }

  bool IsNvidiaFunction(const devplug_udev_event& ev) const {
    // The event's own device folder, else the bus's link to it.
    for (const std::string& dir : {ev.syspath ? root_.Path(ev.syspath) : std::string(),
                                   root_.Path("/sys/bus/pci/devices/" + std::string(ev.sysname))}) {
      if (dir.empty()) continue;
      if (auto vendor = devplug::common::ReadHexAttr(dir + "/vendor"); vendor.ok())
        return *vendor == kNvidiaVendor;
    }
    return false;
  }

  void DiscoverProcfs() {
    procfs_gpus_.clear();
    auto dirs = devplug::common::ListDir(root_.Path(kProcGpus));
    if (!dirs.ok()) {
      if (dirs.error().code != ENOENT) host().Warn(dirs.error().ToString());
      return;  // no driver loaded: no GPUs
    }
    for (const std::string& pci : *dirs) {
      const std::string path = root_.Path(std::string(kProcGpus) + "/" + pci + "/information");
      auto text = devplug::common::ReadAttr(path);
      if (!text.ok()) continue;
      auto info = ParseInformation(*text);
      const std::string uuid = info["GPU UUID"];
      auto minor = devplug::common::ParseInt(info["Device Minor"]);
      if (uuid.empty() || !minor || *minor < 0) {
        host().Warn(path + ": no GPU UUID or Device Minor; skipped");
        continue;
      }
      GpuInfo& g = procfs_gpus_[uuid];
      g.uuid = uuid;
      g.pci = devplug::common::NormalizePciAddress(pci).value_or(pci);
      g.minor = static_cast<unsigned>(*minor);
      g.model = info["Model"];
    }
  }

  // What a DRA ResourceSlice publishes of a unit (ABI 1.9): the GPU's PCI
  // function (a MIG device's too), what NVML calls it, its memory.
  static void Describe(DeviceSink& sink, const Unit& u) {
    if (!u.pci.empty()) sink.Pci(u.pci);
    sink.StringAttribute("uuid", u.uuid);
    if (!u.model.empty()) sink.StringAttribute("productName", u.model);
    if (u.mig) {
      sink.StringAttribute("parentUUID", u.parent);
      if (!u.profile.empty()) sink.StringAttribute("migProfile", u.profile);
    }
    if (u.memory > 0) sink.Capacity("memory", u.memory);
  }

  int Numa(const std::string& pci) const {
    if (pci.empty()) return -1;
    return devplug::common::NumaNodeOf(
        root_.Path(std::string(devplug::common::kPciDevicesDir) + "/" + pci));
  }

  void Report(const Unit& u, const std::string& problem) {
    auto it = reported_.find(u.uuid);
    const bool known = it != reported_.end();
    if (known && it->second == problem) return;
    std::string what = u.uuid;
    if (u.mig)
      what += " (MIG " + (u.profile.empty() ? std::string("device") : u.profile) + " on " +
              u.parent + ")";
    else
      what += (u.pci.empty() ? "" : " at " + u.pci) + (u.model.empty() ? "" : " (" + u.model + ")");
    if (problem.empty())
      host().Info(what + (known ? ": Healthy again" : ": found") +
                  (u.numa_node >= 0 ? ", NUMA node " + std::to_string(u.numa_node) : ""));
    else
      host().Warn(what + ": Unhealthy, " + problem);
    reported_[u.uuid] = problem;
  }

  HostRoot root_;
  const Settings s_;
  std::shared_ptr<Session> session_;

  // Worker thread only.
  std::shared_ptr<const Inventory> inventory_;     // the latest NVML discovery
  std::map<std::string, GpuInfo> procfs_gpus_;     // the latest procfs discovery
  std::map<std::string, Unit> units_;              // by UUID
  std::map<std::string, std::string> gpu_by_pci_;  // every GPU discovered: PCI -> UUID
  std::set<std::string> noted_;                    // GPUs skipped for their MIG mode (logged)
  std::map<std::string, std::string> reported_;    // UUID -> last logged problem

  std::mutex mu_;                           // shared with the event thread
  std::set<std::string> parents_;           // GPUs this resource serves (or their MIG devices)
  std::map<std::string, int64_t> bad_xid_;  // XidKey -> XID
};

std::unique_ptr<Instance> Create(Host& host) {
  std::optional<Settings> s = devplug::nvidia::ParseSettings(host);
  if (!s) return nullptr;
  auto inst = std::make_unique<Nvidia>(host, std::move(*s));
  inst->Start();
  return inst;
}

const devplug_config_key kKeys[] = {
    {"discovery", DEVPLUG_CONFIG_STRING, 0, "\"auto\" (NVML, else procfs), \"nvml\" or \"procfs\""},
    {"nvml_library", DEVPLUG_CONFIG_STRING, 0, "NVML library to load (default libnvidia-ml.so.1)"},
    {"shares", DEVPLUG_CONFIG_INT, 0, "time-slicing replicas per device, not isolated (default 1)"},
    {"ignored_xids", DEVPLUG_CONFIG_INT_ARRAY, 0,
     "XIDs that do not make a GPU Unhealthy (default 13, 31, 43, 45, 68, 109)"},
    {"cdi", DEVPLUG_CONFIG_BOOL, 0,
     "also return the names nvidia.com/gpu=<uuid> of a spec made by NVIDIA's toolkit"},
    {"mig", DEVPLUG_CONFIG_STRING, 0, "\"none\" (whole GPUs, default) or \"only\" (MIG devices)"},
    {"mig_profile", DEVPLUG_CONFIG_STRING, 0,
     "with mig = \"only\": only this profile (\"1g.10gb\")"},
    {"device_list_strategy", DEVPLUG_CONFIG_STRING, 0,
     "\"envvar\" (default), \"volume-mounts\" or \"cdi\" (devplugd's own spec, with the "
     "resource's cdi set): how devices are named to the runtime"},
    {"driver_mount", DEVPLUG_CONFIG_TABLE, 0,
     "{ host, container }: the driver's folder, mounted read-only (nodes without the toolkit)"},
    {"extra_mounts", DEVPLUG_CONFIG_ARRAY, 0,
     "more { host, container } read-only mounts, if present"},
    {"envs", DEVPLUG_CONFIG_TABLE, 0, "extra environment, { NAME = \"value\" }"},
    {nullptr, 0, 0, nullptr},
};

const char* const kSubsystems[] = {"pci", nullptr};

}  // namespace

// Defined by hand (not DEVPLUG_CXX_MODULE): the table keys need an agent of
// ABI minor 3.
static constexpr devplug_module nvidia_module = devplug::common::internal::MakeModule<Create>(
    "nvidia", "1.1.0", "NVIDIA GPUs and MIG devices through NVML or procfs, with XID health", kKeys,
    kSubsystems, devplug::common::kHookUdev | devplug::common::kHookPreferred);

extern "C" DEVPLUG_MODULE_EXPORT int devplug_module_entry_v1(uint32_t agent_minor,
                                                             const devplug_module** ret) {
  if (agent_minor < 3) return -ENOTSUP;
  *ret = &nvidia_module;
  return 0;
}
