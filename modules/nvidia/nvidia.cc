// nvidia module: NVIDIA GPUs, discovered through NVML (loaded at run time)
// or the driver's /proc/driver/nvidia, with XID-based health.
//
// Keys (see README.md): discovery ("auto" | "nvml" | "procfs"),
// nvml_library, shares, ignored_xids, cdi.
// Devices: one per GPU, ID = its UUID ("GPU-…"), or <uuid>::<k> for
// shares > 1 (time-slicing replicas, not isolated). Topology: the PCI
// function's numa_node. Health: the GPU is found, /dev/nvidia<minor> and its
// /proc/driver/nvidia/gpus/<pci>/information exist, and no critical XID was
// seen since it last (re)appeared. Allocate (default recipes, merged by the
// agent): /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools,
// /dev/nvidia-modeset when present, /dev/nvidia<minor> of each GPU, and
// NVIDIA_VISIBLE_DEVICES = the UUIDs (deduplicated); with cdi = true also
// the CDI name nvidia.com/gpu=<uuid>.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "devplug/common/cxx_module.h"
#include "devplug/common/fs.h"
#include "devplug/common/pci.h"
#include "devplug/common/preferred.h"
#include "nvml.h"

namespace {

constexpr uint32_t kNvidiaVendor = 0x10de;

using devplug::common::DeviceSink;
using devplug::common::Host;
using devplug::common::HostRoot;
using devplug::common::Ids;
using devplug::common::Instance;
using devplug::common::ModuleError;
namespace nvml = devplug::nvidia::nvml;

constexpr const char* kControlNodes[] = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                         "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};
constexpr char kProcGpus[] = "/proc/driver/nvidia/gpus";
// XIDs caused by applications, not by the GPU: a program's fault must not
// take the GPU away from everyone else.
const std::vector<int64_t> kDefaultIgnoredXids = {13, 31, 43, 45, 68, 109};

enum class Discovery { kAuto, kNvml, kProcfs };

struct Gpu {
  std::string uuid;
  std::string pci;  // "0000:3b:00.0"
  unsigned minor = 0;
  std::string model;
  int numa_node = -1;
  nvml::Device handle = nullptr;
  bool found = false;    // in the latest discovery
  std::string problem;   // why it cannot be used, "" when healthy
  bool lost = false;     // NVML says it fell off the bus
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

class Nvidia : public Instance {
 public:
  Nvidia(Host host, Discovery discovery, std::string library, int64_t shares,
         std::set<int64_t> ignored, bool cdi)
      : Instance(host),
        root_(std::string(host.host_root())),
        discovery_(discovery),
        library_path_(std::move(library)),
        shares_(shares),
        ignored_xids_(std::move(ignored)),
        cdi_(cdi) {}

  ~Nvidia() override {
    StopEvents();
    ShutdownNvml();
  }

  // Chooses NVML or procfs. Throws when "nvml" was asked for and is not
  // usable.
  void Start() {
    if (discovery_ == Discovery::kProcfs) return;
    std::string why;
    if (OpenNvml(&why)) return;
    if (discovery_ == Discovery::kNvml) throw ModuleError(ENODEV, "discovery = \"nvml\": " + why);
    host().Warn("NVML is not usable (" + why + "); discovering GPUs from " + kProcGpus +
                ", without XID health events or NVLink topology");
  }

