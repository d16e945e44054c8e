// Fixture trees shaped like a real node's sysfs and devfs, under a test's
// temporary host_root: PCI functions as directories under sys/devices with
// the same relative symlinks the kernel makes (bus/pci/devices/<addr>,
// driver, iommu_group, physfn, virtfn<k>, bus/pci/drivers/<drv>/<addr>,
// kernel/iommu_groups/<N>/devices/<addr>), and VFIO device nodes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace devplug::testing {

struct PciSpec {
  std::string address;  // "0000:3b:00.0"
  uint16_t vendor = 0x8086;
  uint16_t device = 0x1889;
  uint32_t class_code = 0x020000;
  std::string driver;    // "" = unbound
  int numa_node = -1;    // written as the kernel does ("-1" too)
  int iommu_group = -1;  // -1 = no iommu_group link
  // The bridge the function sits behind ("0000:3a:00.0"); empty puts it
  // directly under its root bus (sys/devices/pci<dom>:<bus>/<addr>).
  std::string parent;
  std::vector<std::string> net;  // interface names under <dev>/net
};

// An RDMA device (HCA) as the kernel's ib_core and ib_uverbs show it:
//   sys/devices/.../<pci>/infiniband/<ibdev>/{device -> ../../../<pci>, ports/<n>/state,
//     ports/<n>/link_layer, node_type}
//   sys/class/infiniband/<ibdev> -> ../../devices/.../infiniband/<ibdev>
//   sys/devices/.../<pci>/infiniband_verbs/uverbs<k>/{ibdev, dev}
//   sys/class/infiniband_verbs/uverbs<k> -> ...
//   sys/devices/.../<pci>/infiniband_mad/{umad,issm}<j>/{ibdev, port}, one per port
//   dev/infiniband/uverbs<k> (231:192+k), umad<j> (231:j), issm<j> (231:64+j)
// The PCI function itself must have been added with AddPci first.
struct RdmaSpec {
  std::string ibdev;                      // "mlx5_0"
  std::string pci;                        // "0000:3b:00.0"
  std::vector<int> port_states;           // per port, 1-based: 4 = ACTIVE, 1 = DOWN
  std::string link_layer = "InfiniBand";  // or "Ethernet" (RoCE)
  int uverbs = 0;                         // k of uverbs<k>
  int first_umad = 0;                     // j of the first port's umad<j>/issm<j>
};

class SysfsFixture {
 public:
  explicit SysfsFixture(std::string root) : root_(std::move(root)) {}
  const std::string& root() const { return root_; }

  // Creates the function's directory, attributes and links.
  void AddPci(const PciSpec& spec);
  // An SR-IOV PF with `vfs` virtual functions (physfn/virtfn<k> links,
  // sriov_totalvfs/sriov_numvfs); VFs live beside the PF, as in sysfs.
  void AddSriov(const PciSpec& pf, const std::vector<PciSpec>& vfs);
  void Bind(const std::string& address, const std::string& driver);
  void Unbind(const std::string& address);
  // Removes the function entirely, as hot-unplug does.
  void RemovePci(const std::string& address);
  // The device's directory (real path, under root).
  std::string DevicePath(const std::string& address) const;
  void SetAttr(const std::string& address, const std::string& name, const std::string& value);
  // A relative symlink as the kernel makes them; both paths relative to root.
  void Link(const std::string& link_rel, const std::string& target_rel);

  // An HCA and its device nodes; false without CAP_MKNOD.
  bool AddRdma(const RdmaSpec& spec);
  void SetPortState(const std::string& ibdev, int port, int state);
  // The HCA leaves (driver unbound or function removed): class links,
  // sysfs folders and device nodes go.
  void RemoveRdma(const RdmaSpec& spec);
  // /dev/infiniband/rdma_cm (a misc device).
  bool AddRdmaCm();

  // /dev/vfio/vfio (10:196) and /dev/vfio/<group>; false without CAP_MKNOD.
  bool AddVfioContainer();
  bool AddVfioGroup(int group, bool noiommu = false);
  void RemoveVfioGroup(int group);

 private:
  std::string DeviceRel(const PciSpec& spec) const;  // relative to root
  std::string root_;
};

}  // namespace devplug::testing
