// The loader and module instances against real .so files built from
// tests/support/fake_module.c and modules/.
#include <future>

#include <gtest/gtest.h>

#include "fake_hooks.h"
#include "modules/loaded_module.h"
#include "modules/module_instance.h"
#include "test_util.h"

namespace devplug::modules {
namespace {

using devplug::testing::FakeModuleDir;
using devplug::testing::ModuleDir;

std::string Fake(const std::string& name) { return FakeModuleDir() + "/" + name + ".so"; }

config::ResourceConfig Resource(const std::string& toml_body) {
  auto cfg = config::LoadString(
      "[[resource]]\nname = \"fake.example/dev\"\nmodule = \"fake\"\n" + toml_body, "test.toml",
      {});
  EXPECT_TRUE(cfg.ok()) << cfg.status().message();
  return cfg->resources.at(0);
}

struct RefusalCase {
  const char* file;
  const char* reason;
};

TEST(LoaderTest, RefusesBrokenModulesNamingFileAndReason) {
  const RefusalCase cases[] = {
      {"/nonexistent/kvm.so", "cannot load"},
      {"fake_noentry", "no devplug_module_entry_v1 symbol"},
      {"fake_major2", "built for ABI major 2, this agent speaks 1"},
      {"fake_short", "bytes; at least"},
      {"fake_unresolved", "undefined symbol: devplug_no_such_function"},
  };
  for (const RefusalCase& c : cases) {
    const std::string path = c.file[0] == '/' ? c.file : Fake(c.file);
    auto m = LoadedModule::Load(path);
    ASSERT_FALSE(m.ok()) << path;
    EXPECT_NE(m.status().message().find("module " + path + ": "), std::string::npos)
        << m.status().message();
    EXPECT_NE(m.status().message().find(c.reason), std::string::npos) << m.status().message();
  }
}

TEST(LoaderTest, NotAnElfFileIsRefused) {
  devplug::testing::TempDir dir;
  devplug::testing::WriteFile(dir / "text.so", "this is not an ELF object\n");
  auto m = LoadedModule::Load(dir / "text.so");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("cannot load"), std::string::npos) << m.status().message();
}

TEST(LoaderTest, OptionalHooksAreDetected) {
  auto full = LoadedModule::Load(Fake("fake_full"));
  ASSERT_TRUE(full.ok()) << full.status().message();
  EXPECT_TRUE((*full)->has_allocate());
  EXPECT_TRUE((*full)->has_preferred_allocation());
  EXPECT_TRUE((*full)->has_pre_start());
  auto minimal = LoadedModule::Load(Fake("fake_minimal"));
  ASSERT_TRUE(minimal.ok());
  EXPECT_FALSE((*minimal)->has_allocate());
  EXPECT_FALSE((*minimal)->has_preferred_allocation());
  EXPECT_FALSE((*minimal)->has_pre_start());
  auto kvm = LoadedModule::Load(ModuleDir() + "/kvm.so");
  ASSERT_TRUE(kvm.ok()) << kvm.status().message();
  EXPECT_EQ((*kvm)->name(), "kvm");
}

TEST(LoaderTest, ModuleKeysAreCheckedAgainstTheDeclaredSchema) {
  auto m = LoadedModule::Load(Fake("fake_full"));
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE((*m)->CheckKeys(Resource("count = 3\nunhealthy = [\"fake-1\"]\n"), 0).ok());
  auto st = (*m)->CheckKeys(Resource("count = \"3\"\ncolour = \"red\"\nunhealthy = [1, 2]\n"), 0);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("test.toml:4: resource[0].count: must be an integer"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("test.toml:5: resource[0].colour: unknown key for module \"fake\""),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("test.toml:6: resource[0].unhealthy: must be an array of strings"),
            std::string::npos)
      << st.message();
}

TEST(ModuleInstanceTest, CreateFailureCarriesTheModulesReason) {
  auto m = LoadedModule::Load(Fake("fake_createfail"));
  ASSERT_TRUE(m.ok());
  auto inst = ModuleInstance::Create(*m, Resource(""), {});
  ASSERT_FALSE(inst.ok());
  EXPECT_NE(inst.status().message().find("create failed: the fake hardware is on fire"),
            std::string::npos)
      << inst.status().message();
}

TEST(ModuleInstanceTest, ConfigErrorFromModuleNamesFileLineAndKey) {
  auto m = LoadedModule::Load(Fake("fake_full"));
  ASSERT_TRUE(m.ok());
  auto inst = ModuleInstance::Create(*m, Resource("\ncount = -5\n"), {});
  ASSERT_FALSE(inst.ok());
  EXPECT_EQ(inst.status().message(),
            "test.toml:5: resource[0].count: must be between 0 and 1000000");
}

TEST(ModuleInstanceTest, InvalidIdsAreDroppedAndTheRestKept) {
  auto m = LoadedModule::Load(Fake("fake_full"));
  ASSERT_TRUE(m.ok());
  auto inst = ModuleInstance::Create(*m, Resource("count = 2\nbad_ids = true\n"), {});
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  DeviceListPtr list = (*inst)->devices();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].id, "caf\xc3\xa9");
  EXPECT_EQ((*list)[1].id, "fake-0");
  EXPECT_EQ((*list)[2].id, "fake-1");
}