  void ListDevices(DeviceSink& sink) override {
    if (reinit_nvml_ && lib_) {
      // A GPU came back or changed: fresh handles, fresh event registrations.
      StopEvents();
      ShutdownNvml();
      std::string why;
      if (!InitNvml(&why)) host().Warn("NVML re-initialisation failed: " + why);
      reinit_nvml_ = false;
    }
    if (nvml_up_)
      DiscoverNvml();
    else
      DiscoverProcfs();
    if (nvml_up_ && !events_.joinable()) StartEvents();

    std::vector<std::string> control;
    for (const char* n : kControlNodes)
      if (devplug::common::IsCharDevice(root_.Path(n))) control.push_back(n);
    const bool procfs = devplug::common::Exists(root_.Path(kProcGpus));
    std::map<std::string, int64_t> bad_xid;
    {
      std::lock_guard lock(mu_);
      bad_xid = bad_xid_;
    }
    for (auto& [uuid, g] : gpus_) {
      // `problem` for the log, `reason` (a few words) for the status.
      std::string problem, reason;
      const std::string node = "/dev/nvidia" + std::to_string(g.minor);
      if (!g.found) {
        problem = "is gone (not reported by " + std::string(nvml_up_ ? "NVML" : "procfs") + ")";
        reason = "gone";
      } else if (!g.problem.empty()) {
        problem = g.problem;
        reason = g.lost ? "fallen off the bus" : "NVML error";
      } else if (!devplug::common::IsCharDevice(root_.Path(node))) {
        problem = node + " is missing";
        reason = node + " missing";
      } else if (procfs && !devplug::common::Exists(root_.Path(std::string(kProcGpus) + "/" +
                                                               g.pci + "/information"))) {
        problem = std::string(kProcGpus) + "/" + g.pci + "/information is missing";
        reason = "procfs entry missing";
      } else if (auto it = bad_xid.find(uuid); it != bad_xid.end()) {
        problem = "critical XID " + std::to_string(it->second) +
                  "; Unhealthy until the GPU is reset or re-appears";
        reason = "XID " + std::to_string(it->second);
      }
      Report(g, problem);
      const bool healthy = problem.empty();
      for (int64_t k = 0; k < shares_; k++) {
        const std::string id = shares_ == 1 ? uuid : uuid + "::" + std::to_string(k);
        auto r = sink.Add(id, healthy, g.numa_node, reason);
        if (!r || !healthy) continue;
        for (const std::string& c : control) r->Node(c);
        r->Node(node).Env("NVIDIA_VISIBLE_DEVICES", uuid);
        if (cdi_) r->Cdi("nvidia.com/gpu=" + uuid);
      }
    }
  }

  bool OnUdevEvent(const devplug_udev_event& ev) override {
    if (!ev.sysname) return true;
    const std::string_view name = ev.sysname, action = ev.action ? ev.action : "";
    for (auto& [uuid, g] : gpus_) {
      if (g.pci != name) continue;
      // The GPU was reset, re-bound or plugged back: forget its XID and
      // take fresh NVML handles before the next scan.
      if (action == "add" || action == "bind" || action == "change") {
        std::lock_guard lock(mu_);
        if (bad_xid_.erase(uuid)) host().Info(uuid + ": " + std::string(action) + " event; XID cleared");
      }
      reinit_nvml_ = true;
      return true;
    }
    // Another PCI function. Only a new NVIDIA one can be a new GPU: SR-IOV
    // VFs of a NIC coming and going on a GPU node must not re-initialise
    // NVML (or rescan). A function we never listed leaving changes nothing.
    if ((action == "add" || action == "bind") && IsNvidiaFunction(ev)) {
      reinit_nvml_ = true;
      return true;
    }
    return false;
  }

  bool IsNvidiaFunction(const devplug_udev_event& ev) const {
    // The event's own device folder, else the bus's link to it.
    for (const std::string& dir :
         {ev.syspath ? root_.Path(ev.syspath) : std::string(),
          root_.Path("/sys/bus/pci/devices/" + std::string(ev.sysname))}) {
      if (dir.empty()) continue;
      if (auto vendor = devplug::common::ReadHexAttr(dir + "/vendor"); vendor.ok())
        return *vendor == kNvidiaVendor;
    }
    return false;
  }

  std::vector<std::string> PreferredAllocation(const Ids& available, const Ids& must_include,
                                               size_t size) override {
    if (shares_ == 1 && !links_.empty()) return PreferByTopology(available, must_include, size);
    // Replicas of one GPU form a group; NUMA first.
    std::map<std::string_view, int> index;
    int next = 0;
    for (const auto& [uuid, g] : gpus_) index[uuid] = next++;
    std::vector<devplug::common::Placement> places;
    for (std::string_view id : available) {
      devplug::common::Placement p{std::string(id), -1, -1};
      auto it = gpus_.find(std::string(UuidOf(id)));
      if (it != gpus_.end()) {
        p.numa_node = it->second.numa_node;
        p.group = index[it->first];
      }
      places.push_back(std::move(p));
    }
    return devplug::common::PackByLocality(
        places, std::vector<std::string>(must_include.begin(), must_include.end()), size);
  }

