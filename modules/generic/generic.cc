// generic module: any character or block device node or host file, by path
// or glob, and USB devices by vendor/product (README.md beside this file).
//
// Keys (see README.md): paths (strings, or tables {path, container_path,
// type, permissions, read_only, optional}), group, shares, permissions,
// read_only, preopen, usb ({vendor, product, serial}), usb_nodes, usb_env,
// envs, preferred.
// Devices: every match of every path (or, with group, all paths together)
// and every matching USB device; ID from the path ("/dev/net/tun" ->
// "net_tun") or "usb-<vvvv>:<pppp>-<bus>.<dev>"; with shares, "<id>::<k>";
// IDs over 63 characters are shortened with a hash. Literal paths stay
// listed and are Healthy iff their node exists with the right type; glob and
// USB matches come and go with their nodes. Literal paths (and globs whose
// directory is literal) are watched with the agent's inotify (watch_path),
// so nodes made or removed without a uevent are seen at once.
#include <fcntl.h>
#include <fnmatch.h>
#include <glob.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "devplug/common/cxx_module.h"
#include "devplug/common/env.h"
#include "devplug/common/fs.h"
#include "devplug/common/pci.h"
#include "devplug/common/preferred.h"
#include "settings.h"

namespace {

using devplug::common::DeviceSink;
using devplug::common::Host;
using devplug::common::HostRoot;
using devplug::common::Ids;
using devplug::common::Instance;
using devplug::generic::HasGlob;
using devplug::generic::Item;
using devplug::generic::Settings;
using devplug::generic::UsbSel;

constexpr size_t kMaxId = 63;

// One node of a device, as the container gets it.
struct Node {
  std::string host_path;
  std::string container_path;
  const Item* item = nullptr;  // nullptr: a USB node
};

struct Dev {
  std::string base;  // ID before shares and shortening
  bool healthy = true;
  std::string reason;
  int numa = -1;
  std::vector<Node> nodes;
  std::string usb_busdev;  // "1:4" for usb_env
};

// The ID rule: the host path without a leading /dev/ (or /), '/' -> '_'.
std::string IdFromPath(std::string_view p) {
  if (p.rfind("/dev/", 0) == 0)
    p.remove_prefix(5);
  else
    while (!p.empty() && p.front() == '/') p.remove_prefix(1);
  std::string id(p);
  std::replace(id.begin(), id.end(), '/', '_');
  return id;
}

// IDs over 63 characters: the first 54, '-', and 8 hex digits of the
// SHA-256 of the whole ID.
std::string ShortId(const std::string& id) {
  if (id.size() <= kMaxId) return id;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(id.data(), id.size(), md, &n, EVP_sha256(), nullptr) != 1 || n < 4)
    throw devplug::common::ModuleError(EIO, "SHA-256 failed");
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%02x%02x%02x%02x", md[0], md[1], md[2], md[3]);
  return id.substr(0, 54) + "-" + hex;
}

std::string Dirname(const std::string& p) { return std::string(devplug::common::Dirname(p)); }

class Generic : public Instance {
 public:
  Generic(Host host, std::vector<Item> items, std::vector<UsbSel> usb, bool group, int64_t shares,
          bool usb_all, bool usb_env, std::vector<std::pair<std::string, std::string>> envs,
          bool pack)
      : Instance(host),
        root_(std::string(host.host_root())),
        items_(std::move(items)),
        usb_(std::move(usb)),
        group_(group),
        shares_(shares),
        usb_all_(usb_all),
        usb_env_key_(usb_env
                         ? devplug::common::EnvNameForResource("USB_RESOURCE", host.resource_name())
                         : ""),
        envs_(std::move(envs)),
        pack_(pack) {}

  void Start(bool preopen) {
    for (const Item& it : items_) {
      if (preopen && !it.glob && !it.mount) Preopen(it.pattern);
      // Literal paths, and globs whose directory is literal.
      if (!HasGlob(Dirname(it.pattern))) {
        const int rc = host().WatchPath(it.pattern);
        if (rc < 0 && rc != -ENOSYS)
          host().Warn("cannot watch " + it.pattern + " (" + std::strerror(-rc) +
                      "); nodes made or removed without a uevent are seen at the next resync");
      }
    }
  }

