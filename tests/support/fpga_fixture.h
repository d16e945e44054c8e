// FPGA cards as the kernel's DFL driver (or OPAE's intel-fpga driver) shows
// them, under a test's host_root, on top of SysfsFixture's PCI functions:
//
//   sys/devices/pci0000:5d/0000:5d:00.0/0000:5e:00.0/         the PF (SysfsFixture)
//     fpga_region/region0/                                     the card's base region
//       dfl-fme.0/dfl-fme-region.0/fpga_region/region1/compat_id
//       dfl-port.0/{afu_id,id,power_state,errors/errors,dev,uevent}
//   .../0000:5e:00.1/{physfn -> ../0000:5e:00.0, fpga_region/region2/dfl-port.1/...}   a VF
//   sys/class/fpga_region/region{0,1,2} -> ../../devices/.../regionN
//   sys/bus/platform/devices/dfl-port.0 -> ../../../devices/.../dfl-port.0
//   dev/dfl-fme.0, dev/dfl-port.0                              character devices
//
// intel-fpga:  .../<pf>/fpga/intel-fpga-dev.0/{intel-fpga-fme.0/pr/interface_id,
//   intel-fpga-port.0/...}, sys/class/fpga/intel-fpga-dev.0 -> ..., dev/intel-fpga-{fme,port}.N
//
// Plus what the module reads from the host's own files: GBS bitstreams under
// srv/intel.com/fpga/<interface>/<afu>.gbs, and a stand-in for OPAE's fpgaconf
// that "programs" the fixture the way the real tool programs a card.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "sysfs_fixture.h"
#include "test_util.h"

namespace devplug::testing {

inline constexpr char kNlb0[] = "d8424dc4a4a3c413f89e433683f9040b";
inline constexpr char kNlb3[] = "f7df405cbd7acf7222f144b0b93acd18";
inline constexpr char kIdleAfu[] = "a1b2c3d4e5f60718293a4b5c6d7e8f90";
inline constexpr char kInterface[] = "ce48969398f05f33946d560708be108a";

struct FpgaPortSpec {
  int n = 0;   // dfl-port.<n>
  int id = 0;  // the port's index on its card (the PR port_id)
  std::string afu = kNlb0;
};

struct FpgaVfSpec {
  std::string address;  // the VF's PCI address
  int region = 0;       // regionN of its base region
  FpgaPortSpec port;
};

struct FpgaCardSpec {
  std::string pf = "0000:5e:00.0";
  std::string bridge = "0000:5d:00.0";
  int numa_node = 0;
  int region = 0;  // the PF's base region; region + 1 is the FME's
  int fme = 0;     // dfl-fme.<fme>
  std::string interface_id = kInterface;
  bool dashed_interface = false;  // some kernels print the compat_id with dashes
  std::vector<FpgaPortSpec> ports = {FpgaPortSpec{}};
  std::vector<FpgaVfSpec> vfs;
  bool legacy = false;  // the intel-fpga driver's layout instead of DFL's
};

class FpgaFixture {
 public:
  explicit FpgaFixture(std::string root) : root_(std::move(root)), pci_(root_) {}
  const std::string& root() const { return root_; }
  SysfsFixture& pci() { return pci_; }

