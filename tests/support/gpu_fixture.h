// A GPU node for the nvidia module's tests: the driver's device nodes and
// /proc/driver/nvidia/gpus/<pci>/information under a host_root, the GPUs'
// PCI functions in sysfs, and the fake NVML's script ($FAKE_NVML_DIR/gpus).
#pragma once

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "sysfs_fixture.h"
#include "test_util.h"

namespace devplug::testing {

struct FakeGpu {
  std::string uuid;
  std::string pci;  // "0000:3b:00.0"
  unsigned minor = 0;
  int numa_node = -1;
  std::string model = "NVIDIA A100-SXM4-40GB";
  unsigned long long mib = 0;  // total memory; 0: the fake NVML's default
};

// A MIG device of GPU `gpu` (an index into the GPUs given to Build()).
struct FakeMig {
  int gpu = 0;
  std::string uuid;
  unsigned gi = 0, ci = 0;
  unsigned gi_slices = 1, ci_slices = 1;
  unsigned long long mib = 0;  // its memory
};

// An H100 80GB's total memory as NVML reports it, and its MIG profiles'.
inline constexpr unsigned long long kH100Mib = 81559;
inline FakeMig Mig1g10gb(int gpu, std::string uuid, unsigned gi) {
  return {gpu, std::move(uuid), gi, 0, 1, 1, 9856};
}
inline FakeMig Mig3g40gb(int gpu, std::string uuid, unsigned gi) {
  return {gpu, std::move(uuid), gi, 0, 3, 3, 40192};
}

class GpuFixture {
 public:
  // host_root: the fixture tree; nvml_dir: the fake NVML's folder (also
  // exported as FAKE_NVML_DIR for this process and its children).
  GpuFixture(std::string host_root, std::string nvml_dir)
      : root_(std::move(host_root)), nvml_dir_(std::move(nvml_dir)), fx_(root_) {
    setenv("FAKE_NVML_DIR", nvml_dir_.c_str(), 1);
    WriteFile(nvml_dir_ + "/events", "");
  }
  // The NVML sessions this process began here end on the module's own
  // thread, after an event wait: waits (up to 20 s) until they did, so that
  // none reaches the next fixture's folder or keeps its GPUs in the fake.
  ~GpuFixture() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(nvml_dir_ + "/references");
      int n = 0, pid = 0;
      if (!(in >> n >> pid) || n == 0 || pid != getpid()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  GpuFixture(const GpuFixture&) = delete;
  GpuFixture& operator=(const GpuFixture&) = delete;

  // Adds the GPUs everywhere: PCI function, /dev/nvidia<minor>, procfs
  // entry, and the NVML script; plus the control nodes. `extra` lines go to
  // the NVML script after the GPUs (nvlink, ancestor, lost, initfail).
  bool Build(const std::vector<FakeGpu>& gpus, const std::vector<std::string>& extra = {}) {
    bool ok = MakeCharDevice(root_ + "/dev/nvidiactl", 195, 255) &&
              MakeCharDevice(root_ + "/dev/nvidia-uvm", 510, 0) &&
              MakeCharDevice(root_ + "/dev/nvidia-uvm-tools", 510, 1);
    for (const FakeGpu& g : gpus) {
      fx_.AddPci({.address = g.pci,
                  .vendor = 0x10de,
                  .device = 0x20b0,
                  .class_code = 0x030200,
                  .driver = "nvidia",
                  .numa_node = g.numa_node,
                  .iommu_group = -1,
                  .parent = {},
                  .net = {}});
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
    for (size_t i = 0; i < gpus.size(); i++)
      if (gpus[i].mib)
        script += "mem " + std::to_string(i) + " " + std::to_string(gpus[i].mib) + "\n";
    for (const std::string& l : extra) script += l + "\n";
    WriteFile(nvml_dir_ + "/gpus", script);
  }

  void WriteInformation(const FakeGpu& g) {
    WriteFile(root_ + "/proc/driver/nvidia/gpus/" + g.pci + "/information",
              "Model: \t\t " + g.model + "\nIRQ:   \t\t 42\nGPU UUID: \t " + g.uuid +
                  "\nVideo BIOS: \t 92.00.25.00.08\nBus Type: \t PCIe\nDMA Size: \t 47 bits\n"
                  "DMA Mask: \t 0x7fffffffffff\nBus Location: \t " +
                  g.pci + "\nDevice Minor: \t " + std::to_string(g.minor) +
                  "\nGPU Excluded:\t No\n");
  }

  // Appends "xid <index> <code>" for the fake NVML's event sets.
  void Xid(int index, int code) {
    std::ofstream(nvml_dir_ + "/events", std::ios::app) << "xid " << index << " " << code << "\n"
                                                        << std::flush;
  }
  // The same, naming one MIG instance of the GPU.
  void Xid(int index, int code, unsigned gi, unsigned ci) {
    std::ofstream(nvml_dir_ + "/events", std::ios::app)
        << "xid " << index << " " << code << " " << gi << " " << ci << "\n"
        << std::flush;
  }
  void MigChangeEvent(int index) {
    std::ofstream(nvml_dir_ + "/events", std::ios::app) << "migchange " << index << "\n"
                                                        << std::flush;
  }

  // MIG on the GPUs at `enabled` (indexes into `gpus`) with `migs`: the fake
  // NVML's MIG script (read at every MIG mode query), and what the driver
  // makes for each instance: /proc/driver/nvidia/capabilities/gpu<minor>/
  // mig/gi<gi>/access and .../ci<ci>/access ("DeviceFileMinor: N") and
  // /dev/nvidia-caps/nvidia-cap<N>. Capability minors stay the same for
  // the same (GPU, gi, ci) across calls.
  bool Mig(const std::vector<FakeGpu>& gpus, const std::vector<int>& enabled,
           const std::vector<FakeMig>& migs) {
    std::string script;
    for (int i : enabled) script += "mode " + std::to_string(i) + " 1\n";
    bool ok = true;
    const std::string caps = root_ + "/proc/driver/nvidia/capabilities";
    WriteFile(caps + "/mig/config", Access(1));
    WriteFile(caps + "/mig/monitor", Access(2));
    for (const FakeMig& m : migs) {
      script += "mig " + std::to_string(m.gpu) + " " + m.uuid + " " + std::to_string(m.gi) + " " +
                std::to_string(m.ci) + " " + std::to_string(m.gi_slices) + " " +
                std::to_string(m.ci_slices) + " " + std::to_string(m.mib) + "\n";
      const unsigned minor = gpus.at(static_cast<size_t>(m.gpu)).minor;
      const std::string gi_dir =
          caps + "/gpu" + std::to_string(minor) + "/mig/gi" + std::to_string(m.gi);
      const unsigned gi_cap = CapMinor(minor, m.gi, ~0u), ci_cap = CapMinor(minor, m.gi, m.ci);
      WriteFile(gi_dir + "/access", Access(gi_cap));
      WriteFile(gi_dir + "/ci" + std::to_string(m.ci) + "/access", Access(ci_cap));
      for (unsigned cap : {gi_cap, ci_cap})
        ok =
            (std::filesystem::exists(CapNode(cap)) || MakeCharDevice(CapNode(cap), 508, cap)) && ok;
    }
    WriteFile(nvml_dir_ + "/mig", script);
    return ok;
  }

  // The capability nodes of a MIG device, as Allocate should pass them.
  std::vector<std::string> CapNodes(unsigned minor, unsigned gi, unsigned ci) {
    return {"/dev/nvidia-caps/nvidia-cap" + std::to_string(CapMinor(minor, gi, ~0u)),
            "/dev/nvidia-caps/nvidia-cap" + std::to_string(CapMinor(minor, gi, ci))};
  }
  std::string CapNode(unsigned cap) const {
    return root_ + "/dev/nvidia-caps/nvidia-cap" + std::to_string(cap);
  }

  // How many times the fake NVML saw `call` (init, shutdown, eventsetcreate,
  // eventsetfree).
  int Calls(const std::string& call) const {
    std::ifstream in(nvml_dir_ + "/calls");
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line == call;
    return n;
  }

  // Polls until the fake NVML saw `call` at least `n` times (within 20 s).
  bool WaitCalls(const std::string& call, int n) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (Calls(call) < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  // While held, the fake NVML's event waits do not time out.
  void HoldEventWaits(bool hold) {
    if (hold)
      std::ofstream(nvml_dir_ + "/hold") << "held\n";
    else
      std::filesystem::remove(nvml_dir_ + "/hold");
  }

  const std::string& nvml_dir() const { return nvml_dir_; }

 private:
  static std::string Access(unsigned minor) {
    return "DeviceFileMinor: " + std::to_string(minor) +
           "\nDeviceFileMode: 292\nDeviceFileModify: 1\n";
  }
  unsigned CapMinor(unsigned minor, unsigned gi, unsigned ci) {
    auto [it, fresh] = caps_.try_emplace(std::make_tuple(minor, gi, ci), next_cap_);
    if (fresh) next_cap_++;
    return it->second;
  }

  std::string root_, nvml_dir_;
  SysfsFixture fx_;
  std::map<std::tuple<unsigned, unsigned, unsigned>, unsigned> caps_;
  unsigned next_cap_ = 21;
};

}  // namespace devplug::testing