  void ListDevices(DeviceSink& sink) override {
    std::vector<Dev> devs;
    if (group_)
      devs.push_back(ScanGroup());
    else
      for (const Item& it : items_) ScanItem(it, devs);
    if (!usb_.empty()) ScanUsb(devs);
    PruneNumaCache();

    std::set<std::string> seen;
    std::map<std::string, size_t> device_of;
    std::vector<int> numa;
    size_t healthy = 0;
    for (const Dev& d : devs) {
      if (!seen.insert(d.base).second) continue;  // two paths, one node
      healthy += d.healthy;
      for (int64_t k = 0; k < shares_; k++) {
        const std::string id = ShortId(shares_ > 1 ? d.base + "::" + std::to_string(k) : d.base);
        auto recipe = sink.Add(id, d.healthy, d.numa, d.reason);
        if (!recipe) continue;
        if (shares_ > 1) sink.ShareOf(ShortId(d.base));
        device_of[id] = numa.size();
        for (const Node& n : d.nodes) {
          if (n.item != nullptr && n.item->mount)
            recipe->Mount(n.host_path, n.container_path, n.item->read_only);
          else
            recipe->Node(n.host_path, n.container_path,
                         n.item != nullptr ? n.item->permissions.c_str() : "rw");
        }
        for (const auto& [key, value] : envs_) recipe->Env(key, value);
        if (!usb_env_key_.empty() && !d.usb_busdev.empty()) recipe->Env(usb_env_key_, d.usb_busdev);
      }
      numa.push_back(d.numa);
    }
    if (first_scan_ || seen.size() != last_count_ || healthy != last_healthy_)
      host().Info("found " + std::to_string(seen.size()) + " device(s), " +
                  std::to_string(healthy) + " healthy" +
                  (shares_ > 1 ? ", each offered " + std::to_string(shares_) + " times" : ""));
    first_scan_ = false;
    last_count_ = seen.size();
    last_healthy_ = healthy;
    device_of_ = std::move(device_of);
    numa_ = std::move(numa);
  }

  bool OnUdevEvent(const devplug_udev_event& ev) override {
    const std::string_view subsystem = ev.subsystem ? ev.subsystem : "";
    if (!usb_.empty()) {
      if (subsystem == "usb") return true;
      if (usb_all_ && ev.syspath && std::strstr(ev.syspath, "/usb")) return true;
    }
    for (const Item& it : items_) {
      if (ev.devnode != nullptr) {
        if (it.glob ? fnmatch(it.pattern.c_str(), ev.devnode, FNM_PATHNAME) == 0
                    : it.pattern == ev.devnode)
          return true;
      }
      if (ev.sysname != nullptr && !it.glob &&
          devplug::common::Basename(it.pattern) == std::string_view(ev.sysname))
        return true;
    }
    return false;
  }

  std::vector<std::string> PreferredAllocation(const Ids& available, const Ids& must_include,
                                               size_t size) override {
    if (shares_ <= 1) {
      std::vector<devplug::common::Placement> places;
      for (std::string_view id : available) {
        auto it = device_of_.find(std::string(id));
        places.push_back({std::string(id), it == device_of_.end() ? -1 : numa_[it->second], -1});
      }
      return devplug::common::PackByLocality(
          places, std::vector<std::string>(must_include.begin(), must_include.end()), size);
    }
    // Replicas: spread over distinct devices first, or pack one device.
    std::vector<std::string> out(must_include.begin(), must_include.end());
    std::map<size_t, size_t> used;                    // device -> replicas chosen
    std::map<size_t, std::vector<std::string>> free;  // device -> replicas left
    for (const std::string& id : out)
      if (auto it = device_of_.find(id); it != device_of_.end()) used[it->second]++;
    for (std::string_view id : available) {
      const std::string s(id);
      if (std::find(out.begin(), out.end(), s) != out.end()) continue;
      auto it = device_of_.find(s);
      free[it == device_of_.end() ? SIZE_MAX : it->second].push_back(s);
    }
    for (auto& [dev, ids] : free) std::sort(ids.begin(), ids.end());
    while (out.size() < size) {
      size_t best = SIZE_MAX;
      bool found = false;
      for (const auto& [dev, ids] : free) {
        if (ids.empty()) continue;
        if (!found) {
          best = dev;
          found = true;
          continue;
        }
        const size_t a = used[dev], b = used[best];
        // spread: fewest chosen first; pack: most chosen first, then most left.
        if (pack_ ? (a > b || (a == b && ids.size() > free[best].size())) : a < b) best = dev;
      }
      if (!found) break;
      out.push_back(free[best].front());
      free[best].erase(free[best].begin());
      used[best]++;
    }
    return out;
  }