  void AddCard(const FpgaCardSpec& card) {
    auto function = [&](const std::string& address, uint16_t device) {
      PciSpec f;
      f.address = address;
      f.device = device;
      f.class_code = 0x120000;  // processing accelerator
      f.driver = card.legacy ? "intel-fpga-pci" : "dfl-pci";
      f.numa_node = card.numa_node;
      f.parent = card.bridge;
      return f;
    };
    const PciSpec pf = function(card.pf, 0x0b30);
    std::vector<PciSpec> vfs;
    for (const FpgaVfSpec& v : card.vfs) vfs.push_back(function(v.address, 0x0b31));
    if (vfs.empty())
      pci_.AddPci(pf);
    else
      pci_.AddSriov(pf, vfs);
    const std::string pf_dir = Rel(pci_.DevicePath(card.pf));
    const std::string iface = card.dashed_interface ? Dashed(card.interface_id) : card.interface_id;
    if (card.legacy) {
      const std::string dev = pf_dir + "/fpga/intel-fpga-dev." + std::to_string(card.region);
      Link("sys/class/fpga/intel-fpga-dev." + std::to_string(card.region), dev);
      const std::string fme = "intel-fpga-fme." + std::to_string(card.fme);
      WriteFile(Abs(dev + "/" + fme + "/pr/interface_id"), iface + "\n");
      WriteFile(Abs(dev + "/" + fme + "/dev"), "241:" + std::to_string(card.fme) + "\n");
      MakeCharDevice(root_ + "/dev/" + fme, 241, static_cast<unsigned>(card.fme));
      for (const FpgaPortSpec& p : card.ports) AddPort(dev, "intel-fpga-port.", p, 242);
      for (const FpgaVfSpec& v : card.vfs) {
        const std::string vdev =
            Rel(pci_.DevicePath(v.address)) + "/fpga/intel-fpga-dev." + std::to_string(v.region);
        Link("sys/class/fpga/intel-fpga-dev." + std::to_string(v.region), vdev);
        AddPort(vdev, "intel-fpga-port.", v.port, 242);
      }
      return;
    }
    const std::string region = pf_dir + "/fpga_region/region" + std::to_string(card.region);
    Link("sys/class/fpga_region/region" + std::to_string(card.region), region);
    const std::string fme = "dfl-fme." + std::to_string(card.fme);
    const std::string fme_dir = region + "/" + fme;
    const std::string fme_region = fme_dir + "/dfl-fme-region." + std::to_string(card.fme) +
                                   "/fpga_region/region" + std::to_string(card.region + 1);
    WriteFile(Abs(fme_region + "/compat_id"), iface + "\n");
    Link("sys/class/fpga_region/region" + std::to_string(card.region + 1), fme_region);
    WriteFile(Abs(fme_dir + "/dev"), "243:" + std::to_string(card.fme) + "\n");
    WriteFile(Abs(fme_dir + "/uevent"), "DRIVER=dfl-fme\nMODALIAS=platform:dfl-fme\n");
    Link("sys/bus/platform/devices/" + fme, fme_dir);
    MakeCharDevice(root_ + "/dev/" + fme, 243, static_cast<unsigned>(card.fme));
    for (const FpgaPortSpec& p : card.ports) AddPort(region, "dfl-port.", p, 244);
    for (const FpgaVfSpec& v : card.vfs) {
      const std::string vregion =
          Rel(pci_.DevicePath(v.address)) + "/fpga_region/region" + std::to_string(v.region);
      Link("sys/class/fpga_region/region" + std::to_string(v.region), vregion);
      AddPort(vregion, "dfl-port.", v.port, 244);
    }
  }

