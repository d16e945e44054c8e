// Device operations for the module's test build (fpga-opae-fixture.so, never
// installed): no DFL driver exists on a test machine, so the ioctls act on
// the fixture tree the way the driver acts on the card, and each one leaves
// a line in <root>/fpga-ops.log for the tests to check:
//   pr <fme node> port_id=<n> argsz=<n> flags=<n> size=<n> head=<first bytes>
//   reset <port node>
// PR writes the accelerator ID found in the bitstream ("AFU:<32 hex>" at its
// start, as the tests build them) into afu_id of the FME's port whose `id` is
// port_id; a file <node>.fail beside the FME node makes it fail with EIO. A
// file <node>.busy beside a port node makes an exclusive open fail with
// EBUSY, as the driver does while the port is open elsewhere.
#include <fcntl.h>
#include <unistd.h>

#include <linux/fpga-dfl.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "devplug/common/fs.h"
#include "dfl.h"

namespace devplug::fpga {
namespace {

std::string RootOf(const std::string& node) {
  const size_t at = node.rfind("/dev/");
  return at == std::string::npos ? std::string() : node.substr(0, at);
}

void Log(const std::string& root, const std::string& line) {
  if (FILE* f = fopen((root + "/fpga-ops.log").c_str(), "a")) {
    fprintf(f, "%s\n", line.c_str());
    fclose(f);
  }
}

int FixtureOpen(const std::string& path, int flags) {
  if ((flags & O_EXCL) && common::Exists(path + ".busy")) return -EBUSY;
  // O_PATH: the fixture nodes have no driver behind them.
  (void)flags;
  const int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  return fd >= 0 ? fd : -errno;
}

int FixtureIoctl(int, const std::string& path, unsigned long request, void* arg) {
  const std::string root = RootOf(path);
  const std::string node = path.substr(root.size());
  const std::string name = node.substr(5);  // after "/dev/"
  const Driver driver = name.rfind("dfl-", 0) == 0 ? Driver::kDfl : Driver::kIntelFpga;
  if (request == ResetIoctl(driver) && name.find("-port.") != std::string::npos) {
    Log(root, "reset " + node);
    return 0;
  }
  if (request != PrIoctl(driver) || arg == nullptr) return -ENOTTY;
  const auto* req = static_cast<const PrRequest*>(arg);  // the shared prefix of both layouts
  const char* bits = reinterpret_cast<const char*>(static_cast<uintptr_t>(req->buffer_address));
  std::string head(bits, std::min<uint32_t>(req->buffer_size, 36));
  for (char& c : head)
    if (c < 0x20 || c > 0x7e) c = '.';
  Log(root, "pr " + node + " port_id=" + std::to_string(req->port_id) +
                " argsz=" + std::to_string(req->argsz) + " flags=" + std::to_string(req->flags) +
                " size=" + std::to_string(req->buffer_size) + " head=" + head);
  if (common::Exists(path + ".fail")) return -EIO;
  if (head.rfind("AFU:", 0) != 0 || head.size() < 36) return -EINVAL;
  for (const Port& p : DiscoverPorts(common::HostRoot(root.empty() ? "/" : root), driver)) {
    if (p.fme != name) continue;
    if (common::ReadIntAttr(p.sys_dir + "/id").value_or(0) != req->port_id) continue;
    if (FILE* f = fopen((p.sys_dir + "/afu_id").c_str(), "w")) {
      fprintf(f, "%s\n", head.substr(4, 32).c_str());
      fclose(f);
      return 0;
    }
    return -EIO;
  }
  return -EINVAL;
}

void FixtureClose(int fd) { ::close(fd); }

}  // namespace

const DeviceOps& FixtureDeviceOps() {
  static const DeviceOps ops{&FixtureOpen, &FixtureIoctl, &FixtureClose};
  return ops;
}

const DeviceOps& ModuleDeviceOps() { return FixtureDeviceOps(); }

}  // namespace devplug::fpga
