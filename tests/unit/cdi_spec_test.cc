// devplugd's CDI specs: kinds, names, content against the rules the CDI
// library applies when a runtime loads a file (cdi::Validate states them),
// the spec folder, and what Allocate adds per mode.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>

#include <gtest/gtest.h>

#include "cdi/resource_cdi.h"
#include "cdi/spec.h"
#include "cdi/spec_dir.h"
#include "test_util.h"

namespace devplug::cdi {
namespace {

using nlohmann::json;
using testing::FileExists;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

Device Dev(const std::string& id, Recipe r) {
  Device d;
  d.id = id;
  d.healthy = true;
  d.recipe = std::move(r);
  return d;
}

Recipe Node(const std::string& host, const std::string& in, const std::string& perms = "rw") {
  Recipe r;
  r.device_nodes.push_back({host, in, perms});
  return r;
}

Kind K(const std::string& resource) { return *KindOf(resource); }

// A spec as the library would load it: one message per broken rule.
std::string Problems(const json& spec) { return StrJoin(Validate(spec), "\n"); }

json Minimal() {
  return json::parse(R"({"cdiVersion": "0.5.0", "kind": "devplug.example.com/x",
      "devices": [{"name": "a", "containerEdits": {"env": ["A=1"]}}]})");
}

TEST(CdiKindTest, VendorPerDomainAndClassFromTheName) {
  EXPECT_EQ(K("devices.kubevirt.io/tun").str(), "devplug.devices.kubevirt.io/tun");
  EXPECT_EQ(K("nvidia.com/mig-1g.10gb").str(), "devplug.nvidia.com/mig-1g_10gb");
  EXPECT_EQ(K("example.com/fpga_a").str(), "devplug.example.com/fpga_a");
  EXPECT_EQ(SpecFileName(K("devices.kubevirt.io/tun")),
            "devplug-devplug.devices.kubevirt.io-tun.json");
  EXPECT_EQ(QualifiedName(K("devices.kubevirt.io/tun"), "tun0"),
            "devplug.devices.kubevirt.io/tun=tun0");
  // A class must start with a letter.
  auto digit = KindOf("example.com/1gpu");
  ASSERT_FALSE(digit.ok());
  EXPECT_NE(std::string(digit.status().message()).find("must start with a letter"),
            std::string::npos);
  EXPECT_FALSE(KindOf("nodomain").ok());
}

TEST(CdiKindTest, NamesAsTheLibraryParsesThem) {
  for (const char* ok : {"tun0", "GPU-8c1e2a10-55f3-4b0e-9d9c-1f0c2a6e9b11", "0000:3b:00.0", "72",
                         "a", "mig-1g.10gb_3", "net_tun::0"})
    EXPECT_EQ(CheckDeviceName(ok), "") << ok;
  for (const char* bad : {"", "-a", "a-", "a/b", "a b", "a=b", "ä"})
    EXPECT_NE(CheckDeviceName(bad), "") << bad;
  EXPECT_EQ(CheckVendor("devplug.example.com"), "");
  EXPECT_NE(CheckVendor("1example.com"), "");
  EXPECT_EQ(CheckClass("gpu_a-b"), "");
  EXPECT_NE(CheckClass("gpu.a"), "");  // dots in a class need cdiVersion 0.6.0
}

TEST(CdiValidateTest, StatesTheLibrarysRules) {
  EXPECT_EQ(Problems(Minimal()), "");
  auto broken = [](auto edit) {
    json s = Minimal();
    edit(s);
    return Problems(s);
  };
  EXPECT_NE(broken([](json& s) { s["cdiVersion"] = "0.6.0"; }),
            "");  // podman 4.3 knows up to 0.5.0
  EXPECT_NE(broken([](json& s) { s["annotations"] = json::object(); }), "");  // unknown fields
  EXPECT_NE(broken([](json& s) { s["kind"] = "devplug.example.com/x.y"; }), "");
  EXPECT_NE(broken([](json& s) { s["devices"] = json::array(); }), "");
  EXPECT_NE(broken([](json& s) { s["devices"][0]["containerEdits"] = json::object(); }), "");
  EXPECT_NE(broken([](json& s) { s["devices"].push_back(s["devices"][0]); }), "");  // twice
  EXPECT_NE(broken([](json& s) { s["devices"][0]["containerEdits"]["env"] = {"=1"}; }), "");
  EXPECT_NE(broken([](json& s) { s["devices"][0]["containerEdits"]["env"] = {"A"}; }), "");
  EXPECT_NE(
      broken([](json& s) {
        s["devices"][0]["containerEdits"]["deviceNodes"] = {{{"path", "/dev/x"}, {"type", "char"}}};
      }),
      "");
  EXPECT_NE(broken([](json& s) {
              s["devices"][0]["containerEdits"]["deviceNodes"] = {
                  {{"path", "/dev/x"}, {"permissions", "rwx"}}};
            }),
            "");
  EXPECT_NE(broken([](json& s) {
              s["devices"][0]["containerEdits"]["deviceNodes"] = {{{"path", "dev/x"}}};
            }),
            "");
  EXPECT_NE(broken([](json& s) {
              s["devices"][0]["containerEdits"]["mounts"] = {
                  {{"hostPath", "/a"}, {"containerPath", "b"}}};
            }),
            "");
  EXPECT_NE(broken([](json& s) { s["devices"][0]["name"] = "a/b"; }), "");
}

TEST(CdiRenderTest, OneDevicePerIdWithItsEdits) {
  Recipe both = Node("/dev/vfio/12", "/dev/vfio/12");
  both.device_nodes.push_back({"/dev/vfio/vfio", "/dev/vfio/vfio", "rw"});
  both.mounts.push_back({"/opt/fw", "/lib/firmware/x", true});
  both.envs.emplace_back("PCI_RESOURCE_X", "0000:3b:00.0");
  both.annotations.emplace_back("k", "v");  // not carried in 0.5.0
  DeviceList list = {Dev("0000:3b:00.0", both), Dev("empty", {}),
                     Dev("a/b", Node("/dev/x", "/dev/x")),
                     Dev("tun0", Node("/dev/net/tun", "/dev/net/tun", "rwm"))};
  const auto lookup = [](const std::string& p) -> std::optional<NodeInfo> {
    if (p == "/dev/net/tun") return NodeInfo{'c', 10, 200};
    return std::nullopt;
  };
  const Rendered r = Render(K("example.com/nic"), list, lookup);
  EXPECT_EQ(r.devices, (std::vector<std::string>{"0000:3b:00.0", "tun0"}));
  ASSERT_EQ(r.skipped.size(), 2u);
  EXPECT_EQ(r.skipped[0].first, "empty");
  EXPECT_EQ(r.skipped[1].first, "a/b");
  const json spec = json::parse(r.json);
  EXPECT_EQ(Problems(spec), "");
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");
  EXPECT_EQ(spec["kind"], "devplug.example.com/nic");
  const json& nic = spec["devices"][0]["containerEdits"];
  EXPECT_EQ(nic["deviceNodes"].size(), 2u);
  EXPECT_EQ(nic["deviceNodes"][0]["hostPath"], "/dev/vfio/12");
  EXPECT_EQ(nic["deviceNodes"][0]["path"], "/dev/vfio/12");
  EXPECT_FALSE(nic["deviceNodes"][0].contains("type"));  // the runtime looks it up
  EXPECT_EQ(nic["mounts"][0],
            json::parse(R"({"hostPath": "/opt/fw", "containerPath": "/lib/firmware/x",
      "type": "bind", "options": ["rbind", "ro"]})"));
  EXPECT_EQ(nic["env"][0], "PCI_RESOURCE_X=0000:3b:00.0");
  const json& tun = spec["devices"][1]["containerEdits"]["deviceNodes"][0];
  EXPECT_EQ(tun["type"], "c");
  EXPECT_EQ(tun["major"], 10);
  EXPECT_EQ(tun["minor"], 200);
  EXPECT_EQ(tun["permissions"], "rwm");
  EXPECT_EQ(Render(K("example.com/nic"), {Dev("empty", {})}, lookup).json, "");
}

TEST(CdiAnnotationTest, OneKeyPerResourceWithinTheLibrarysLimit) {
  const std::string a = AnnotationKey("devices.kubevirt.io/tun");
  EXPECT_EQ(a.rfind("cdi.k8s.io/devplug_devices.kubevirt.io_tun_", 0), 0u) << a;
  const std::string long1 =
      AnnotationKey("a-very-long-domain-name.example.com/an-even-longer-resource-name-1");
  const std::string long2 =
      AnnotationKey("a-very-long-domain-name.example.com/an-even-longer-resource-name-2");
  EXPECT_NE(long1, long2);
  for (const std::string& k : {a, long1, long2}) {
    const std::string part = k.substr(std::string("cdi.k8s.io/").size());
    EXPECT_LE(part.size(), 63u) << k;
    EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(part.front())) &&
                std::isalnum(static_cast<unsigned char>(part.back())))
        << k;
    EXPECT_EQ(
        part.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"),
        std::string::npos)
        << k;
  }
}