 private:
  void Preopen(const std::string& path) {
    const int fd = open(root_.Path(path).c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      host().Warn("preopen " + path + ": " + std::strerror(errno));
      return;
    }
    close(fd);
  }

  // Host paths (without host_root) matching a glob, sorted. A glob whose
  // directory part is literal (the usual "/dev/ttyUSB*") is one readdir
  // with fnmatch; others go through glob(3).
  std::vector<std::string> Glob(const std::string& pattern) const {
    std::vector<std::string> out;
    const std::string dir = Dirname(pattern);
    if (!HasGlob(dir)) {
      const std::string last(devplug::common::Basename(pattern));
      const std::string prefix = dir == "/" ? "/" : dir + "/";
      devplug::common::ForEachEntry(root_.Path(dir), [&](int, const dirent& e) {
        if (fnmatch(last.c_str(), e.d_name, FNM_PERIOD) == 0) out.push_back(prefix + e.d_name);
      });
    } else {
      std::string escaped_root;
      for (char c : root_.root()) {
        if (c == '*' || c == '?' || c == '[' || c == '\\') escaped_root += '\\';
        escaped_root += c;
      }
      glob_t g{};
      if (glob((escaped_root + pattern).c_str(), GLOB_NOSORT, nullptr, &g) == 0) {
        out.reserve(g.gl_pathc);
        for (size_t i = 0; i < g.gl_pathc; i++) out.emplace_back(root_.Strip(g.gl_pathv[i]));
      }
      globfree(&g);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // Whether host path `p` is what `it` wants; *st filled when it exists.
  enum class Check { kOk, kMissing, kWrongType };
  Check Stat(const Item& it, const std::string& p, struct stat* st) const {
    if (stat(root_.Path(p).c_str(), st) != 0) return Check::kMissing;
    if (it.mount) return Check::kOk;
    return S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode) ? Check::kOk : Check::kWrongType;
  }

  std::string ContainerPath(const Item& it, const std::string& host_path) const {
    if (it.container_path.empty()) return host_path;
    if (it.container_path.back() == '/')
      return it.container_path + std::string(devplug::common::Basename(host_path));
    return it.container_path;
  }

  // /sys/dev/{char,block}/M:m resolved to its /sys/devices path, or "".
  std::string SysfsOfNode(const struct stat& st) const {
    const std::string link =
        std::string(S_ISBLK(st.st_mode) ? "/sys/dev/block/" : "/sys/dev/char/") +
        std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev));
    char buf[4096];
    const ssize_t n = readlink(root_.Path(link).c_str(), buf, sizeof(buf) - 1);
    if (n <= 0) return "";
    std::string target(buf, static_cast<size_t>(n));
    if (target.front() != '/') target = Dirname(link) + "/" + target;
    return std::filesystem::path(target).lexically_normal().string();
  }

  // Cached per device number: a node's topology does not change while its
  // device exists, and a glob over many nodes would otherwise walk sysfs
  // for each at every scan. Entries not seen in a scan are dropped.
  int NumaOfNode(const struct stat& st) const {
    if (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode)) return -1;
    const Topo key{st.st_rdev, S_ISBLK(st.st_mode)};
    if (auto it = numa_cache_.find(key); it != numa_cache_.end()) {
      numa_seen_.insert(key);
      return it->second;
    }
    const std::string sys = SysfsOfNode(st);
    const int numa = sys.empty() ? -1 : devplug::common::NearestNumaNode(root_, sys);
    numa_cache_[key] = numa;
    numa_seen_.insert(key);
    return numa;
  }
  void PruneNumaCache() const {
    std::erase_if(numa_cache_, [&](const auto& kv) { return !numa_seen_.contains(kv.first); });
    numa_seen_.clear();
  }

  void ScanItem(const Item& it, std::vector<Dev>& devs) const {
    struct stat st;
    if (!it.glob) {
      Dev d;
      d.base = IdFromPath(it.pattern);
      const Check c = Stat(it, it.pattern, &st);
      if (c != Check::kOk) {
        d.healthy = false;
        d.reason = it.pattern + (c == Check::kMissing ? " missing" : " is not a device node");
      } else {
        d.numa = NumaOfNode(st);
      }
      d.nodes.push_back({it.pattern, ContainerPath(it, it.pattern), &it});
      devs.push_back(std::move(d));
      return;
    }
    for (const std::string& p : Glob(it.pattern)) {
      if (Stat(it, p, &st) != Check::kOk) continue;  // gone, or the wrong type
      Dev d;
      d.base = IdFromPath(p);
      d.numa = NumaOfNode(st);
      d.nodes.push_back({p, ContainerPath(it, p), &it});
      devs.push_back(std::move(d));
    }
  }

  Dev ScanGroup() const {
    Dev d;
    d.base = IdFromPath(items_.front().pattern);
    struct stat st;
    for (const Item& it : items_) {
      std::vector<std::string> matches;
      if (it.glob) {
        for (const std::string& p : Glob(it.pattern))
          if (Stat(it, p, &st) == Check::kOk) matches.push_back(p);
      } else {
        const Check c = Stat(it, it.pattern, &st);
        if (c == Check::kOk)
          matches.push_back(it.pattern);
        else if (!it.optional && d.healthy) {
          d.healthy = false;
          d.reason = it.pattern + (c == Check::kMissing ? " missing" : " is not a device node");
        }
      }
      if (!it.optional && it.glob && matches.size() != 1 && d.healthy) {
        d.healthy = false;
        d.reason = it.pattern + (matches.empty()
                                     ? " matches nothing"
                                     : " matches " + std::to_string(matches.size()) + " nodes");
      }
      for (const std::string& p : matches) {
        if (d.numa < 0 && stat(root_.Path(p).c_str(), &st) == 0) d.numa = NumaOfNode(st);
        d.nodes.push_back({p, ContainerPath(it, p), &it});
      }
    }
    return d;
  }

  void ScanUsb(std::vector<Dev>& devs) const {
    auto entries = devplug::common::ListDir(root_.Path("/sys/bus/usb/devices"));
    if (!entries.ok()) {
      if (entries.error().code != ENOENT)
        throw devplug::common::ModuleError(entries.error().code, entries.error().ToString());
      return;
    }
    for (const std::string& name : *entries) {
      if (name.find(':') != std::string::npos) continue;  // an interface
      const std::string sys = "/sys/bus/usb/devices/" + name;
      auto vendor = devplug::common::ReadHexAttr(root_.Path(sys + "/idVendor"));
      auto product = devplug::common::ReadHexAttr(root_.Path(sys + "/idProduct"));
      if (!vendor.ok() || !product.ok()) continue;
      std::optional<std::string> serial;
      const UsbSel* sel = nullptr;
      for (const UsbSel& u : usb_) {
        if (u.vendor != *vendor || u.product != *product) continue;
        if (u.serial) {
          if (!serial) serial = devplug::common::ReadAttr(root_.Path(sys + "/serial")).value_or("");
          if (*serial != *u.serial) continue;
        }
        sel = &u;
        break;
      }
      if (sel == nullptr) continue;
      auto bus = devplug::common::ReadIntAttr(root_.Path(sys + "/busnum"));
      auto dev = devplug::common::ReadIntAttr(root_.Path(sys + "/devnum"));
      if (!bus.ok() || !dev.ok() || *bus < 0 || *bus > 999 || *dev < 0 || *dev > 999) continue;
      char vp[16], bd[16], node[40];
      std::snprintf(vp, sizeof(vp), "%04x:%04x", *vendor & 0xffff, *product & 0xffff);
      std::snprintf(bd, sizeof(bd), "%03d.%03d", static_cast<int>(*bus), static_cast<int>(*dev));
      std::snprintf(node, sizeof(node), "/dev/bus/usb/%03d/%03d", static_cast<int>(*bus),
                    static_cast<int>(*dev));
      Dev d;
      d.base = "usb-" + std::string(vp) + "-" + (sel->serial ? SafeSerial(*sel->serial) : bd);
      d.usb_busdev = std::to_string(*bus) + ":" + std::to_string(*dev);
      // The device's real sysfs folder, for its NUMA node and child nodes.
      std::string real;
      if (char* r = realpath(root_.Path(sys).c_str(), nullptr)) {
        real = std::string(root_.Strip(r));
        free(r);
      }
      d.numa = real.empty() ? -1 : devplug::common::NearestNumaNode(root_, real);
      if (!devplug::common::IsCharDevice(root_.Path(node))) {
        d.healthy = false;
        d.reason = std::string(node) + " missing";
      } else {
        d.nodes.push_back({node, node, nullptr});
      }
      if (usb_all_ && !real.empty()) ChildNodes(real, 0, d.nodes);
      devs.push_back(std::move(d));
    }
  }

  // Character nodes of the devices below a USB device (tty, hidraw, input,
  // video): each sysfs folder with a DEVNAME in its uevent, without
  // following links.
  void ChildNodes(const std::string& sys, int depth, std::vector<Node>& out) const {
    if (depth > 8) return;
    auto names = devplug::common::ListDir(root_.Path(sys));
    if (!names.ok()) return;
    for (const std::string& n : *names) {
      const std::string child = sys + "/" + n;
      struct stat st;
      if (lstat(root_.Path(child).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
      auto uevent = devplug::common::ReadAttr(root_.Path(child + "/uevent"));
      if (uevent.ok()) {
        const std::string& u = *uevent;
        const size_t at = u.rfind("DEVNAME=", 0) == 0 ? 0 : u.find("\nDEVNAME=");
        if (at != std::string::npos) {
          const size_t from = u.find('=', at) + 1;
          const std::string devname = u.substr(from, u.find('\n', from) - from);
          const std::string node = "/dev/" + devname;
          if (devname.rfind("bus/usb/", 0) != 0 && devname.find("..") == std::string::npos &&
              devplug::common::IsCharDevice(root_.Path(node)))
            out.push_back({node, node, nullptr});
        }
      }
      ChildNodes(child, depth + 1, out);
    }
  }

  static std::string SafeSerial(const std::string& s) {
    std::string out;
    for (char c : s)
      out += ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-')
                 ? c
                 : '_';
    return out;
  }

  HostRoot root_;
  const std::vector<Item> items_;
  const std::vector<UsbSel> usb_;
  const bool group_;
  const int64_t shares_;
  const bool usb_all_;
  const std::string usb_env_key_;
  const std::vector<std::pair<std::string, std::string>> envs_;
  const bool pack_;
  bool first_scan_ = true;
  size_t last_count_ = 0, last_healthy_ = 0;
  std::map<std::string, size_t> device_of_;  // ID -> index into numa_ (last scan)
  using Topo = std::pair<dev_t, bool>;       // device number, block
  mutable std::map<Topo, int> numa_cache_;
  mutable std::set<Topo> numa_seen_;
  std::vector<int> numa_;
};

std::unique_ptr<Instance> Create(Host& host) {
  std::optional<Settings> s = devplug::generic::ParseSettings(host);
  if (!s) return nullptr;
  auto inst =
      std::make_unique<Generic>(host, std::move(s->items), std::move(s->usb), s->group, s->shares,
                                s->usb_all, s->usb_env, std::move(s->envs), s->pack);
  inst->Start(s->preopen);
  return inst;
}

const devplug_config_key kKeys[] = {
    {"paths", DEVPLUG_CONFIG_ARRAY, 0,
     "paths or globs, or tables {path, container_path, type, permissions, read_only, optional}"},
    {"group", DEVPLUG_CONFIG_BOOL, 0, "all paths together form one device (default false)"},
    {"shares", DEVPLUG_CONFIG_INT, 0, "pods that may use each device at once (default 1)"},
    {"permissions", DEVPLUG_CONFIG_STRING, 0, "device cgroup permissions, r/w/m (default rw)"},
    {"read_only", DEVPLUG_CONFIG_BOOL, 0, "mounts are read-only (default false)"},
    {"preopen", DEVPLUG_CONFIG_BOOL, 0, "open each literal device path once at start"},
    {"usb", DEVPLUG_CONFIG_ARRAY, 0, "USB devices: tables {vendor, product, serial}"},
    {"usb_nodes", DEVPLUG_CONFIG_STRING, 0, "\"bus\" (default) or \"all\" (tty, hidraw, ...)"},
    {"usb_env", DEVPLUG_CONFIG_BOOL, 0, "set USB_RESOURCE_<NAME> = bus:dev,... (default false)"},
    {"envs", DEVPLUG_CONFIG_TABLE, 0, "environment variables for every container"},
    {"preferred", DEVPLUG_CONFIG_STRING, 0, "\"spread\" (default) or \"pack\" replicas"},
    {nullptr, 0, 0, nullptr},
};

// Where the nodes it serves usually live; other nodes are still seen
// through the path watches and resyncs.
const char* const kSubsystems[] = {"misc", "tty",     "video4linux", "sound", "input", "hidraw",
                                   "usb",  "usbmisc", "block",       "drm",   nullptr};

}  // namespace

DEVPLUG_CXX_MODULE(generic_module, "generic", "1.0.0",
                   "any device node or host file by path or glob, and USB devices", kKeys,
                   kSubsystems, Create,
                   devplug::common::kHookUdev | devplug::common::kHookPreferred)
