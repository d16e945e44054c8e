// The fpga-opae module's own layers, below the ABI: the GBS reader, port
// discovery on DFL and intel-fpga fixture trees, and the PR request the
// ioctl path builds (behind the DeviceOps seam: no DFL driver exists here).
#include <fcntl.h>
#include <linux/fpga-dfl.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "dfl.h"
#include "fpga_fixture.h"
#include "gbs.h"
#include "test_util.h"

namespace devplug::fpga {
namespace {

using devplug::testing::FpgaCardSpec;
using devplug::testing::FpgaFixture;
using devplug::testing::FpgaPortSpec;
using devplug::testing::FpgaVfSpec;
using devplug::testing::kInterface;
using devplug::testing::kNlb0;
using devplug::testing::kNlb3;

std::string Header(uint32_t meta_len, uint64_t g1 = kGbsGuid1, uint64_t g2 = kGbsGuid2) {
  std::string h;
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) h += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  put(g1, 8);
  put(g2, 8);
  put(meta_len, 4);
  return h;
}
std::string Gbs(const std::string& meta, const std::string& bits = "BITS") {
  return Header(static_cast<uint32_t>(meta.size())) + meta + bits;
}
std::string Meta(const std::string& clock = "0", const std::string& afu = kNlb3) {
  return R"({"afu-image": {"interface-uuid": "CE489693-98F0-5F33-946D-560708BE108A",
    "clock-frequency-high": )" +
         clock + R"(, "clock-frequency-low": 0,
    "accelerator-clusters": [{"name": "nlb3", "accelerator-type-uuid": ")" +
         afu + R"("}]}})";
}
std::string Error(const std::variant<GbsInfo, std::string>& r) {
  const auto* e = std::get_if<std::string>(&r);
  return e ? *e : "";
}

TEST(FpgaGbsTest, ParsesHeaderMetadataAndBitstreamPlace) {
  const std::string file = Gbs(Meta(), "0123456789");
  auto r = ParseGbs(file, file.size());
  ASSERT_EQ(Error(r), "");
  const GbsInfo& g = std::get<GbsInfo>(r);
  EXPECT_EQ(g.interface_id, kInterface);  // dashes and case gone
  EXPECT_EQ(g.afu_ids, std::vector<std::string>{kNlb3});
  EXPECT_TRUE(g.HasAfu(kNlb3));
  EXPECT_FALSE(g.user_clock);
  EXPECT_EQ(g.bitstream_offset, 20 + Meta().size());
  EXPECT_EQ(g.bitstream_size, 10u);
  EXPECT_EQ(file.substr(g.bitstream_offset), "0123456789");
}

TEST(FpgaGbsTest, UserClocksAreNumbersAboveZeroOrAuto) {
  for (const auto& [clock, wanted] :
       std::vector<std::pair<std::string, bool>>{{"0", false},
                                                 {"312.5", true},
                                                 {"\"auto\"", true},
                                                 {"\"auto-312\"", true},
                                                 {"null", false},
                                                 {"\"\"", false}}) {
    const std::string file = Gbs(Meta(clock));
    auto r = ParseGbs(file, file.size());
    ASSERT_EQ(Error(r), "") << clock;
    EXPECT_EQ(std::get<GbsInfo>(r).user_clock, wanted) << clock;
  }
  const std::string neg = Gbs(Meta("-5"));
  EXPECT_NE(Error(ParseGbs(neg, neg.size())).find("negative"), std::string::npos);
}

TEST(FpgaGbsTest, MetadataPaddedWithNulBytesParses) {
  const std::string meta = Meta() + std::string(12, '\0');
  const std::string file = Gbs(meta);
  EXPECT_EQ(Error(ParseGbs(file, file.size())), "");
}

