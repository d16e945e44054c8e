// FPGA ports as the kernel shows them, and the few device operations the
// module performs on them.
//
// DFL driver (upstream Linux, Documentation/fpga/dfl.rst), under host_root:
//   /sys/class/fpga_region/regionX -> .../<pci fn>/fpga_region/regionX
//   regionX/dfl-fme.K/                        the card's management engine (PF only)
//     dfl-fme-region.R/fpga_region/regionY/compat_id   the interface ID
//   regionX/dfl-port.N/afu_id, id, power_state, errors/errors
//   /dev/dfl-fme.K, /dev/dfl-port.N
// A VF's region holds a port but no FME: the FME is in the region of the
// function its physfn link names.
//
// intel-fpga driver (OPAE's out-of-tree one):
//   /sys/class/fpga/intel-fpga-dev.D -> .../<pci fn>/fpga/intel-fpga-dev.D
//   intel-fpga-dev.D/intel-fpga-fme.K/pr/interface_id
//   intel-fpga-dev.D/intel-fpga-port.N/afu_id, ...
//   /dev/intel-fpga-fme.K, /dev/intel-fpga-port.N
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "devplug/common/fs.h"

namespace devplug::fpga {

enum class Driver { kDfl, kIntelFpga };

const char* DriverName(Driver d);

// One port: one reconfiguration slot, one device of the resource.
struct Port {
  Driver driver = Driver::kDfl;
  std::string name;      // "dfl-port.0": the device ID
  std::string sys_dir;   // its sysfs folder (host_root applied)
  std::string node;      // "/dev/dfl-port.0" (no host_root)
  std::string function;  // PCI address of the function that carries it
  std::string pf;        // the PF's address (function itself unless a VF)
  int numa_node = -1;
  std::string fme;       // "dfl-fme.0"; "" when no FME was found
  std::string fme_node;  // "/dev/dfl-fme.0"
  std::string fme_dir;   // the FME's sysfs folder (host_root applied)
};

// Every port of `driver`, sorted by name in natural order. A missing class
// folder is an empty list; ports whose function cannot be found are still
// listed (function "").
std::vector<Port> DiscoverPorts(const common::HostRoot& root, Driver driver);

// Which driver `driver = "auto"` means on this host: the intel-fpga class
// folder if present, else DFL.
Driver DetectDriver(const common::HostRoot& root);

// The FME's interface (compat) ID, canonical; an FsError when unreadable.
common::Result<std::string> ReadInterfaceId(const Port& port);

// "dfl-port.2" < "dfl-port.10".
bool NaturalLess(const std::string& a, const std::string& b);

// ---- device operations --------------------------------------------------------------------

// The partial-reconfiguration request, laid out as each driver's ioctl
// takes it. `argsz` is the size of the driver's struct.
struct PrRequest {
  uint32_t argsz = 0;
  uint32_t flags = 0;
  uint32_t port_id = 0;
  uint32_t buffer_size = 0;
  uint64_t buffer_address = 0;
};
// DFL_FPGA_FME_PORT_PR (linux/fpga-dfl.h) and its intel-fpga twin.
unsigned long PrIoctl(Driver d);
// DFL_FPGA_PORT_RESET and its intel-fpga twin.
unsigned long ResetIoctl(Driver d);

// The system calls the operations below make, behind a seam: production
// uses the real ones; the test build of the module uses ones that act on
// its fixture tree (there is no DFL driver on a test machine).
struct DeviceOps {
  // open(2) of a device node (host_root applied); returns fd or -errno.
  int (*open)(const std::string& path, int flags);
  // ioctl(2) on a node opened with open(); `path` is the node's. Returns 0
  // or -errno.
  int (*ioctl)(int fd, const std::string& path, unsigned long request, void* arg);
  void (*close)(int fd);
};
const DeviceOps& RealDeviceOps();
// The operations this build of the module uses, chosen at link time: the
// real ones (device_ops.cc, the installed module) or the fixture's
// (fixture_ops.cc, the test build). The instance gets them at create().
const DeviceOps& ModuleDeviceOps();

// Programs `port` through its FME node with `bitstream` (the bytes after a
// GBS file's header and metadata): one PR ioctl. `fme_path` has host_root
// applied. Returns "" or why it failed.
std::string ProgramByIoctl(const DeviceOps& ops, Driver driver, const std::string& fme_path,
                           uint32_t port_id, const std::string& bitstream);

// The release in-use probe: opens the port node exclusively. An fd, or
// -EBUSY while anyone holds the port, or another -errno.
int ProbeExclusive(const DeviceOps& ops, const std::string& port_path);

}  // namespace devplug::fpga
