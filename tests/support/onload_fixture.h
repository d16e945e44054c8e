// A node with OpenOnload and Solarflare NICs, under a test's host_root, on
// top of SysfsFixture's PCI functions:
//
//   sys/module/{onload,sfc,sfc_resource,sfc_char}/      loaded kernel modules
//   sys/module/onload/parameters/cplane_server_path      "" (the default server)
//   sys/class/{onload,onload_epoll,sfc_char}/<name> -> ../../devices/virtual/<class>/<name>
//   dev/onload (char 246:0), dev/onload_epoll (245:0), dev/sfc_char (244:0)
//   sbin/onload_cp_server                                the control-plane server
//   usr/lib64/libonload.so -> libonload.so.1 -> libonload.so.1.0.0, the same
//     for libonload_ext, and neighbours that are not mounted (libciul.so.1,
//     libonload_ext.a)
//   usr/bin/onload                                       the wrapper script
//
// A NIC is a PCI function bound to its driver with a net interface:
//   sys/devices/pci0000:3a/0000:3b:00.0/net/<if>/{type, carrier, address,
//     device -> ../../../0000:3b:00.0}
//   sys/class/net/<if> -> ../../devices/pci0000:3a/0000:3b:00.0/net/<if>
//   sys/devices/.../0000:3b:00.0/sfc.onload.<N>/sfc_resource/enable  (sfc_resource bound)
// and a virtual interface (a pod's veth) lives under sys/devices/virtual/net.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "sysfs_fixture.h"
#include "test_util.h"

namespace devplug::testing {

struct NicSpec {
  std::string address;  // "0000:3b:00.0"
  std::string ifname;   // "ens1f0np0"
  std::string driver = "sfc";
  uint16_t vendor = 0x1924;  // Solarflare
  uint16_t device = 0x0b03;  // SFC9250
  int numa_node = 0;
  int onload_index = 0;  // N of sfc.onload.<N>; -1: no sfc_resource binding
  bool onload_enabled = true;
  bool carrier = true;
};

class OnloadFixture {
 public:
  explicit OnloadFixture(std::string root) : root_(std::move(root)), pci_(root_) {}
  const std::string& root() const { return root_; }
  SysfsFixture& pci() { return pci_; }

  // Onload installed and its drivers loaded; false without CAP_MKNOD.
  bool Install() {
    for (const char* m : {"sfc", "sfc_resource", "sfc_char"})
      std::filesystem::create_directories(root_ + "/sys/module/" + m);
    WriteExec("sbin/onload_cp_server", "#!/bin/sh\nexit 0\n");
    std::filesystem::create_directories(root_ + "/usr/lib64");
    for (const char* lib : {"libonload", "libonload_ext"}) {
      const std::string base = std::string(lib) + ".so";
      WriteFile(root_ + "/usr/lib64/" + base + ".1.0.0",
                "\x7f"
                "ELF");
      Symlink(base + ".1.0.0", "usr/lib64/" + base + ".1");
      Symlink(base + ".1", "usr/lib64/" + base);
    }
    WriteFile(root_ + "/usr/lib64/libciul.so.1",
              "\x7f"
              "ELF");
    WriteFile(root_ + "/usr/lib64/libonload_ext.a", "!<arch>\n");
    WriteExec("usr/bin/onload", "#!/bin/sh\nexec \"$@\"\n");
    return Load() && MakeCharDevice(root_ + "/dev/sfc_char", 244, 0) &&
           ClassEntry("sfc_char", "sfc_char");
  }

  // modprobe onload / rmmod onload: the module folder and its two nodes.
  bool Load() {
    std::filesystem::create_directories(root_ + "/sys/module/onload/parameters");
    WriteFile(root_ + "/sys/module/onload/parameters/cplane_server_path", "\n");
    return MakeCharDevice(root_ + "/dev/onload", 246, 0) &&
           MakeCharDevice(root_ + "/dev/onload_epoll", 245, 0) && ClassEntry("onload", "onload") &&
           ClassEntry("onload_epoll", "onload_epoll");
  }
  void Unload() {
    for (const char* p : {"/sys/module/onload", "/dev/onload", "/dev/onload_epoll",
                          "/sys/class/onload", "/sys/class/onload_epoll",
                          "/sys/devices/virtual/onload", "/sys/devices/virtual/onload_epoll"})
      std::filesystem::remove_all(root_ + p);
  }
  void SetCplanePath(const std::string& path) {
    WriteFile(root_ + "/sys/module/onload/parameters/cplane_server_path", path + "\n");
  }

