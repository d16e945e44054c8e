// PCI functions as sysfs shows them under /sys/bus/pci/devices, and the
// selectors modules use to pick theirs.
//
// sysfs layout read here (all under host_root):
//   /sys/bus/pci/devices/<addr>      -> ../../../devices/pci<dom>:<bus>/.../<addr>
//   <dev>/vendor, device             "0x8086"
//   <dev>/class                      "0x020000"
//   <dev>/numa_node                  "-1" or "0".. (absent without CONFIG_NUMA)
//   <dev>/driver                     -> .../bus/pci/drivers/<driver> (absent when unbound)
//   <dev>/iommu_group                -> .../kernel/iommu_groups/<N> (absent without an IOMMU)
//   <dev>/physfn                     -> ../<PF addr>   (on an SR-IOV virtual function)
//   <dev>/virtfn<k>                  -> ../<VF addr>   (on a physical function)
//   <dev>/sriov_totalvfs, sriov_numvfs                 (on an SR-IOV capable PF)
//   <dev>/net/<ifname>               (network functions)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "devplug/common/fs.h"
#include "devplug/common/pci_address.h"

namespace devplug::common {

inline constexpr std::string_view kPciDevicesDir = "/sys/bus/pci/devices";

struct PciFunction {
  std::string address;  // "0000:3b:00.0"
  uint16_t vendor = 0;
  uint16_t device = 0;
  uint32_t class_code = 0;                  // 0x020000
  std::string driver;                       // "" when no driver is bound
  int iommu_group = -1;                     // -1 without an IOMMU group
  int numa_node = -1;                       // -1 when unknown or not NUMA
  std::string physfn;                       // the PF's address, for a virtual function
  std::vector<std::string> virtfns;         // VF addresses by index, for a PF
  std::vector<std::string> net_interfaces;  // names under <dev>/net

  bool is_virtual_function() const { return !physfn.empty(); }
};

// Which attributes to read beyond address/vendor/device (always read).
enum PciFields : unsigned {
  kPciClass = 1u << 0,
  kPciDriver = 1u << 1,
  kPciIommuGroup = 1u << 2,
  kPciNuma = 1u << 3,
  kPciSriov = 1u << 4,  // physfn and virtfn<k>
  kPciNet = 1u << 5,
  kPciAll = 0x3fu,
};

// Picks PCI functions. Every non-empty list must match (an empty list
// matches anything); `drivers` empty matches bound and unbound functions.
struct PciSelector {
  std::vector<uint16_t> vendors;
  std::vector<uint16_t> devices;
  std::vector<std::string> drivers;
  std::vector<std::string> addresses;  // normalised ("0000:3b:00.0")

  bool MatchesIds(uint16_t vendor, uint16_t device) const;
  bool MatchesAddress(std::string_view address) const;
  bool Matches(const PciFunction& f) const;
};

// Reads one function, `address` being its name under /sys/bus/pci/devices.
// vendor and device are required; optional attributes missing from sysfs
// keep their defaults.
Result<PciFunction> ReadPciFunction(const HostRoot& root, std::string_view address,
                                    unsigned fields = kPciAll);

struct PciScan {
  std::vector<PciFunction> functions;  // sorted by address
  // Functions that could not be read (e.g. removed mid-scan); the scan
  // carries on without them.
  std::vector<FsError> problems;
};

// Every function under /sys/bus/pci/devices that `selector` (if given)
// matches. Vendor, device and address are checked before anything else is
// read, so a narrow selector reads little. Fails only if the devices folder
// itself cannot be listed; a missing folder (no PCI bus) is an empty scan.
Result<PciScan> EnumeratePci(const HostRoot& root, const PciSelector* selector = nullptr,
                             unsigned fields = kPciAll);

// The functions bound to one PCI driver, read from the driver's folder
// /sys/bus/pci/drivers/<driver>/, where the kernel keeps one <addr> link
// per bound function (the same bindings each function's `driver` link
// shows). A function whose link is unchanged since the previous Scan()
// (same inode and ctime: not unbound, rebound or removed in between) comes
// from the cache; only new bindings are read. So a rescan of thousands of
// VFs costs one directory listing and one lstat per function.
//
// Not thread-safe; one per module instance.
class DriverBindings {
 public:
  DriverBindings(HostRoot root, std::string driver, unsigned fields = kPciAll);
  const std::string& driver() const { return driver_; }

  // Bound functions that `selector` matches (its `drivers` is ignored),
  // sorted by address. A missing driver folder (driver not loaded) is an
  // empty scan.
  Result<PciScan> Scan(const PciSelector& selector);
  // Drops a function's cache entry, so the next Scan re-reads it.
  void Forget(std::string_view address);
  // Functions read from sysfs (cache misses) so far.
  uint64_t reads() const { return reads_; }

 private:
  struct Entry {
    uint64_t ino = 0;
    PciFunction function;
    bool valid = false;  // the read succeeded and the function is bound here
  };
  HostRoot root_;
  std::string driver_;
  unsigned fields_;
  std::vector<std::pair<std::string, Entry>> cache_;  // sorted by address
  uint64_t reads_ = 0;
};

// A 16-bit PCI ID written in hex, with or without 0x, any case.
std::optional<uint16_t> ParsePciId(std::string_view s);

// "8086"
std::string PciIdString(uint16_t id);

}  // namespace devplug::common