TEST(FpgaGbsTest, EveryRefusalSaysWhy) {
  const std::string ok = Meta();
  struct Case {
    std::string file, why;
  };
  const std::vector<Case> cases{
      {"short", "shorter than its 20-byte header"},
      {Header(0, 1) + ok, "header GUIDs are wrong"},
      {Header(0, kGbsGuid1, 7) + ok, "header GUIDs are wrong"},
      {Header(2u << 20) + ok, "implausible"},
      {Header(static_cast<uint32_t>(ok.size() + 50)) + ok, "truncated"},
      {Gbs("{not json"), "not valid JSON"},
      {Gbs("[1,2]"), "not a JSON object"},
      {Gbs("{}"), "no \"afu-image\""},
      {Gbs(R"({"afu-image": {}})"), "interface-uuid"},
      {Gbs(R"({"afu-image": {"interface-uuid": "xyz"}})"), "is not a UUID"},
      {Gbs(R"({"afu-image": {"interface-uuid": ")" + std::string(kInterface) + R"("}})"),
       "accelerator-clusters"},
      {Gbs(R"({"afu-image": {"interface-uuid": ")" + std::string(kInterface) +
           R"(", "accelerator-clusters": [{}]}})"),
       "no accelerator-type-uuid"},
      {Gbs(Meta("0", "not-a-uuid")), "\"not-a-uuid\" is not a UUID"},
      {Gbs(Meta("[1]")), "neither a number nor a string"},
  };
  for (const Case& c : cases) {
    const std::string why = Error(ParseGbs(c.file, c.file.size()));
    EXPECT_NE(why.find(c.why), std::string::npos) << "got \"" << why << "\", wanted " << c.why;
  }
}

TEST(FpgaGbsTest, CanonicalIds) {
  EXPECT_EQ(CanonicalId("D8424DC4-A4A3-C413-F89E-433683F9040B"), kNlb0);
  EXPECT_EQ(CanonicalId(kNlb0), kNlb0);
  EXPECT_EQ(CanonicalId(std::string(kNlb0) + "0"), std::nullopt);
  EXPECT_EQ(CanonicalId(std::string(kNlb0).substr(1)), std::nullopt);
  EXPECT_EQ(CanonicalId("g8424dc4a4a3c413f89e433683f9040b"), std::nullopt);
  EXPECT_EQ(CanonicalId(""), std::nullopt);
}

TEST(FpgaGbsTest, ReadGbsNamesTheFile) {
  devplug::testing::TempDir dir;
  const std::string path = dir.path() + "/x.gbs";
  EXPECT_NE(Error(ReadGbs(path)).find(path + ": No such file"), std::string::npos);
  devplug::testing::WriteFile(path, Gbs(Meta(), std::string(100000, 'b')));
  auto r = ReadGbs(path);
  ASSERT_EQ(Error(r), "");
  EXPECT_EQ(std::get<GbsInfo>(r).bitstream_size, 100000u);
  devplug::testing::WriteFile(path, "garbage that is long enough to be a header");
  EXPECT_NE(Error(ReadGbs(path)).find(path + ": not a GBS file"), std::string::npos);
  EXPECT_NE(Error(ReadGbs(dir.path())).find("not a regular file"), std::string::npos);
}

TEST(FpgaGbsTest, NaturalOrder) {
  EXPECT_TRUE(NaturalLess("dfl-port.2", "dfl-port.10"));
  EXPECT_FALSE(NaturalLess("dfl-port.10", "dfl-port.2"));
  EXPECT_TRUE(NaturalLess("dfl-port.02", "dfl-port.3"));
  EXPECT_FALSE(NaturalLess("dfl-port.1", "dfl-port.1"));
  EXPECT_TRUE(NaturalLess("dfl-port.1", "intel-fpga-port.0"));
}

class FpgaDiscoveryTest : public ::testing::Test {
 protected:
  devplug::testing::TempDir dir_;
  FpgaFixture fx_{dir_.path()};
};