TEST(ModuleInstanceTest, AllocateChecksIdsThenUsesTheHook) {
  auto m = LoadedModule::Load(Fake("fake_full"));
  ASSERT_TRUE(m.ok());
  auto inst = ModuleInstance::Create(
      *m,
      Resource(
          "count = 3\nunhealthy = [\"fake-2\"]\nenv_prefix = \"X\"\ndefault_for = \"fake-1\"\n"),
      {});
  ASSERT_TRUE(inst.ok()) << inst.status().message();
  auto run = [&](std::vector<std::string> ids) {
    std::promise<StatusOr<Recipe>> p;
    (*inst)->Allocate(std::move(ids), [&](StatusOr<Recipe> r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  };
  auto unknown = run({"fake-0", "nope"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("unknown device ID \"nope\""), std::string::npos);
  auto unhealthy = run({"fake-2"});
  ASSERT_FALSE(unhealthy.ok());
  EXPECT_NE(unhealthy.status().message().find("device \"fake-2\" is unhealthy"), std::string::npos);

  auto hook = run({"fake-0", "fake-1", "fake-0"});
  ASSERT_TRUE(hook.ok()) << hook.status().message();
  ASSERT_EQ(hook->envs.size(), 1u);
  EXPECT_EQ(hook->envs[0].first, "X_DEVICES");
  EXPECT_EQ(hook->envs[0].second, "fake-0,fake-1");  // duplicates in the request removed
  ASSERT_EQ(hook->mounts.size(), 1u);
  EXPECT_TRUE(hook->mounts[0].read_only);
  EXPECT_TRUE(hook->device_nodes.empty());

  auto deferred = run({"fake-1"});  // the hook asks for the default recipe
  ASSERT_TRUE(deferred.ok());
  ASSERT_EQ(deferred->device_nodes.size(), 1u);
  EXPECT_EQ(deferred->device_nodes[0].host_path, "/dev/fake1");
  EXPECT_EQ(deferred->device_nodes[0].permissions, "rw");
}

TEST(ModuleInstanceTest, RescanRequestsAreCoalesced) {
  auto m = LoadedModule::Load(Fake("fake_minimal"));
  ASSERT_TRUE(m.ok());
  int changes = 0;
  ModuleInstance::Options o;
  o.lists = devplug::testing::ListsTo([&](DeviceListPtr) { ++changes; });
  auto inst = ModuleInstance::Create(*m, Resource("count = 1\n"), std::move(o));
  ASSERT_TRUE(inst.ok());
  EXPECT_EQ(changes, 1);  // the initial list
  EXPECT_EQ((*inst)->scans(), 1u);
  // Hold the worker (completion callbacks run on it), request a storm of
  // rescans, release: exactly one rescan runs.
  std::promise<void> gate;
  std::shared_future<void> gate_f = gate.get_future().share();
  (*inst)->PreStart({}, [gate_f](Status) { gate_f.wait(); });
  for (int i = 0; i < 1000; ++i) (*inst)->RequestRescan();
  gate.set_value();
  std::promise<void> drained;
  (*inst)->PreStart({}, [&](Status) { drained.set_value(); });
  drained.get_future().get();
  EXPECT_EQ((*inst)->scans(), 2u);
  EXPECT_EQ(changes, 1);  // an identical list publishes nothing
}

}  // namespace
}  // namespace devplug::modules