 private:
  // ---- NVML ----
  bool OpenNvml(std::string* why) {
    lib_ = nvml::Library::Open(library_path_, why);
    if (!lib_) return false;
    if (!InitNvml(why)) {
      lib_.reset();
      return false;
    }
    return true;
  }

  bool InitNvml(std::string* why) {
    const nvml::Return rc = lib_->api().Init();
    if (rc != nvml::kSuccess) {
      *why = "nvmlInit_v2: " + lib_->Error(rc);
      return false;
    }
    nvml_up_ = true;
    return true;
  }

  void ShutdownNvml() {
    if (nvml_up_ && lib_) lib_->api().Shutdown();
    nvml_up_ = false;
    for (auto& [uuid, g] : gpus_) g.handle = nullptr;
  }

  void DiscoverNvml() {
    const nvml::Api& api = lib_->api();
    for (auto& [uuid, g] : gpus_) g.found = false;
    unsigned count = 0;
    nvml::Return rc = api.DeviceGetCount(&count);
    if (rc != nvml::kSuccess) throw ModuleError(EIO, "nvmlDeviceGetCount_v2: " + lib_->Error(rc));
    std::map<nvml::Device, std::string> handles;
    for (unsigned i = 0; i < count; i++) {
      nvml::Device dev = nullptr;
      if ((rc = api.DeviceGetHandleByIndex(i, &dev)) != nvml::kSuccess) {
        host().Warn("GPU index " + std::to_string(i) + ": " + lib_->Error(rc));
        continue;
      }
      char uuid[nvml::kUuidBufferSize] = {};
      if ((rc = api.DeviceGetUUID(dev, uuid, sizeof(uuid))) != nvml::kSuccess) {
        host().Warn("GPU index " + std::to_string(i) + ": no UUID: " + lib_->Error(rc));
        continue;
      }
      Gpu& g = gpus_[uuid];
      g.uuid = uuid;
      g.handle = dev;
      g.found = true;
      g.problem.clear();
      g.lost = false;
      nvml::PciInfo pci{};
      if ((rc = api.DeviceGetPciInfo(dev, &pci)) == nvml::kSuccess)
        g.pci = nvml::NormalizeBusId(pci.busId);
      unsigned minor = 0;
      if ((rc = api.DeviceGetMinorNumber(dev, &minor)) == nvml::kSuccess)
        g.minor = minor;
      else
        g.problem = "NVML cannot tell its device minor: " + lib_->Error(rc);
      if (rc == nvml::kErrorGpuIsLost) {
        g.problem = "has fallen off the bus (" + lib_->Error(rc) + ")";
        g.lost = true;
      }
      char name[nvml::kNameBufferSize] = {};
      if (api.DeviceGetName && api.DeviceGetName(dev, name, sizeof(name)) == nvml::kSuccess)
        g.model = name;
      g.numa_node = Numa(g.pci);
      handles[dev] = g.uuid;
    }
    {
      std::lock_guard lock(mu_);
      handles_ = std::move(handles);
    }
    BuildTopology();
  }

  void DiscoverProcfs() {
    for (auto& [uuid, g] : gpus_) g.found = false;
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
      Gpu& g = gpus_[uuid];
      g.uuid = uuid;
      g.pci = devplug::common::NormalizePciAddress(pci).value_or(pci);
      g.minor = static_cast<unsigned>(*minor);
      g.model = info["Model"];
      g.numa_node = Numa(g.pci);
      g.found = true;
      g.problem.clear();
      g.lost = false;
    }
  }

  int Numa(const std::string& pci) const {
    if (pci.empty()) return -1;
    auto n = devplug::common::ReadIntAttr(root_.Path("/sys/bus/pci/devices/" + pci + "/numa_node"));
    return n.ok() && *n >= 0 ? static_cast<int>(*n) : -1;
  }