// One card with two ports on its PF and a VF whose port finds the FME
// through physfn; the FME's own region (region1) holds no ports.
TEST_F(FpgaDiscoveryTest, DflPortsWithTheirCardAndFme) {
  FpgaCardSpec card;
  card.numa_node = 1;
  card.dashed_interface = true;
  card.ports = {FpgaPortSpec{0, 0, kNlb0}, FpgaPortSpec{10, 2, kNlb3}};
  card.vfs = {FpgaVfSpec{"0000:5e:00.1", 5, FpgaPortSpec{2, 1, kNlb0}}};
  fx_.AddCard(card);
  common::HostRoot root(dir_.path());
  EXPECT_EQ(DetectDriver(root), Driver::kDfl);
  std::vector<Port> ports = DiscoverPorts(root, Driver::kDfl);
  ASSERT_EQ(ports.size(), 3u);
  EXPECT_EQ(ports[0].name, "dfl-port.0");
  EXPECT_EQ(ports[1].name, "dfl-port.2");
  EXPECT_EQ(ports[2].name, "dfl-port.10");
  for (const Port& p : ports) {
    EXPECT_EQ(p.fme, "dfl-fme.0") << p.name;
    EXPECT_EQ(p.fme_node, "/dev/dfl-fme.0");
    EXPECT_EQ(p.pf, "0000:5e:00.0");
    EXPECT_EQ(p.numa_node, 1);
    EXPECT_EQ(p.node, "/dev/" + p.name);
    auto iface = ReadInterfaceId(p);
    ASSERT_TRUE(iface) << iface.error().ToString();
    EXPECT_EQ(*iface, kInterface);
  }
  EXPECT_EQ(ports[0].function, "0000:5e:00.0");
  EXPECT_EQ(ports[1].function, "0000:5e:00.1");  // the VF carries it
  EXPECT_EQ(ports[1].sys_dir.find(dir_.path()), 0u);
  EXPECT_TRUE(DiscoverPorts(root, Driver::kIntelFpga).empty());
}

TEST_F(FpgaDiscoveryTest, IntelFpgaDriverLayout) {
  FpgaCardSpec card;
  card.legacy = true;
  card.ports = {FpgaPortSpec{0, 0, kNlb0}};
  fx_.AddCard(card);
  common::HostRoot root(dir_.path());
  EXPECT_EQ(DetectDriver(root), Driver::kIntelFpga);
  std::vector<Port> ports = DiscoverPorts(root, Driver::kIntelFpga);
  ASSERT_EQ(ports.size(), 1u);
  EXPECT_EQ(ports[0].name, "intel-fpga-port.0");
  EXPECT_EQ(ports[0].node, "/dev/intel-fpga-port.0");
  EXPECT_EQ(ports[0].fme_node, "/dev/intel-fpga-fme.0");
  EXPECT_EQ(ports[0].function, "0000:5e:00.0");
  EXPECT_EQ(ReadInterfaceId(ports[0]).value_or(""), kInterface);
}

TEST_F(FpgaDiscoveryTest, NoFpgaClassIsNoPorts) {
  common::HostRoot root(dir_.path());
  EXPECT_TRUE(DiscoverPorts(root, Driver::kDfl).empty());
  EXPECT_EQ(DetectDriver(root), Driver::kDfl);
}

// ---- the ioctl path, up to the request it builds ----------------------------------------

struct Captured {
  std::string opened;
  int open_flags = 0;
  unsigned long request = 0;
  std::vector<uint8_t> arg;  // the struct as passed
  std::string buffer;        // what buffer_address pointed at
  int result = 0;
  int open_result = 7;
  bool closed = false;
};
Captured* g_cap = nullptr;

const DeviceOps kCapture{
    [](const std::string& path, int flags) {
      g_cap->opened = path;
      g_cap->open_flags = flags;
      return g_cap->open_result;
    },
    [](int fd, const std::string&, unsigned long request, void* arg) {
      EXPECT_EQ(fd, 7);
      g_cap->request = request;
      const size_t n = *static_cast<uint32_t*>(arg);  // argsz
      const auto* bytes = static_cast<const uint8_t*>(arg);
      g_cap->arg.assign(bytes, bytes + n);
      const auto* req = static_cast<const PrRequest*>(arg);
      g_cap->buffer.assign(reinterpret_cast<const char*>(req->buffer_address), req->buffer_size);
      return g_cap->result;
    },
    [](int fd) {
      EXPECT_EQ(fd, 7);
      g_cap->closed = true;
    },
};

