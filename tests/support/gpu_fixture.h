// A GPU node for the nvidia module's tests: the driver's device nodes and
// /proc/driver/nvidia/gpus/<pci>/information under a host_root, the GPUs'
// PCI functions in sysfs, and the fake NVML's script ($FAKE_NVML_DIR/gpus).
#pragma once

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "sysfs_fixture.h"
#include "test_util.h"

namespace devplug::testing {

struct FakeGpu {
  std::string uuid;
  std::string pci;  // "0000:3b:00.0"
  unsigned minor = 0;
  int numa_node = -1;
  std::string model = "NVIDIA A100-SXM4-40GB";
};

class GpuFixture {
 public:
  // host_root: the fixture tree; nvml_dir: the fake NVML's folder (also
  // exported as FAKE_NVML_DIR for this process and its children).
  GpuFixture(std::string host_root, std::string nvml_dir)
      : root_(std::move(host_root)), nvml_dir_(std::move(nvml_dir)), fx_(root_) {
    setenv("FAKE_NVML_DIR", nvml_dir_.c_str(), 1);
    WriteFile(nvml_dir_ + "/events", "");
  }

  // Adds the GPUs everywhere: PCI function, /dev/nvidia<minor>, procfs
  // entry, and the NVML script; plus the control nodes. `extra` lines go to
  // the NVML script after the GPUs (nvlink, ancestor, lost, initfail).
  bool Build(const std::vector<FakeGpu>& gpus, const std::vector<std::string>& extra = {}) {
    bool ok = MakeCharDevice(root_ + "/dev/nvidiactl", 195, 255) &&
              MakeCharDevice(root_ + "/dev/nvidia-uvm", 510, 0) &&
              MakeCharDevice(root_ + "/dev/nvidia-uvm-tools", 510, 1);
    for (const FakeGpu& g : gpus) {
      fx_.AddPci({.address = g.pci, .vendor = 0x10de, .device = 0x20b0, .class_code = 0x030200,
                  .driver = "nvidia", .numa_node = g.numa_node, .iommu_group = -1,
                  .parent = {}, .net = {}});
      ok = MakeCharDevice(root_ + "/dev/nvidia" + std::to_string(g.minor), 195, g.minor) && ok;
      WriteInformation(g);
    }
    Script(gpus, extra);
    return ok;
  }

  SysfsFixture& sysfs() { return fx_; }

  // Rewrites the fake NVML's script only (read at the next nvmlInit_v2).
  void Script(const std::vector<FakeGpu>& gpus, const std::vector<std::string>& extra = {}) {
    std::string script;
    for (const FakeGpu& g : gpus) {
      std::string model = g.model;
      for (char& c : model)
        if (c == ' ') c = '_';
      // NVML writes bus IDs with an 8-digit domain, upper case.
      std::string bus = "0000" + g.pci;
      for (char& c : bus) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      script += "gpu " + g.uuid + " " + std::to_string(g.minor) + " " + bus + " " + model + "\n";
    }
    for (const std::string& l : extra) script += l + "\n";
    WriteFile(nvml_dir_ + "/gpus", script);
  }

  void WriteInformation(const FakeGpu& g) {
    WriteFile(root_ + "/proc/driver/nvidia/gpus/" + g.pci + "/information",
              "Model: \t\t " + g.model + "\nIRQ:   \t\t 42\nGPU UUID: \t " + g.uuid +
                  "\nVideo BIOS: \t 92.00.25.00.08\nBus Type: \t PCIe\nDMA Size: \t 47 bits\n"
                  "DMA Mask: \t 0x7fffffffffff\nBus Location: \t " + g.pci +
                  "\nDevice Minor: \t " + std::to_string(g.minor) + "\nGPU Excluded:\t No\n");
  }

  // Appends "xid <index> <code>" for the fake NVML's event sets.
  void Xid(int index, int code) {
    std::ofstream(nvml_dir_ + "/events", std::ios::app)
        << "xid " << index << " " << code << "\n" << std::flush;
  }

  const std::string& nvml_dir() const { return nvml_dir_; }

 private:
  std::string root_, nvml_dir_;
  SysfsFixture fx_;
};

}  // namespace devplug::testing