  // NVLink counts and PCIe common-ancestor levels between the GPUs, by UUID
  // order. Static for a given set of GPUs: read once per discovery.
  void BuildTopology() {
    const nvml::Api& api = lib_->api();
    std::vector<const Gpu*> order;
    for (const auto& [uuid, g] : gpus_)
      if (g.found && g.handle) order.push_back(&g);
    const size_t n = order.size();
    links_.assign(n, std::vector<int>(n, 0));
    levels_.assign(n, std::vector<int>(n, nvml::kTopologySystem));
    topo_ids_.clear();
    for (const Gpu* g : order) topo_ids_.push_back(g->uuid);
    for (size_t i = 0; i < n; i++) {
      for (size_t j = 0; j < n; j++) {
        if (i == j) continue;
        int level = nvml::kTopologySystem;
        if (api.DeviceGetTopologyCommonAncestor &&
            api.DeviceGetTopologyCommonAncestor(order[i]->handle, order[j]->handle, &level) ==
                nvml::kSuccess)
          levels_[i][j] = level;
        else if (order[i]->numa_node >= 0 && order[i]->numa_node == order[j]->numa_node)
          levels_[i][j] = nvml::kTopologyNode;
      }
      if (!api.has_nvlink()) continue;
      for (unsigned link = 0; link < nvml::kNvLinkMaxLinks; link++) {
        int active = 0;
        if (api.DeviceGetNvLinkState(order[i]->handle, link, &active) != nvml::kSuccess || !active)
          continue;
        nvml::PciInfo remote{};
        if (api.DeviceGetNvLinkRemotePciInfo(order[i]->handle, link, &remote) != nvml::kSuccess)
          continue;
        const std::string peer = nvml::NormalizeBusId(remote.busId);
        for (size_t j = 0; j < n; j++)
          if (j != i && order[j]->pci == peer) links_[i][j]++;
      }
    }
    if (n == 0) links_.clear();
  }

  // The best set of `size` GPUs containing must_include: most NVLinks
  // between its members, then the closest PCIe paths. Exhaustive over the
  // candidates when that is small (8 GPUs: at most 70 sets), greedy beyond.
  std::vector<std::string> PreferByTopology(const Ids& available, const Ids& must_include,
                                            size_t size) {
    std::map<std::string_view, size_t> index;
    for (size_t i = 0; i < topo_ids_.size(); i++) index[topo_ids_[i]] = i;
    auto score = [&](size_t a, size_t b) {
      return 1000L * links_[a][b] + (nvml::kTopologySystem + 10 - levels_[a][b]);
    };
    std::vector<std::string> out;
    std::vector<size_t> chosen;
    std::set<std::string_view> taken;
    for (std::string_view id : must_include) {
      if (!taken.insert(id).second) continue;
      out.emplace_back(id);
      if (auto it = index.find(id); it != index.end()) chosen.push_back(it->second);
    }
    std::vector<std::pair<std::string_view, size_t>> cands;  // sorted by ID
    for (std::string_view id : available) {
      if (taken.count(id)) continue;
      auto it = index.find(id);
      cands.emplace_back(id, it == index.end() ? SIZE_MAX : it->second);
      taken.insert(id);
    }
    std::sort(cands.begin(), cands.end());
    if (out.size() >= size || cands.empty()) return out;
    const size_t k = std::min(size - out.size(), cands.size());
    auto pair_score = [&](size_t a, size_t b) {
      return (a == SIZE_MAX || b == SIZE_MAX) ? 0L : score(a, b);
    };
    // Exhaustive when C(n, k) is small.
    double combos = 1;
    for (size_t i = 0; i < k; i++) combos = combos * static_cast<double>(cands.size() - i) / static_cast<double>(i + 1);
    std::vector<size_t> best;
    if (combos <= 50000) {
      std::vector<size_t> pick(k);
      for (size_t i = 0; i < k; i++) pick[i] = i;
      long best_score = -1;
      for (;;) {
        long s = 0;
        for (size_t a = 0; a < k; a++) {
          for (size_t c : chosen) s += pair_score(cands[pick[a]].second, c);
          for (size_t b = a + 1; b < k; b++) s += pair_score(cands[pick[a]].second, cands[pick[b]].second);
        }
        if (s > best_score) {
          best_score = s;
          best = pick;
        }
        // Next combination in lexicographic order.
        size_t i = k;
        while (i > 0 && pick[i - 1] == cands.size() - k + i - 1) i--;
        if (i == 0) break;
        pick[i - 1]++;
        for (size_t j = i; j < k; j++) pick[j] = pick[j - 1] + 1;
      }
    } else {
      std::vector<bool> used(cands.size(), false);
      std::vector<size_t> members = chosen;
      for (size_t step = 0; step < k; step++) {
        long best_gain = -1;
        size_t best_i = 0;
        for (size_t i = 0; i < cands.size(); i++) {
          if (used[i]) continue;
          long gain = 0;
          for (size_t m : members) gain += pair_score(cands[i].second, m);
          if (gain > best_gain) {
            best_gain = gain;
            best_i = i;
          }
        }
        used[best_i] = true;
        best.push_back(best_i);
        members.push_back(cands[best_i].second);
      }
    }
    for (size_t i : best) out.emplace_back(cands[i].first);
    return out;
  }

