// The kvm module, loaded through the ABI, on fixture trees under a temporary
// host_root and on the real /dev/kvm when this machine has one.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include "module_harness.h"
#include "test_util.h"

namespace devplug::modules {
namespace {

using devplug::testing::MakeCharDevice;
using devplug::testing::TempDir;
using devplug::testing::WriteFile;

constexpr unsigned kKvmMajor = 10, kKvmMinor = 232;  // misc device 10:232

StatusOr<std::unique_ptr<ModuleInstance>> Kvm(const std::string& host_root,
                                              const std::string& body = "") {
  return harness::Open("kvm", "devices.kubevirt.io/kvm", host_root, body);
}

using harness::Rescan;
constexpr auto AllocateSync = harness::Allocate;

TEST(KvmModuleTest, CharacterDeviceMeansAllSharesHealthy) {
  if (!devplug::testing::IsRoot()) GTEST_SKIP() << "mknod needs root";
  TempDir root;
  ASSERT_TRUE(MakeCharDevice(root / "dev/kvm", kKvmMajor, kKvmMinor));
  auto inst = Kvm(root.path());
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  DeviceListPtr list = (*inst)->devices();
  ASSERT_EQ(list->size(), 110u);  // the default shares
  for (const Device& d : *list) {
    EXPECT_TRUE(d.healthy) << d.id;
    EXPECT_EQ(d.numa_node, -1);
    EXPECT_EQ(d.share_of, "kvm");  // one device for DRA (ABI 1.10)
  }
  EXPECT_EQ(list->front().id, "kvm-0");
  // Sorted by ID as strings.
  EXPECT_EQ(list->back().id, "kvm-99");

  auto r = AllocateSync(**inst, {"kvm-7", "kvm-42"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->device_nodes.size(), 1u);
  // host_root never reaches the kubelet.
  EXPECT_EQ(r->device_nodes[0].host_path, "/dev/kvm");
  EXPECT_EQ(r->device_nodes[0].container_path, "/dev/kvm");
  EXPECT_EQ(r->device_nodes[0].permissions, "rw");
  EXPECT_TRUE(r->envs.empty());
  EXPECT_TRUE(r->mounts.empty());
}

TEST(KvmModuleTest, MissingOrWrongNodeMeansAllUnhealthyAndBack) {
  TempDir root;
  auto inst = Kvm(root.path(), "shares = 3\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  DeviceListPtr list = (*inst)->devices();
  ASSERT_EQ(list->size(), 3u);
  for (const Device& d : *list) {
    EXPECT_FALSE(d.healthy);
    EXPECT_EQ(d.health_reason, "/dev/kvm missing");
  }
  auto r = AllocateSync(**inst, {"kvm-0"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);

  // A regular file where the node should be is not a device.
  WriteFile(root / "dev/kvm", "");
  Rescan(**inst);
  for (const Device& d : *(*inst)->devices()) {
    EXPECT_FALSE(d.healthy);
    EXPECT_EQ(d.health_reason, "/dev/kvm is not a character device");
  }

  if (!devplug::testing::IsRoot()) GTEST_SKIP() << "mknod needs root for the recovery half";
  std::remove((root / "dev/kvm").c_str());
  ASSERT_TRUE(MakeCharDevice(root / "dev/kvm", kKvmMajor, kKvmMinor));
  Rescan(**inst);
  for (const Device& d : *(*inst)->devices()) EXPECT_TRUE(d.healthy) << d.id;
}

TEST(KvmModuleTest, CustomDevicePath) {
  if (!devplug::testing::IsRoot()) GTEST_SKIP() << "mknod needs root";
  TempDir root;
  ASSERT_TRUE(MakeCharDevice(root / "dev/kvm-alt", kKvmMajor, kKvmMinor));
  auto inst = Kvm(root.path(), "shares = 2\ndevice = \"/dev/kvm-alt\"\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  ASSERT_EQ((*inst)->devices()->size(), 2u);
  EXPECT_TRUE((*inst)->devices()->at(0).healthy);
  EXPECT_EQ((*inst)->devices()->at(0).share_of, "kvm-alt");
  auto r = AllocateSync(**inst, {"kvm-1"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->device_nodes[0].host_path, "/dev/kvm-alt");
}

TEST(KvmModuleTest, BadKeysNameFileLineAndKey) {
  TempDir root;
  struct Case {
    const char* body;
    const char* error;
  } cases[] = {
      {"shares = 0\n", "module.toml:4: resource[0].shares: must be between 1 and 100000"},
      {"\nshares = 100001\n", "module.toml:5: resource[0].shares: must be between 1 and 100000"},
      {"device = \"dev/kvm\"\n", "module.toml:4: resource[0].device: must be an absolute path"},
      {"shares = \"many\"\n", "module.toml:4: resource[0].shares: must be an integer"},
      {"share = 3\n", "module.toml:4: resource[0].share: unknown key for module \"kvm\""},
  };
  for (const Case& c : cases) {
    auto inst = Kvm(root.path(), c.body);
    ASSERT_FALSE(inst.ok()) << c.body;
    EXPECT_NE(inst.status().message().find(c.error), std::string::npos) << inst.status().message();
  }
}

TEST(KvmModuleTest, RealDevKvm) {
  struct stat st;
  if (stat("/dev/kvm", &st) != 0 || !S_ISCHR(st.st_mode))
    GTEST_SKIP() << "this machine has no /dev/kvm";
  auto inst = Kvm("/", "shares = 4\n");
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  ASSERT_EQ((*inst)->devices()->size(), 4u);
  for (const Device& d : *(*inst)->devices()) EXPECT_TRUE(d.healthy);
  auto r = AllocateSync(**inst, {"kvm-3"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->device_nodes[0].host_path, "/dev/kvm");
}

}  // namespace
}  // namespace devplug::modules