TEST(CdiSpecDirTest, WritesWholeFilesReadableByAll) {
  TempDir tmp;
  const std::string dir = tmp / "cdi";
  ASSERT_TRUE(WriteSpecFile(dir, "devplug-a.json", "{}\n").ok());
  ASSERT_TRUE(WriteSpecFile(dir, "devplug-a.json", "{\"x\": 1}\n").ok());
  EXPECT_EQ(ReadFile(dir + "/devplug-a.json"), "{\"x\": 1}\n");
  struct stat st {};
  ASSERT_EQ(stat((dir + "/devplug-a.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  WriteFile(dir + "/vendor.yaml", "x");
  // A temporary file as young as a write in progress (another thread's) is
  // never listed, so a sweep cannot unlink it under its writer (review
  // D14); one left by an interrupted write, a minute old, is.
  WriteFile(dir + "/.devplug-inflight.tmp", "half");
  WriteFile(dir + "/.devplug-abc123.tmp", "half");
  const timespec old[2] = {{time(nullptr) - 61, 0}, {time(nullptr) - 61, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, (dir + "/.devplug-abc123.tmp").c_str(), old, 0), 0);
  EXPECT_EQ(OwnedFiles(dir), (std::vector<std::string>{".devplug-abc123.tmp", "devplug-a.json"}));
  RemoveStale("/", {dir}, {{dir, K("example.com/a")}});
  EXPECT_TRUE(FileExists(dir + "/.devplug-inflight.tmp"));
  EXPECT_FALSE(FileExists(dir + "/.devplug-abc123.tmp"));
  ASSERT_EQ(unlink((dir + "/.devplug-inflight.tmp").c_str()), 0);
  WriteFile(dir + "/" + SpecFileName(K("example.com/a")), "{}");
  RemoveStale("/", {dir}, {{dir, K("example.com/a")}});
  EXPECT_EQ(OwnedFiles(dir), (std::vector<std::string>{SpecFileName(K("example.com/a"))}));
  EXPECT_TRUE(FileExists(dir + "/vendor.yaml"));  // never another writer's
  RemoveStale("/", {dir}, {});
  EXPECT_TRUE(OwnedFiles(dir).empty());
  EXPECT_TRUE(RemoveSpecFile(dir, "devplug-a.json").ok());  // already gone
  EXPECT_FALSE(WriteSpecFile("/proc/no/such", "devplug-a.json", "{}").ok());
}

TEST(ResourceCdiTest, TheSpecFollowsTheListAndAllocateNamesOnlyWhatItHolds) {
  TempDir tmp;
  auto cdi = *ResourceCdi::Make(
      {.resource = "example.com/tun", .mode = CdiMode::kBoth, .dir = tmp / "cdi"});
  const std::string file = tmp / "cdi" + "/" + cdi->file_name();
  cdi->Publish({Dev("t0", Node("/dev/net/tun", "/dev/net/tun")),
                Dev("t1", Node("/dev/net/tun", "/dev/net/tun"))});
  json spec = json::parse(ReadFile(file));
  EXPECT_EQ(Problems(spec), "");
  EXPECT_EQ(spec["devices"].size(), 2u);
  EXPECT_EQ(cdi->named(), 2u);

  v1beta1::ContainerAllocateResponse resp;
  resp.add_devices()->set_host_path("/dev/net/tun");
  cdi->Answer({"t0", "t1"}, {}, true, &resp);
  ASSERT_EQ(resp.cdi_devices_size(), 2);
  EXPECT_EQ(resp.cdi_devices(0).name(), "devplug.example.com/tun=t0");
  EXPECT_EQ(resp.annotations().at(AnnotationKey("example.com/tun")),
            "devplug.example.com/tun=t0,devplug.example.com/tun=t1");
  EXPECT_EQ(resp.devices_size(), 1);  // beside the classic answer

  // A device gone: the spec no longer names it once the list is published.
  cdi->Publish({Dev("t1", Node("/dev/net/tun", "/dev/net/tun"))});
  spec = json::parse(ReadFile(file));
  ASSERT_EQ(spec["devices"].size(), 1u);
  EXPECT_EQ(spec["devices"][0]["name"], "t1");
  v1beta1::ContainerAllocateResponse late;
  cdi->Answer({"t0"}, {}, true, &late);
  EXPECT_EQ(late.cdi_devices_size(), 0);
  // No device left: no file (an empty device list is invalid).
  cdi->Publish({});
  EXPECT_FALSE(FileExists(file));
}

TEST(ResourceCdiTest, ModesAndCdiOnly) {
  TempDir tmp;
  auto answer = [&](CdiMode mode, bool only, bool default_recipe) {
    auto cdi = *ResourceCdi::Make(
        {.resource = "example.com/kvm", .mode = mode, .dir = tmp / "cdi", .only = only});
    cdi->Publish({Dev("k0", Node("/dev/kvm", "/dev/kvm"))});
    v1beta1::ContainerAllocateResponse resp;
    auto* d = resp.add_devices();
    d->set_host_path("/dev/kvm");
    d->set_container_path("/dev/kvm");
    (*resp.mutable_envs())["X"] = "1";
    cdi->Answer({"k0"}, Node("/dev/kvm", "/dev/kvm"), default_recipe, &resp);
    return resp;
  };
  auto cri = answer(CdiMode::kCri, false, true);
  EXPECT_EQ(cri.cdi_devices_size(), 1);
  EXPECT_TRUE(cri.annotations().empty());
  auto ann = answer(CdiMode::kAnnotations, false, true);
  EXPECT_EQ(ann.cdi_devices_size(), 0);
  EXPECT_EQ(ann.annotations().size(), 1u);
  auto only = answer(CdiMode::kCri, true, true);
  EXPECT_EQ(only.cdi_devices_size(), 1);
  EXPECT_EQ(only.devices_size(), 0);
  EXPECT_TRUE(only.envs().empty());
  // The module answered for itself: its answer gets a spec of its own.
  auto own = answer(CdiMode::kCri, true, false);
  ASSERT_EQ(own.cdi_devices_size(), 1);
  EXPECT_EQ(own.cdi_devices(0).name(), "devplug.example.com/kvm=" + AllocationName({"k0"}));
  EXPECT_EQ(own.devices_size(), 0);
}

TEST(CdiKindTest, AllocationFilesAreToldApartFromEveryKindsSpec) {
  const Kind k = K("example.com/tap");
  EXPECT_EQ(AllocationName({"b", "a"}), AllocationName({"a", "b", "a"}));
  EXPECT_NE(AllocationName({"ab"}), AllocationName({"a", "b"}));
  EXPECT_EQ(CheckDeviceName(AllocationName({"x"})), "");
  const std::string f = AllocationFileName(k, AllocationName({"x"}));
  EXPECT_EQ(f.rfind("devplug-devplug.example.com-tap@alloc-", 0), 0u) << f;
  EXPECT_TRUE(KindOwnsFile(k, f));
  EXPECT_TRUE(KindOwnsFile(k, SpecFileName(k)));
  EXPECT_TRUE(KindOwnsFile(k, AllocationIndexName(k)));
  // Another kind whose file name starts the same way.
  EXPECT_FALSE(KindOwnsFile(k, SpecFileName(K("example.com/tap2"))));
  EXPECT_FALSE(KindOwnsFile(K("example.com/ta"), f));
  EXPECT_FALSE(KindOwnsFile(k, "devplug-devplug.example.com-tap.json.tmp"));
}

// A module's own answer (macvtap's /dev/tap<N> from its allocate()): a spec
// per allocation, written before the answer, gone at release, replaced
// when an ID is handed out again, gone when a device leaves the list, and
// found again by a restarted devplugd.
TEST(ResourceCdiTest, AllocationSpecsLiveFromAllocateToRelease) {
  TempDir tmp;
  const std::string dir = tmp / "cdi";
  auto make = [&] {
    return *ResourceCdi::Make(
        {.resource = "example.com/tap", .mode = CdiMode::kBoth, .dir = dir, .only = true});
  };
  auto cdi = make();
  const std::vector<Device> list = {Dev("m0", {}), Dev("m1", {}), Dev("m2", {})};
  cdi->Publish(list);
  EXPECT_FALSE(FileExists(dir + "/" + cdi->file_name()));  // no default edits: no spec

  auto allocate = [&](ResourceCdi& c, std::vector<std::string> ids, const std::string& node) {
    Recipe r = Node(node, node);
    r.envs.emplace_back("TAPS", StrJoin(ids, ","));
    v1beta1::ContainerAllocateResponse resp;
    resp.add_devices()->set_host_path(node);
    c.Answer(ids, r, false, &resp);
    return resp;
  };
  auto a = allocate(*cdi, {"m0", "m1"}, "/dev/tap7");
  const std::string name01 = AllocationName({"m0", "m1"});
  const std::string file01 = dir + "/" + AllocationFileName(cdi->kind(), name01);
  ASSERT_EQ(a.cdi_devices_size(), 1);
  EXPECT_EQ(a.cdi_devices(0).name(), "devplug.example.com/tap=" + name01);
  EXPECT_EQ(a.annotations().at(AnnotationKey("example.com/tap")), a.cdi_devices(0).name());
  EXPECT_EQ(a.devices_size(), 0);  // cdi_only: the spec carries it all
  EXPECT_TRUE(a.envs().empty());
  json spec = json::parse(ReadFile(file01));
  EXPECT_EQ(Problems(spec), "");
  EXPECT_EQ(spec["devices"][0]["name"], name01);
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"], "/dev/tap7");
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["env"][0], "TAPS=m0,m1");
  struct stat st {};
  ASSERT_EQ(stat(file01.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);

  allocate(*cdi, {"m2"}, "/dev/tap9");
  EXPECT_EQ(cdi->allocations(), 2u);
  // m1 handed out again: its pod left, so the spec that named it goes.
  allocate(*cdi, {"m1"}, "/dev/tap8");
  EXPECT_FALSE(FileExists(file01));
  EXPECT_EQ(cdi->allocations(), 2u);

  // A restarted devplugd finds them through the index; a spec the index
  // lacks (a stop between the two writes) is removed.
  WriteFile(dir + "/" + AllocationFileName(cdi->kind(), AllocationName({"zz"})), "{}");
  cdi.reset();
  cdi = make();
  EXPECT_EQ(cdi->allocations(), 2u);
  EXPECT_FALSE(
      FileExists(dir + "/" + AllocationFileName(K("example.com/tap"), AllocationName({"zz"}))));

  // Released by a List sent before m2 was handed out: its spec stays (the
  // ID may be another pod's again); by a later List it goes, m1's stays.
  const auto before = std::chrono::steady_clock::now() - std::chrono::hours(1);
  allocate(*cdi, {"m2"}, "/dev/tap9");
  cdi->Released({"m2"}, before);
  EXPECT_TRUE(FileExists(dir + "/" + AllocationFileName(cdi->kind(), AllocationName({"m2"}))));
  cdi->Released({"m2"}, std::chrono::steady_clock::now());
  EXPECT_FALSE(FileExists(dir + "/" + AllocationFileName(cdi->kind(), AllocationName({"m2"}))));
  const std::string file1 = dir + "/" + AllocationFileName(cdi->kind(), AllocationName({"m1"}));
  EXPECT_TRUE(FileExists(file1));
  // m1 leaves the list: its spec goes, and the index with the last one.
  cdi->Publish({Dev("m0", {})});
  EXPECT_FALSE(FileExists(file1));
  EXPECT_EQ(cdi->allocations(), 0u);
  EXPECT_FALSE(FileExists(dir + "/" + AllocationIndexName(cdi->kind())));

  // Start-up cleaning keeps a configured kind's allocation specs.
  allocate(*cdi, {"m0"}, "/dev/tap5");
  RemoveStale("/", {dir}, {{dir, cdi->kind()}});
  EXPECT_EQ(OwnedFiles(dir).size(), 2u);  // the spec and the index
  RemoveStale("/", {dir}, {});
  EXPECT_TRUE(OwnedFiles(dir).empty());
}

TEST(ResourceCdiTest, AStagedResourceWritesNothingUntilActivated) {
  TempDir tmp;
  auto cdi = *ResourceCdi::Make(
      {.resource = "example.com/tun", .mode = CdiMode::kCri, .dir = tmp / "cdi", .active = false});
  const std::string file = tmp / "cdi" + "/" + cdi->file_name();
  cdi->Publish({Dev("t0", Node("/dev/net/tun", "/dev/net/tun"))});
  EXPECT_FALSE(FileExists(file));
  v1beta1::ContainerAllocateResponse resp;
  cdi->Answer({"t0"}, {}, true, &resp);
  EXPECT_EQ(resp.cdi_devices_size(), 0);
  cdi->Activate();
  EXPECT_TRUE(FileExists(file));
  EXPECT_EQ(cdi->named(), 1u);
}

TEST(ResourceCdiTest, AFailedWriteHandsOutNoNames) {
  auto cdi = *ResourceCdi::Make(
      {.resource = "example.com/tun", .mode = CdiMode::kCri, .dir = "/proc/no/such"});
  cdi->Publish({Dev("t0", Node("/dev/net/tun", "/dev/net/tun"))});
  EXPECT_NE(cdi->problem(), "");
  v1beta1::ContainerAllocateResponse resp;
  cdi->Answer({"t0"}, {}, true, &resp);
  EXPECT_EQ(resp.cdi_devices_size(), 0);
}

TEST(ResourceCdiTest, NodesAreLookedUpUnderHostRoot) {
  TempDir tmp;
  // A symlink whose absolute target is a host path, as under /dev/serial/by-id.
  ASSERT_EQ(mkdir((tmp / "dev").c_str(), 0755), 0);
  ASSERT_EQ(symlink("/dev/null", (tmp / "dev/link").c_str()), 0);
  if (!testing::MakeCharDevice(tmp / "dev/null", 1, 3)) GTEST_SKIP() << "needs CAP_MKNOD";
  auto info = LookUpNode(tmp.path(), "/dev/link");
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->type, 'c');
  EXPECT_EQ(info->major, 1u);
  EXPECT_EQ(info->minor, 3u);
  EXPECT_FALSE(LookUpNode(tmp.path(), "/dev/none").has_value());
}

}  // namespace
}  // namespace devplug::cdi
