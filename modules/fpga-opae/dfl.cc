#include "dfl.h"

#include <fcntl.h>
#include <linux/fpga-dfl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>

#include "devplug/common/pci.h"
#include "gbs.h"

namespace devplug::fpga {
namespace {

using common::FsError;
using common::HostRoot;
using common::Result;

// The intel-fpga driver's request: the DFL one plus a status the driver
// fills when the hardware reports a PR error.
struct IntelFpgaPortPr {
  uint32_t argsz;
  uint32_t flags;
  uint32_t port_id;
  uint32_t buffer_size;
  uint64_t buffer_address;
  uint64_t status;
};
// Both drivers number their ioctls alike: magic 0xB6, port base 0x40, FME
// base 0x80.
constexpr unsigned long kIntelFpgaPortPr = _IO(0xB6, 0x80);
constexpr unsigned long kIntelFpgaPortReset = _IO(0xB6, 0x40);
static_assert(DFL_FPGA_FME_PORT_PR == kIntelFpgaPortPr);
static_assert(sizeof(dfl_fpga_fme_port_pr) == 24 && sizeof(IntelFpgaPortPr) == 32);

struct Names {
  const char* class_dir;
  const char* fme_prefix;
  const char* port_prefix;
};
Names NamesOf(Driver d) {
  if (d == Driver::kDfl) return {"/sys/class/fpga_region", "dfl-fme.", "dfl-port."};
  return {"/sys/class/fpga", "intel-fpga-fme.", "intel-fpga-port."};
}

// The nearest folder above `path` named like a PCI function, or "".
std::string PciFunctionAbove(const std::string& path) {
  std::string_view p = path;
  while (!p.empty()) {
    const size_t slash = p.rfind('/');
    if (slash == std::string_view::npos) break;
    const std::string_view name = p.substr(slash + 1);
    if (common::IsPciAddress(name)) return std::string(name);
    p = p.substr(0, slash);
  }
  return "";
}

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return "";
  return buf;
}

int RealOpen(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  return fd >= 0 ? fd : -errno;
}
int RealIoctl(int fd, const std::string&, unsigned long request, void* arg) {
  return ::ioctl(fd, request, arg) == 0 ? 0 : -errno;
}
void RealClose(int fd) { ::close(fd); }

}  // namespace

const char* DriverName(Driver d) { return d == Driver::kDfl ? "dfl" : "intel-fpga"; }

bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = a[i] >= '0' && a[i] <= '9', db = b[j] >= '0' && b[j] <= '9';
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && a[ie] >= '0' && a[ie] <= '9') ++ie;
      while (je < b.size() && b[je] >= '0' && b[je] <= '9') ++je;
      // Compare the numbers by value: strip leading zeros, then length, then digits.
      size_t is = i, js = j;
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      if (int c = a.compare(is, ie - is, b, js, je - js); c != 0) return c < 0;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  if (a.size() - i != b.size() - j) return a.size() - i < b.size() - j;
  return a < b;
}

Driver DetectDriver(const HostRoot& root) {
  return common::Exists(root.Path("/sys/class/fpga")) ? Driver::kIntelFpga : Driver::kDfl;
}

std::vector<Port> DiscoverPorts(const HostRoot& root, Driver driver) {
  const Names n = NamesOf(driver);
  auto classes = common::ListDir(root.Path(n.class_dir));
  if (!classes) return {};
  struct Fme {
    std::string name, dir;
  };
  std::map<std::string, Fme> fme_of_function;  // PCI function -> its FME
  std::vector<Port> ports;
  for (const std::string& entry : *classes) {
    const std::string real = RealPath(root.Path(n.class_dir) + "/" + entry);
    if (real.empty()) continue;
    auto children = common::ListDir(real);
    if (!children) continue;
    const std::string function = PciFunctionAbove(real);
    for (const std::string& c : *children) {
      if (c.rfind(n.fme_prefix, 0) == 0) {
        if (!function.empty() && !fme_of_function.count(function))
          fme_of_function[function] = {c, real + "/" + c};
      } else if (c.rfind(n.port_prefix, 0) == 0) {
        Port p;
        p.driver = driver;
        p.name = c;
        p.sys_dir = real + "/" + c;
        p.node = "/dev/" + c;
        p.function = function;
        ports.push_back(std::move(p));
      }
    }
  }
  const std::string pci = root.Path(common::kPciDevicesDir);
  for (Port& p : ports) {
    p.pf = p.function;
    if (p.function.empty()) continue;
    const std::string dev = pci + "/" + p.function;
    if (auto physfn = common::LinkName(dev + "/physfn")) p.pf = *physfn;
    p.numa_node = common::NumaNodeOf(dev);
    auto f = fme_of_function.find(p.pf);
    if (f == fme_of_function.end()) f = fme_of_function.find(p.function);
    if (f != fme_of_function.end()) {
      p.fme = f->second.name;
      p.fme_node = "/dev/" + f->second.name;
      p.fme_dir = f->second.dir;
    }
  }
  std::sort(ports.begin(), ports.end(),
            [](const Port& a, const Port& b) { return NaturalLess(a.name, b.name); });
  // Two class entries can lead to one port only through odd links; keep one.
  ports.erase(std::unique(ports.begin(), ports.end(),
                          [](const Port& a, const Port& b) { return a.name == b.name; }),
              ports.end());
  return ports;
}

