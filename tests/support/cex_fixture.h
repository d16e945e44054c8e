// An s390 AP bus and zcrypt class under a temporary host_root, shaped as
// drivers/s390/crypto makes them (modules/cex/README.md): cards
// sys/devices/ap/cardXX with queues XX.YYYY, the bus's driver links, and
// /sys/class/zcrypt/{create,destroy}. The kernel's create/destroy are acted
// out by the module's test build (modules/cex/emulator.h).
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.h"

namespace devplug::testing {

struct CexQueueSpec {
  int domain = 6;
  std::string driver = "cex4queue";                       // "vfio_ap", "" (none)
  std::string online = "1", config = "1", chkstop = "0";  // "" leaves the file out
};

struct CexCardSpec {
  int adapter = 3;
  std::string type = "CEX8C";  // "" leaves it out (no cex4card)
  std::string hwtype = "14";
  std::string functions = "0x92800000";  // CCA
  std::string online = "1", config = "1", chkstop = "0";
  bool bound = true;
  std::vector<CexQueueSpec> queues{CexQueueSpec{}};
};

class CexFixture {
 public:
  explicit CexFixture(std::string root) : root_(std::move(root)) {
    namespace fs = std::filesystem;
    for (const char* d : {"cex4card", "cex4queue", "vfio_ap"})
      fs::create_directories(root_ + "/sys/bus/ap/drivers/" + d);
    fs::create_directories(root_ + "/sys/devices/ap");
    WriteFile(root_ + "/sys/devices/ap/uevent", "");
    fs::create_directories(root_ + "/sys/devices/ap/power");
    WriteFile(root_ + "/sys/class/zcrypt/create", "");
    WriteFile(root_ + "/sys/class/zcrypt/destroy", "");
    fs::create_directories(root_ + "/sys/devices/virtual/zcrypt");
    fs::create_directories(root_ + "/dev");
    WriteFile(root_ + "/proc/sysinfo",
              "Manufacturer:         IBM\nType:                 3931\n"
              "Sequence Code:        00000000000ABCDE\n");
  }
  static std::string Hex(int v, int width) {
    char b[16];
    std::snprintf(b, sizeof b, "%0*x", width, v);
    return b;
  }
  std::string CardDir(int adapter) const {
    return root_ + "/sys/devices/ap/card" + Hex(adapter, 2);
  }
  std::string QueueDir(int adapter, int domain) const {
    return CardDir(adapter) + "/" + Hex(adapter, 2) + "." + Hex(domain, 4);
  }
  void AddCard(const CexCardSpec& c) {
    namespace fs = std::filesystem;
    const std::string dir = CardDir(c.adapter);
    fs::create_directories(dir);
    Attr(dir, "hwtype", c.hwtype);
    Attr(dir, "raw_hwtype", c.hwtype);
    Attr(dir, "ap_functions", c.functions);
    Attr(dir, "config", c.config);
    Attr(dir, "chkstop", c.chkstop);
    Attr(dir, "depth", "8");
    Attr(dir, "request_count", "0");
    if (c.bound) {
      Attr(dir, "type", c.type);
      Attr(dir, "online", c.online);
      fs::create_symlink("../../../bus/ap/drivers/cex4card", dir + "/driver");
    }
    fs::create_symlink("../../../bus/ap", dir + "/subsystem");
    std::error_code ec;
    fs::create_symlink("../../../devices/ap/card" + Hex(c.adapter, 2),
                       root_ + "/sys/bus/ap/devices/card" + Hex(c.adapter, 2), ec);
    for (const CexQueueSpec& q : c.queues) AddQueue(c.adapter, q);
  }
  void AddQueue(int adapter, const CexQueueSpec& q) {
    namespace fs = std::filesystem;
    const std::string dir = QueueDir(adapter, q.domain);
    fs::create_directories(dir);
    Attr(dir, "config", q.config);
    Attr(dir, "chkstop", q.chkstop);
    Attr(dir, "request_count", "0");
    Attr(dir, "interrupt", "Interrupts enabled.");
    if (q.driver == "cex4queue") Attr(dir, "online", q.online);
    Bind(adapter, q.domain, q.driver);
    fs::create_symlink("../../../../bus/ap", dir + "/subsystem");
  }
  // Binds a queue to `driver` ("" unbinds it), as the driver core does: the
  // queue's `driver` link, and the driver's link named after the queue.
  void Bind(int adapter, int domain, const std::string& driver) {
    namespace fs = std::filesystem;
    const std::string dir = QueueDir(adapter, domain);
    const std::string name = Hex(adapter, 2) + "." + Hex(domain, 4);
    std::error_code ec;
    const fs::path old = fs::read_symlink(dir + "/driver", ec);
    if (!ec) {
      fs::remove(root_ + "/sys/bus/ap/drivers/" + old.filename().string() + "/" + name);
      fs::remove(dir + "/driver");
    }
    if (driver.empty()) return;
    fs::create_symlink("../../../../bus/ap/drivers/" + driver, dir + "/driver");
    fs::create_symlink("../../../../devices/ap/card" + Hex(adapter, 2) + "/" + name,
                       root_ + "/sys/bus/ap/drivers/" + driver + "/" + name);
  }
  // Changes one attribute of a card ("online") or queue, as the kernel does
  // (no uevent here: the test sends one or not).
  void SetCard(int adapter, const std::string& attr, const std::string& v) {
    Attr(CardDir(adapter), attr, v);
  }
  void SetQueue(int adapter, int domain, const std::string& attr, const std::string& v) {
    Attr(QueueDir(adapter, domain), attr, v);
  }
  // A node someone else made (zcryptctl, the vendor plugin, a person).
  void ForeignNode(const std::string& name) {
    const std::string dir = root_ + "/sys/devices/virtual/zcrypt/" + name;
    for (const char* m : {"apmask", "aqmask", "admask", "ioctlmask"})
      WriteFile(dir + "/" + m, "0x" + std::string(64, '0') + "\n");
    WriteFile(dir + "/dev", "250:200\n");
  }
  std::string NodeDir(const std::string& name) const {
    return root_ + "/sys/devices/virtual/zcrypt/" + name;
  }
  const std::string& root() const { return root_; }

 private:
  static void Attr(const std::string& dir, const std::string& name, const std::string& v) {
    if (v.empty()) {
      std::error_code ec;
      std::filesystem::remove(dir + "/" + name, ec);
      return;
    }
    WriteFile(dir + "/" + name, v + "\n");
  }
  std::string root_;
};

}  // namespace devplug::testing