  // The sysfs folder of a port ("dfl-port.0"), found the way the kernel
  // links it.
  std::string PortDir(const std::string& port) const {
    for (const char* cls : {"/sys/class/fpga_region", "/sys/class/fpga"}) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(root_ + cls, ec)) {
        const auto dir = std::filesystem::canonical(e.path(), ec) / port;
        if (std::filesystem::exists(dir)) return dir.string();
      }
    }
    return "";
  }
  void SetAfu(const std::string& port, const std::string& afu) {
    WriteFile(PortDir(port) + "/afu_id", afu + "\n");
  }
  std::string Afu(const std::string& port) const {
    std::string s = ReadFile(PortDir(port) + "/afu_id");
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void SetPortAttr(const std::string& port, const std::string& name, const std::string& value) {
    WriteFile(PortDir(port) + "/" + name, value + "\n");
  }
  void RemoveNode(const std::string& node) {
    std::error_code ec;
    std::filesystem::remove(root_ + "/dev/" + node, ec);
  }
  // Marks a node busy (exclusive opens fail with EBUSY) or a FME failing
  // (PR fails with EIO) for the module's fixture device operations.
  void SetBusy(const std::string& node, bool busy) { Flag(node + ".busy", busy); }
  void SetPrFails(const std::string& fme, bool fails) { Flag(fme + ".fail", fails); }

  // A GBS file at srv/intel.com/fpga/<interface>/<afu>.gbs whose bitstream
  // starts with "AFU:<afu>" (what the fixture's PR writes into afu_id).
  std::string AddGbs(const std::string& interface_id, const std::string& afu,
                     const std::string& clock = "0", const std::string& file_afu = "",
                     const std::string& meta_interface = "") {
    const std::string meta =
        "{\"version\": 640, \"platform-name\": \"PAC_A10\", \"afu-image\": {"
        "\"magic-no\": 488605312, \"interface-uuid\": \"" +
        Dashed(meta_interface.empty() ? interface_id : meta_interface) +
        "\", \"clock-frequency-high\": " + clock + ", \"clock-frequency-low\": " + clock +
        ", \"power\": 25, \"accelerator-clusters\": [{\"name\": \"nlb\", \"total-contexts\": 1, "
        "\"accelerator-type-uuid\": \"" +
        Dashed(afu) + "\"}]}}";
    std::string file;
    auto put = [&](uint64_t v, int n) {
      for (int i = 0; i < n; ++i) file += static_cast<char>((v >> (8 * i)) & 0xff);
    };
    put(0x414750466e6f6558ULL, 8);
    put(0x31303076534247b7ULL, 8);
    put(meta.size(), 4);
    file += meta;
    file += "AFU:" + afu;
    file += std::string(4096, '\x5a');  // the rest of a (tiny) bitstream
    const std::string path = root_ + "/srv/intel.com/fpga/" + interface_id + "/" +
                             (file_afu.empty() ? afu : file_afu) + ".gbs";
    WriteFile(path, file);
    return path;
  }

  // A stand-in for OPAE's fpgaconf: logs its arguments to fpgaconf.log, finds
  // the card by -B/-D/-F (and --segment) and writes the GBS file's name (its
  // AFU ID, in the bitstream folder's layout) into afu_id of the card's
  // port 0. `exit_code` != 0 makes it fail after printing an error.
  std::string AddFpgaconf(int exit_code = 0, int sleep_s = 0) {
    const std::string path = root_ + "/opt/opae/bin/fpgaconf";
    WriteFile(
        path,
        "#!/bin/sh\n"
        "echo \"$@\" >> '" +
            root_ + "/fpgaconf.log'\n" +
            (sleep_s ? "sleep " + std::to_string(sleep_s) + "\n" : std::string()) +
            (exit_code
                 ? "echo 'fpgaconf: error: PR failed' >&2\nexit " + std::to_string(exit_code) + "\n"
                 : std::string()) +
            "seg=0x0000\n"
            "while [ $# -gt 1 ]; do case \"$1\" in\n"
            "  -B) bus=$2; shift 2;; -D) dev=$2; shift 2;; -F) fn=$2; shift 2;;\n"
            "  --segment) seg=$2; shift 2;; *) shift;; esac; done\n"
            "gbs=$1\n"
            "addr=$(printf '%04x:%02x:%02x.%x' $seg $bus $dev $fn)\n"
            "afu=$(basename \"$gbs\" .gbs)\n"
            "for d in '" +
            root_ +
            "'/sys/bus/pci/devices/$addr/fpga_region/region*/dfl-port.* "
            "'" +
            root_ +
            "'/sys/bus/pci/devices/$addr/fpga/intel-fpga-dev.*/intel-fpga-port.*; do\n"
            "  [ -f \"$d/id\" ] && [ \"$(cat $d/id)\" = 0 ] && echo $afu > $d/afu_id && exit 0\n"
            "done\n"
            "echo 'fpgaconf: no such card' >&2; exit 1\n");
    chmod(path.c_str(), 0755);
    return path;
  }

  std::vector<std::string> OpsLog() const { return Lines(root_ + "/fpga-ops.log"); }
  std::vector<std::string> FpgaconfLog() const { return Lines(root_ + "/fpgaconf.log"); }

  static std::string Dashed(const std::string& id) {
    if (id.size() != 32) return id;
    return id.substr(0, 8) + "-" + id.substr(8, 4) + "-" + id.substr(12, 4) + "-" +
           id.substr(16, 4) + "-" + id.substr(20);
  }

 private:
  void AddPort(const std::string& region, const char* prefix, const FpgaPortSpec& p,
               unsigned major) {
    const std::string name = prefix + std::to_string(p.n);
    const std::string dir = region + "/" + name;
    WriteFile(Abs(dir + "/afu_id"), p.afu + "\n");
    WriteFile(Abs(dir + "/id"), std::to_string(p.id) + "\n");
    WriteFile(Abs(dir + "/power_state"), "0x0\n");
    WriteFile(Abs(dir + "/errors/errors"), "0x0\n");
    WriteFile(Abs(dir + "/dev"), std::to_string(major) + ":" + std::to_string(p.n) + "\n");
    WriteFile(Abs(dir + "/uevent"),
              std::string("DRIVER=") + (prefix[0] == 'd' ? "dfl-port" : "intel-fpga-port") + "\n");
    Link("sys/bus/platform/devices/" + name, dir);
    MakeCharDevice(root_ + "/dev/" + name, major, static_cast<unsigned>(p.n));
  }
  void Flag(const std::string& node, bool on) {
    std::error_code ec;
    if (on)
      WriteFile(root_ + "/dev/" + node, "");
    else
      std::filesystem::remove(root_ + "/dev/" + node, ec);
  }
  std::string Rel(const std::string& abs) const {
    return std::filesystem::path(abs).lexically_relative(root_).string();
  }
  std::string Abs(const std::string& rel) const { return root_ + "/" + rel; }
  // A relative symlink root/link -> root/target, as the kernel makes them.
  void Link(const std::string& link, const std::string& target) {
    const std::filesystem::path l = root_ + "/" + link;
    std::filesystem::create_directories(l.parent_path());
    std::error_code ec;
    std::filesystem::remove(l, ec);
    std::filesystem::create_directory_symlink(
        std::filesystem::path(root_ + "/" + target).lexically_relative(l.parent_path()), l);
  }
  static std::vector<std::string> Lines(const std::string& path) {
    std::vector<std::string> out;
    if (!FileExists(path)) return out;
    std::string s = ReadFile(path), line;
    for (char c : s) {
      if (c == '\n') {
        out.push_back(line);
        line.clear();
      } else {
        line += c;
      }
    }
    if (!line.empty()) out.push_back(line);
    return out;
  }

  std::string root_;
  SysfsFixture pci_;
};

}  // namespace devplug::testing