  // ---- XID events ----
  void StartEvents() {
    const nvml::Api& api = lib_->api();
    if (!api.has_events()) {
      if (!warned_no_events_)
        host().Warn(library_path_ + " has no event API: XIDs cannot be watched");
      warned_no_events_ = true;
      return;
    }
    nvml::EventSet set = nullptr;
    nvml::Return rc = api.EventSetCreate(&set);
    if (rc != nvml::kSuccess) {
      host().Warn("nvmlEventSetCreate: " + lib_->Error(rc) + "; XIDs are not watched");
      return;
    }
    for (auto& [uuid, g] : gpus_) {
      if (!g.found || !g.handle) continue;
      rc = api.DeviceRegisterEvents(g.handle, nvml::kEventXidCriticalError, set);
      if (rc != nvml::kSuccess)
        host().Warn(uuid + ": XID events not available: " + lib_->Error(rc));
    }
    stop_events_ = false;
    events_ = std::thread([this, set] { WatchEvents(set); });
  }

  void StopEvents() {
    if (!events_.joinable()) return;
    stop_events_ = true;
    events_.join();
  }

  void WatchEvents(nvml::EventSet set) {
    const nvml::Api& api = lib_->api();
    while (!stop_events_) {
      nvml::EventData ev{};
      const nvml::Return rc = api.EventSetWait(set, &ev, 200);
      if (rc == nvml::kErrorTimeout) continue;
      if (rc != nvml::kSuccess) {
        // GPU_IS_LOST and friends: a rescan finds out which.
        host().Warn("nvmlEventSetWait_v2: " + lib_->Error(rc));
        host().DevicesChanged();
        for (int i = 0; i < 10 && !stop_events_; i++) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      if (!(ev.eventType & nvml::kEventXidCriticalError)) continue;
      const int64_t xid = static_cast<int64_t>(ev.eventData);
      bool changed = false;
      {
        std::lock_guard lock(mu_);
        std::vector<std::string> hit;
        if (ev.device == nullptr) {
          for (const auto& [h, uuid] : handles_) hit.push_back(uuid);
        } else if (auto it = handles_.find(ev.device); it != handles_.end()) {
          hit.push_back(it->second);
        }
        for (const std::string& uuid : hit) {
          if (ignored_xids_.count(xid)) {
            host().Info(uuid + ": XID " + std::to_string(xid) + " (application error, ignored)");
            continue;
          }
          host().Warn(uuid + ": critical XID " + std::to_string(xid) + ": marking it Unhealthy");
          bad_xid_[uuid] = xid;
          changed = true;
        }
      }
      if (changed) host().DevicesChanged();
    }
    api.EventSetFree(set);
  }

  void Report(const Gpu& g, const std::string& problem) {
    auto it = reported_.find(g.uuid);
    const bool known = it != reported_.end();
    if (known && it->second == problem) return;
    const std::string what = g.uuid + (g.pci.empty() ? "" : " at " + g.pci) +
                             (g.model.empty() ? "" : " (" + g.model + ")");
    if (problem.empty())
      host().Info(what + (known ? ": Healthy again" : ": found") +
                  (g.numa_node >= 0 ? ", NUMA node " + std::to_string(g.numa_node) : ""));
    else
      host().Warn(what + ": Unhealthy, " + problem);
    reported_[g.uuid] = problem;
  }

  HostRoot root_;
  Discovery discovery_;
  std::string library_path_;
  int64_t shares_;
  std::set<int64_t> ignored_xids_;
  bool cdi_;

  std::unique_ptr<nvml::Library> lib_;
  bool nvml_up_ = false;
  bool reinit_nvml_ = false;
  bool warned_no_events_ = false;
  std::map<std::string, Gpu> gpus_;            // by UUID; worker thread only
  std::map<std::string, std::string> reported_;  // uuid -> last logged problem
  std::vector<std::string> topo_ids_;            // UUIDs, index of links_/levels_
  std::vector<std::vector<int>> links_, levels_;

  std::mutex mu_;  // shared with the event thread
  std::map<nvml::Device, std::string> handles_;
  std::map<std::string, int64_t> bad_xid_;  // uuid -> XID
  std::thread events_;
  std::atomic<bool> stop_events_{false};
};

std::unique_ptr<Instance> Create(Host& host) {
  bool ok = true;
  Discovery discovery = Discovery::kAuto;
  const std::string d = host.String("discovery").value_or("auto");
  if (d == "nvml")
    discovery = Discovery::kNvml;
  else if (d == "procfs")
    discovery = Discovery::kProcfs;
  else if (d != "auto") {
    host.ConfigError("discovery", "must be \"auto\", \"nvml\" or \"procfs\", not \"" + d + "\"");
    ok = false;
  }
  const std::string library = host.String("nvml_library").value_or("libnvidia-ml.so.1");
  if (library.empty()) {
    host.ConfigError("nvml_library", "must name a library, like \"libnvidia-ml.so.1\"");
    ok = false;
  }
  const int64_t shares = host.Int("shares").value_or(1);
  if (shares < 1 || shares > 1000) {
    host.ConfigError("shares", "must be between 1 and 1000");
    ok = false;
  }
  std::set<int64_t> ignored(kDefaultIgnoredXids.begin(), kDefaultIgnoredXids.end());
  if (auto xids = host.Ints("ignored_xids")) {
    ignored.clear();
    for (int64_t x : *xids) {
      if (x < 1 || x > 100000) {
        host.ConfigError("ignored_xids", std::to_string(x) + " is not an XID (1 to 100000)");
        ok = false;
      }
      ignored.insert(x);
    }
  }
  const bool cdi = host.Bool("cdi").value_or(false);
  if (!ok) return nullptr;
  auto inst = std::make_unique<Nvidia>(host, discovery, library, shares, std::move(ignored), cdi);
  inst->Start();
  return inst;
}

const devplug_config_key kKeys[] = {
    {"discovery", DEVPLUG_CONFIG_STRING, 0, "\"auto\" (NVML, else procfs), \"nvml\" or \"procfs\""},
    {"nvml_library", DEVPLUG_CONFIG_STRING, 0, "NVML library to load (default libnvidia-ml.so.1)"},
    {"shares", DEVPLUG_CONFIG_INT, 0, "time-slicing replicas per GPU, not isolated (default 1)"},
    {"ignored_xids", DEVPLUG_CONFIG_INT_ARRAY, 0,
     "XIDs that do not make a GPU Unhealthy (default 13, 31, 43, 45, 68, 109)"},
    {"cdi", DEVPLUG_CONFIG_BOOL, 0, "also return CDI names nvidia.com/gpu=<uuid>"},
    {nullptr, 0, 0, nullptr},
};

const char* const kSubsystems[] = {"pci", nullptr};

}  // namespace

// Defined by hand (not DEVPLUG_CXX_MODULE): ignored_xids needs an agent of
// ABI minor 1.
static constexpr devplug_module nvidia_module = devplug::common::internal::MakeModule<Create>(
    "nvidia", "1.0.0", "NVIDIA GPUs through NVML or procfs, with XID health", kKeys, kSubsystems,
    devplug::common::kHookUdev | devplug::common::kHookPreferred);

extern "C" DEVPLUG_MODULE_EXPORT int devplug_module_entry_v1(uint32_t agent_minor,
                                                             const devplug_module** ret) {
  if (agent_minor < 1) return -ENOTSUP;
  *ret = &nvidia_module;
  return 0;
}
