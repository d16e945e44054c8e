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
  // The root bus of "<domain>:<bus>:<dev>.<fn>" is "pci<domain>:<bus>"; the
  // domain has 4 digits, or more above ffff (Intel VMD).
  auto root_bus = [](const std::string& address) {
    return "pci" + address.substr(0, address.find(':') + 3);
  };
  if (spec.parent.empty()) return "sys/devices/" + root_bus(spec.address) + "/" + spec.address;
  return "sys/devices/" + root_bus(spec.parent) + "/" + spec.parent + "/" + spec.address;
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
  // As the kernel writes sysfs links: up to a common ancestor of the link's
  // folder and the target's *parent*, then down. A link to an ancestor is
  // thus "../../../0000:3b:00.0", never "../..".
  const fs::path target = fs::path(root_) / target_rel;
  fs::path rel = target.parent_path().lexically_relative(link.parent_path()) / target.filename();
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

namespace {
const char* PortStateName(int state) {
  switch (state) {
    case 1:
      return "DOWN";
    case 2:
      return "INIT";
    case 3:
      return "ARMED";
    case 4:
      return "ACTIVE";
    case 5:
      return "ACTIVE_DEFER";
    default:
      return "NOP";
  }
}
}  // namespace

bool SysfsFixture::AddRdma(const RdmaSpec& spec) {
  const std::string pci = fs::path(DevicePath(spec.pci)).lexically_relative(root_).string();
  const std::string ib = pci + "/infiniband/" + spec.ibdev;
  fs::create_directories(root_ + "/" + ib);
  Link(ib + "/device", pci);
  WriteFile(root_ + "/" + ib + "/node_type", "1: CA\n");
  for (size_t p = 0; p < spec.port_states.size(); p++) {
    const std::string port = root_ + "/" + ib + "/ports/" + std::to_string(p + 1);
    WriteFile(port + "/state", std::to_string(spec.port_states[p]) + ": " +
                                   PortStateName(spec.port_states[p]) + "\n");
    WriteFile(port + "/link_layer", spec.link_layer + "\n");
  }
  Link("sys/class/infiniband/" + spec.ibdev, ib);
  const std::string verbs = pci + "/infiniband_verbs/uverbs" + std::to_string(spec.uverbs);
  WriteFile(root_ + "/" + verbs + "/ibdev", spec.ibdev + "\n");
  WriteFile(root_ + "/" + verbs + "/dev", "231:" + std::to_string(192 + spec.uverbs) + "\n");
  Link("sys/class/infiniband_verbs/uverbs" + std::to_string(spec.uverbs), verbs);
  bool ok = MakeCharDevice(root_ + "/dev/infiniband/uverbs" + std::to_string(spec.uverbs), 231,
                           192 + spec.uverbs);
  for (size_t p = 0; p < spec.port_states.size(); p++) {
    const int j = spec.first_umad + static_cast<int>(p);
    for (const char* kind : {"umad", "issm"}) {
      const std::string name = kind + std::to_string(j);
      const std::string dir = pci + "/infiniband_mad/" + name;
      WriteFile(root_ + "/" + dir + "/ibdev", spec.ibdev + "\n");
      WriteFile(root_ + "/" + dir + "/port", std::to_string(p + 1) + "\n");
      Link("sys/class/infiniband_mad/" + name, dir);
      ok = MakeCharDevice(root_ + "/dev/infiniband/" + name, 231,
                          static_cast<unsigned>((kind[0] == 'i' ? 64 : 0) + j)) &&
           ok;
    }
  }
  return ok;
}

void SysfsFixture::SetPortState(const std::string& ibdev, int port, int state) {
  WriteFile(root_ + "/sys/class/infiniband/" + ibdev + "/ports/" + std::to_string(port) + "/state",
            std::to_string(state) + ": " + PortStateName(state) + "\n");
}

void SysfsFixture::RemoveRdma(const RdmaSpec& spec) {
  std::error_code ec;
  const std::string pci = DevicePath(spec.pci);
  fs::remove(root_ + "/sys/class/infiniband/" + spec.ibdev, ec);
  fs::remove_all(pci + "/infiniband/" + spec.ibdev, ec);
  const std::string uverbs = "uverbs" + std::to_string(spec.uverbs);
  fs::remove(root_ + "/sys/class/infiniband_verbs/" + uverbs, ec);
  fs::remove_all(pci + "/infiniband_verbs/" + uverbs, ec);
  fs::remove(root_ + "/dev/infiniband/" + uverbs, ec);
  for (size_t p = 0; p < spec.port_states.size(); p++) {
    for (const char* kind : {"umad", "issm"}) {
      const std::string name = kind + std::to_string(spec.first_umad + static_cast<int>(p));
      fs::remove(root_ + "/sys/class/infiniband_mad/" + name, ec);
      fs::remove_all(pci + "/infiniband_mad/" + name, ec);
      fs::remove(root_ + "/dev/infiniband/" + name, ec);
    }
  }
}

bool SysfsFixture::AddRdmaCm() {
  return MakeCharDevice(root_ + "/dev/infiniband/rdma_cm", 10, 122);
}

}  // namespace devplug::testing