  void AddNic(const NicSpec& n) {
    pci_.AddPci({.address = n.address,
                 .vendor = n.vendor,
                 .device = n.device,
                 .class_code = 0x020000,
                 .driver = n.driver,
                 .numa_node = n.numa_node,
                 .iommu_group = -1,
                 .parent = {},
                 .net = {n.ifname}});
    const std::string dev = Rel(pci_.DevicePath(n.address));
    AddInterface(dev + "/net/" + n.ifname, n.ifname, n.carrier);
    pci_.Link(dev + "/net/" + n.ifname + "/device", dev);
    if (n.onload_index >= 0) {
      const std::string aux = dev + "/sfc.onload." + std::to_string(n.onload_index);
      std::filesystem::create_directories(root_ + "/" + aux + "/sfc_resource");
      WriteFile(root_ + "/" + aux + "/sfc_resource/enable", n.onload_enabled ? "1\n" : "0\n");
    }
  }
  // A second interface on a NIC's function (some adapters show two).
  void AddInterfaceTo(const std::string& address, const std::string& ifname, bool carrier) {
    const std::string dev = Rel(pci_.DevicePath(address));
    AddInterface(dev + "/net/" + ifname, ifname, carrier);
    pci_.Link(dev + "/net/" + ifname + "/device", dev);
  }
  // A virtual interface: no device link.
  void AddVirtual(const std::string& ifname) {
    AddInterface("sys/devices/virtual/net/" + ifname, ifname, true);
  }
  void RemoveNic(const std::string& address, const std::string& ifname) {
    std::filesystem::remove(root_ + "/sys/class/net/" + ifname);
    pci_.RemovePci(address);
  }
  void SetEnable(const std::string& address, int index, bool on) {
    WriteFile(
        pci_.DevicePath(address) + "/sfc.onload." + std::to_string(index) + "/sfc_resource/enable",
        on ? "1\n" : "0\n");
  }
  void SetCarrier(const std::string& ifname, bool up) {
    WriteFile(root_ + "/sys/class/net/" + ifname + "/carrier", up ? "1\n" : "0\n");
  }

 private:
  std::string Rel(const std::string& path) const {
    return std::filesystem::path(path).lexically_relative(root_).string();
  }
  void AddInterface(const std::string& dir_rel, const std::string& ifname, bool carrier) {
    const std::string dir = root_ + "/" + dir_rel;
    std::filesystem::create_directories(dir);
    WriteFile(dir + "/type", "1\n");  // ARPHRD_ETHER
    WriteFile(dir + "/carrier", carrier ? "1\n" : "0\n");
    WriteFile(dir + "/address", "00:0f:53:00:00:01\n");
    WriteFile(dir + "/ifindex", "7\n");
    pci_.Link("sys/class/net/" + ifname, dir_rel);
  }
  // sys/devices/virtual/<cls>/<name>/dev and its class link.
  bool ClassEntry(const std::string& cls, const std::string& name) {
    const std::string dir = "sys/devices/virtual/" + cls + "/" + name;
    std::filesystem::create_directories(root_ + "/" + dir);
    WriteFile(root_ + "/" + dir + "/uevent", "DEVNAME=" + name + "\n");
    pci_.Link("sys/class/" + cls + "/" + name, dir);
    return true;
  }
  void Symlink(const std::string& target, const std::string& link_rel) {
    std::error_code ec;
    std::filesystem::remove(root_ + "/" + link_rel, ec);
    std::filesystem::create_symlink(target, root_ + "/" + link_rel);
  }
  void WriteExec(const std::string& rel, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(root_ + "/" + rel).parent_path());
    WriteFile(root_ + "/" + rel, text);
    chmod((root_ + "/" + rel).c_str(), 0755);
  }

  std::string root_;
  SysfsFixture pci_;
};

}  // namespace devplug::testing