Result<std::string> ReadInterfaceId(const Port& port) {
  if (port.fme_dir.empty()) return FsError{ENOENT, port.name, "no FME found for this port"};
  std::string path;
  if (port.driver == Driver::kIntelFpga) {
    path = port.fme_dir + "/pr/interface_id";
  } else {
    // dfl-fme.K/dfl-fme-region.R/fpga_region/regionY/compat_id
    auto subs = common::ListDir(port.fme_dir);
    if (subs) {
      for (const std::string& s : *subs) {
        if (s.rfind("dfl-fme-region.", 0) != 0) continue;
        const std::string base = port.fme_dir + "/" + s + "/fpga_region";
        auto regions = common::ListDir(base);
        if (!regions) continue;
        for (const std::string& r : *regions) {
          if (common::Exists(base + "/" + r + "/compat_id")) {
            path = base + "/" + r + "/compat_id";
            break;
          }
        }
        if (!path.empty()) break;
      }
    }
    if (path.empty())
      return FsError{ENOENT, port.fme_dir + "/dfl-fme-region.*/fpga_region/region*/compat_id", ""};
  }
  auto text = common::ReadAttr(path);
  if (!text) return text.error();
  auto id = CanonicalId(*text);
  if (!id) return FsError{EINVAL, path, "not a 32-digit hex ID"};
  return *id;
}

unsigned long PrIoctl(Driver d) {
  return d == Driver::kDfl ? DFL_FPGA_FME_PORT_PR : kIntelFpgaPortPr;
}
unsigned long ResetIoctl(Driver d) {
  return d == Driver::kDfl ? DFL_FPGA_PORT_RESET : kIntelFpgaPortReset;
}

const DeviceOps& RealDeviceOps() {
  static const DeviceOps ops{&RealOpen, &RealIoctl, &RealClose};
  return ops;
}

std::string ProgramByIoctl(const DeviceOps& ops, Driver driver, const std::string& fme_path,
                           uint32_t port_id, const std::string& bitstream) {
  if (bitstream.empty()) return "the bitstream is empty";
  if (bitstream.size() > UINT32_MAX) return "the bitstream is over 4 GiB";
  const int fd = ops.open(fme_path, O_RDWR);
  if (fd < 0) return fme_path + ": " + std::strerror(-fd);
  int rc;
  uint64_t status = 0;
  if (driver == Driver::kDfl) {
    dfl_fpga_fme_port_pr req{};
    req.argsz = sizeof req;
    req.flags = 0;
    req.port_id = port_id;
    req.buffer_size = static_cast<uint32_t>(bitstream.size());
    req.buffer_address = reinterpret_cast<uintptr_t>(bitstream.data());
    rc = ops.ioctl(fd, fme_path, PrIoctl(driver), &req);
  } else {
    IntelFpgaPortPr req{};
    req.argsz = sizeof req;
    req.port_id = port_id;
    req.buffer_size = static_cast<uint32_t>(bitstream.size());
    req.buffer_address = reinterpret_cast<uintptr_t>(bitstream.data());
    rc = ops.ioctl(fd, fme_path, PrIoctl(driver), &req);
    status = req.status;
  }
  ops.close(fd);
  if (rc == 0) return "";
  std::string why = "partial reconfiguration of port " + std::to_string(port_id) + " through " +
                    fme_path + " failed: " + std::strerror(-rc);
  if (rc == -EIO) why += " (the card reported a PR error";
  if (rc == -EIO && status != 0)
    why += ", status 0x" + [&] {
      char b[24];
      snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(status));
      return std::string(b);
    }();
  if (rc == -EIO) why += ")";
  return why;
}

int ProbeExclusive(const DeviceOps& ops, const std::string& port_path) {
  return ops.open(port_path, O_RDWR | O_EXCL);
}

}  // namespace devplug::fpga
