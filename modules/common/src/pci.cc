#include "devplug/common/pci.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>

namespace devplug::common {
namespace {

template <class T>
bool Contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool IsHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// Reads what `fields` asks for beyond the IDs, checking the driver against
// `selector` as soon as it is known. False if the selector rejects it.
bool ReadRest(const Dir& dir, unsigned fields, const PciSelector* selector, PciFunction& f) {
  if ((fields & kPciDriver) || (selector && !selector->drivers.empty())) {
    if (auto d = dir.LinkName("driver")) f.driver = std::move(d).value();
    if (selector && !selector->drivers.empty() && !Contains(selector->drivers, f.driver))
      return false;
  }
  if (fields & kPciClass) f.class_code = dir.ReadHex("class").value_or(0);
  if (fields & kPciIommuGroup) {
    if (auto g = dir.LinkName("iommu_group")) {
      auto n = ParseInt(*g);
      if (n && *n >= 0 && *n <= INT32_MAX) f.iommu_group = static_cast<int>(*n);
    }
  }
  if (fields & kPciNuma) {
    f.numa_node = NumaNodeOf(dir.path());
  }
  if (fields & kPciSriov) {
    if (auto pf = dir.LinkName("physfn")) f.physfn = std::move(pf).value();
    if (auto names = dir.List("virtfn")) {
      std::vector<std::pair<int64_t, std::string>> vfs;
      for (const std::string& n : *names) {
        auto idx = ParseInt(std::string_view(n).substr(6));
        if (!idx) continue;
        if (auto vf = dir.LinkName(n.c_str())) vfs.emplace_back(*idx, std::move(vf).value());
      }
      std::sort(vfs.begin(), vfs.end());
      for (auto& vf : vfs) f.virtfns.push_back(std::move(vf.second));
    }
  }
  if (fields & kPciNet) {
    if (auto net = dir.Sub("net")) {
      if (auto names = net->List()) f.net_interfaces = std::move(names).value();
    }
  }
  return true;
}

// Vendor and device IDs; an error if either is unreadable.
Result<bool> ReadIds(const Dir& dir, const PciSelector* selector, PciFunction& f) {
  auto vendor = dir.ReadHex("vendor");
  if (!vendor.ok()) return vendor.error();
  f.vendor = static_cast<uint16_t>(*vendor);
  if (selector && !selector->vendors.empty() && !Contains(selector->vendors, f.vendor))
    return false;
  auto device = dir.ReadHex("device");
  if (!device.ok()) return device.error();
  f.device = static_cast<uint16_t>(*device);
  return !selector || selector->MatchesIds(f.vendor, f.device);
}

}  // namespace

bool PciSelector::MatchesIds(uint16_t vendor, uint16_t device) const {
  return (vendors.empty() || Contains(vendors, vendor)) &&
         (devices.empty() || Contains(devices, device));
}

bool PciSelector::MatchesAddress(std::string_view address) const {
  return addresses.empty() ||
         std::find(addresses.begin(), addresses.end(), address) != addresses.end();
}

bool PciSelector::Matches(const PciFunction& f) const {
  return MatchesIds(f.vendor, f.device) && MatchesAddress(f.address) &&
         (drivers.empty() || Contains(drivers, f.driver));
}

Result<PciFunction> ReadPciFunction(const HostRoot& root, std::string_view address,
                                    unsigned fields) {
  std::string path = root.Path(kPciDevicesDir);
  path += '/';
  path += address;
  auto dir = Dir::Open(path);
  if (!dir.ok()) return dir.error();
  PciFunction f;
  f.address = std::string(address);
  auto ids = ReadIds(*dir, nullptr, f);
  if (!ids.ok()) return ids.error();
  ReadRest(*dir, fields, nullptr, f);
  return f;
}

Result<PciScan> EnumeratePci(const HostRoot& root, const PciSelector* selector, unsigned fields) {
  PciScan scan;
  auto devices = Dir::Open(root.Path(kPciDevicesDir));
  if (!devices.ok()) {
    if (devices.error().code == ENOENT) return scan;
    return devices.error();
  }
  auto names = devices->List();
  if (!names.ok()) return names.error();
  for (const std::string& name : *names) {
    if (!IsPciAddress(name)) continue;  // not a function address
    if (selector && !selector->MatchesAddress(name)) continue;
    auto dir = devices->Sub(name.c_str());
    if (!dir.ok()) {
      scan.problems.push_back(dir.error());
      continue;
    }
    PciFunction f;
    f.address = name;
    auto ids = ReadIds(*dir, selector, f);
    if (!ids.ok()) {
      scan.problems.push_back(ids.error());
      continue;
    }
    if (!*ids) continue;
    if (!ReadRest(*dir, fields, selector, f)) continue;
    scan.functions.push_back(std::move(f));
  }
  return scan;
}

DriverBindings::DriverBindings(HostRoot root, std::string driver, unsigned fields)
    : root_(std::move(root)), driver_(std::move(driver)), fields_(fields | kPciDriver) {}

void DriverBindings::Forget(std::string_view address) {
  auto it = std::lower_bound(cache_.begin(), cache_.end(), address,
                             [](const auto& e, std::string_view a) { return e.first < a; });
  if (it != cache_.end() && it->first == address) it->second.valid = false;
}

Result<PciScan> DriverBindings::Scan(const PciSelector& selector) {
  PciScan scan;
  const std::string path = root_.Path("/sys/bus/pci/drivers/") + driver_;
  std::vector<std::pair<std::string, Entry>> next;
  next.reserve(cache_.size());
  auto err = ForEachEntry(path, [&](int dir, const dirent& ent) {
    if (ent.d_type != DT_LNK && ent.d_type != DT_UNKNOWN) return;  // bind, unbind, new_id...
    const std::string_view name = ent.d_name;
    if (!IsPciAddress(name)) return;  // the "module" link
    if (!selector.MatchesAddress(name)) return;
    Entry e;
    e.ino = ent.d_ino;
    if (e.ino == 0) {  // file systems that do not fill d_ino
      struct stat st;
      if (fstatat(dir, ent.d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
      e.ino = st.st_ino;
    }
    auto hit = std::lower_bound(cache_.begin(), cache_.end(), name,
                                [](const auto& c, std::string_view a) { return c.first < a; });
    if (hit != cache_.end() && hit->first == name && hit->second.valid &&
        hit->second.ino == e.ino) {
      next.emplace_back(hit->first, std::move(hit->second));  // key copied: cache_ stays sorted
      return;
    }
    reads_++;
    auto f = ReadPciFunction(root_, name, fields_);
    if (!f.ok()) {
      scan.problems.push_back(f.error());
      return;
    }
    // Bound to another driver by now (mid-rebind): not ours, not cached.
    if (f->driver != driver_) return;
    e.function = std::move(f).value();
    e.valid = true;
    next.emplace_back(std::string(name), std::move(e));
  });
  if (err) {
    if (err->code != ENOENT) return *err;
    cache_.clear();  // the driver is not loaded: nothing is bound to it
    return scan;
  }
  auto by_address = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (!std::is_sorted(next.begin(), next.end(), by_address))  // readdir order varies
    std::sort(next.begin(), next.end(), by_address);
  cache_ = std::move(next);
  scan.functions.reserve(cache_.size());
  for (const auto& [address, entry] : cache_)
    if (selector.MatchesIds(entry.function.vendor, entry.function.device))
      scan.functions.push_back(entry.function);
  return scan;
}

std::optional<uint16_t> ParsePciId(std::string_view s) {
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  if (s.empty() || s.size() > 4) return std::nullopt;
  for (char c : s)
    if (!IsHex(c)) return std::nullopt;
  auto v = ParseHex(s);
  if (!v) return std::nullopt;
  return static_cast<uint16_t>(*v);
}

std::string PciIdString(uint16_t id) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04x", id);
  return buf;
}

}  // namespace devplug::common
