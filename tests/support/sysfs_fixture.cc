#include "sysfs_fixture.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "test_util.h"

namespace devplug::testing {
namespace fs = std::filesystem;
namespace {

std::string Hex(uint32_t v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%0*x", width, v);
  return buf;
}

}  // namespace

std::string SysfsFixture::DeviceRel(const PciSpec& spec) const {
  const std::string domain = spec.address.substr(0, 4);
  if (spec.parent.empty()) {
    return "sys/devices/pci" + domain + ":" + spec.address.substr(5, 2) + "/" + spec.address;
  }
  const std::string pd = spec.parent.substr(0, 4), pb = spec.parent.substr(5, 2);
  return "sys/devices/pci" + pd + ":" + pb + "/" + spec.parent + "/" + spec.address;
}

std::string SysfsFixture::DevicePath(const std::string& address) const {
  std::error_code ec;
  fs::path p = fs::canonical(root_ + "/sys/bus/pci/devices/" + address, ec);
  if (ec) throw std::runtime_error("no such fixture device " + address);
  return p.string();
}

void SysfsFixture::Link(const std::string& link_rel, const std::string& target_rel) {
  fs::path link = fs::path(root_) / link_rel;
  fs::create_directories(link.parent_path());
  fs::path rel = (fs::path(root_) / target_rel).lexically_relative(link.parent_path());
  std::error_code ec;
  fs::remove(link, ec);
  fs::create_symlink(rel, link);
}

void SysfsFixture::AddPci(const PciSpec& spec) {
  const std::string dev = DeviceRel(spec);
  const std::string dir = root_ + "/" + dev;
  fs::create_directories(dir);
  WriteFile(dir + "/vendor", Hex(spec.vendor, 4) + "\n");
  WriteFile(dir + "/device", Hex(spec.device, 4) + "\n");
  WriteFile(dir + "/class", Hex(spec.class_code, 6) + "\n");
  WriteFile(dir + "/numa_node", std::to_string(spec.numa_node) + "\n");
  WriteFile(dir + "/uevent", "PCI_SLOT_NAME=" + spec.address + "\n");
  Link("sys/bus/pci/devices/" + spec.address, dev);
  Link(dev + "/subsystem", "sys/bus/pci");
  if (spec.iommu_group >= 0) {
    const std::string g = "sys/kernel/iommu_groups/" + std::to_string(spec.iommu_group);
    Link(dev + "/iommu_group", g);
    Link(g + "/devices/" + spec.address, dev);
  }
  for (const std::string& ifname : spec.net) fs::create_directories(dir + "/net/" + ifname);
  if (!spec.driver.empty()) Bind(spec.address, spec.driver);
}

void SysfsFixture::AddSriov(const PciSpec& pf, const std::vector<PciSpec>& vfs) {
  AddPci(pf);
  const std::string pf_dir = DevicePath(pf.address);
  WriteFile(pf_dir + "/sriov_totalvfs", std::to_string(vfs.size()) + "\n");
  WriteFile(pf_dir + "/sriov_numvfs", std::to_string(vfs.size()) + "\n");
  for (size_t k = 0; k < vfs.size(); k++) {
    PciSpec vf = vfs[k];
    vf.parent = pf.parent;
    AddPci(vf);
    const std::string vf_rel = DeviceRel(vf), pf_rel = DeviceRel(pf);
    Link(pf_rel + "/virtfn" + std::to_string(k), vf_rel);
    Link(vf_rel + "/physfn", pf_rel);
  }
}

void SysfsFixture::Bind(const std::string& address, const std::string& driver) {
  const std::string dev = fs::path(DevicePath(address)).lexically_relative(root_).string();
  const std::string drv = "sys/bus/pci/drivers/" + driver;
  Link(dev + "/driver", drv);
  Link(drv + "/" + address, dev);
}

void SysfsFixture::Unbind(const std::string& address) {
  const std::string dir = DevicePath(address);
  std::error_code ec;
  fs::path drv = fs::read_symlink(dir + "/driver", ec);
  if (ec) return;
  fs::remove(fs::path(dir) / "driver");
  fs::remove(root_ + "/sys/bus/pci/drivers/" + drv.filename().string() + "/" + address, ec);
}

void SysfsFixture::RemovePci(const std::string& address) {
  Unbind(address);
  const std::string dir = DevicePath(address);
  std::error_code ec;
  fs::path group = fs::read_symlink(dir + "/iommu_group", ec);
  if (!ec)
    fs::remove(root_ + "/sys/kernel/iommu_groups/" + group.filename().string() + "/devices/" +
               address);
  fs::remove(root_ + "/sys/bus/pci/devices/" + address);
  fs::remove_all(dir);
}

void SysfsFixture::SetAttr(const std::string& address, const std::string& name,
                           const std::string& value) {
  WriteFile(DevicePath(address) + "/" + name, value + "\n");
}

bool SysfsFixture::AddVfioContainer() { return MakeCharDevice(root_ + "/dev/vfio/vfio", 10, 196); }

bool SysfsFixture::AddVfioGroup(int group, bool noiommu) {
  // VFIO group nodes get a dynamic major; 243 is typical.
  return MakeCharDevice(root_ + "/dev/vfio/" + (noiommu ? "noiommu-" : "") + std::to_string(group),
                        243, static_cast<unsigned>(group));
}

void SysfsFixture::RemoveVfioGroup(int group) {
  std::error_code ec;
  fs::remove(root_ + "/dev/vfio/" + std::to_string(group), ec);
  fs::remove(root_ + "/dev/vfio/noiommu-" + std::to_string(group), ec);
}

}  // namespace devplug::testing