TEST(FpgaIoctlTest, DflRequestCarriesPortAndBitstream) {
  Captured cap;
  g_cap = &cap;
  const std::string bits = "AFU:" + std::string(kNlb3) + std::string(1000, 'z');
  EXPECT_EQ(ProgramByIoctl(kCapture, Driver::kDfl, "/h/dev/dfl-fme.0", 2, bits), "");
  EXPECT_EQ(cap.opened, "/h/dev/dfl-fme.0");
  EXPECT_EQ(cap.open_flags & O_ACCMODE, O_RDWR);
  EXPECT_EQ(cap.request, static_cast<unsigned long>(DFL_FPGA_FME_PORT_PR));
  EXPECT_EQ(cap.request, 0xb680u);  // _IO(0xB6, 0x80)
  ASSERT_EQ(cap.arg.size(), sizeof(dfl_fpga_fme_port_pr));
  dfl_fpga_fme_port_pr req;
  std::memcpy(&req, cap.arg.data(), sizeof req);
  EXPECT_EQ(req.argsz, 24u);
  EXPECT_EQ(req.flags, 0u);
  EXPECT_EQ(req.port_id, 2u);
  EXPECT_EQ(req.buffer_size, bits.size());
  EXPECT_EQ(cap.buffer, bits);
  EXPECT_TRUE(cap.closed);
}

TEST(FpgaIoctlTest, IntelFpgaRequestHasItsStatusField) {
  Captured cap;
  g_cap = &cap;
  EXPECT_EQ(ProgramByIoctl(kCapture, Driver::kIntelFpga, "/dev/intel-fpga-fme.0", 0, "xyz"), "");
  EXPECT_EQ(cap.request, 0xb680u);
  EXPECT_EQ(cap.arg.size(), 32u);
  EXPECT_EQ(cap.buffer, "xyz");
  EXPECT_EQ(ResetIoctl(Driver::kDfl), static_cast<unsigned long>(DFL_FPGA_PORT_RESET));
  EXPECT_EQ(ResetIoctl(Driver::kIntelFpga), 0xb640u);
}

TEST(FpgaIoctlTest, FailuresSayWhere) {
  Captured cap;
  g_cap = &cap;
  cap.result = -EIO;
  std::string why = ProgramByIoctl(kCapture, Driver::kDfl, "/dev/dfl-fme.3", 1, "b");
  EXPECT_NE(why.find("port 1 through /dev/dfl-fme.3 failed: Input/output error"), std::string::npos)
      << why;
  EXPECT_NE(why.find("PR error"), std::string::npos);
  EXPECT_TRUE(cap.closed);
  cap = {};
  cap.open_result = -ENOENT;
  why = ProgramByIoctl(kCapture, Driver::kDfl, "/dev/dfl-fme.3", 1, "b");
  EXPECT_EQ(why, "/dev/dfl-fme.3: No such file or directory");
  EXPECT_EQ(ProgramByIoctl(kCapture, Driver::kDfl, "/dev/dfl-fme.3", 1, ""),
            "the bitstream is empty");
}

TEST(FpgaIoctlTest, InUseProbeOpensExclusively) {
  Captured cap;
  g_cap = &cap;
  cap.open_result = -EBUSY;
  EXPECT_EQ(ProbeExclusive(kCapture, "/dev/dfl-port.0"), -EBUSY);
  EXPECT_TRUE(cap.open_flags & O_EXCL);
  EXPECT_EQ(cap.open_flags & O_ACCMODE, O_RDWR);
}

}  // namespace
}  // namespace devplug::fpga
