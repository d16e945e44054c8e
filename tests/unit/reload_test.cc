// Reload::Make over a fake set of running resources: which resources a new
// configuration stages (added, changed, module file replaced, prestart
// timeout for the modules that take PreStart calls), which keep running
// untouched, and which keys refuse the whole reload.
#include "reload.h"

#include <gtest/gtest.h>

#include <map>

namespace devplug {
namespace {

using FileId = Reload::FileId;

config::LoadOptions Opts() {
  config::LoadOptions o;
  o.default_module_dir = "/usr/lib/devplug/modules";
  return o;
}

config::AgentConfig Load(const std::string& toml) {
  auto cfg = config::LoadString(toml, "devplug.toml", Opts());
  EXPECT_TRUE(cfg.ok()) << cfg.status().message();
  return cfg.ok() ? *cfg : config::AgentConfig{};
}

constexpr char kTwo[] = R"(
[agent]
plugin_dir = "/tmp/dp"

[[resource]]
name = "devices.kubevirt.io/kvm"
module = "kvm"
shares = 10

[[resource]]
name = "example.com/fpga"
module = "/opt/mods/fpga.so"
)";

// The module files on a fake disk, by path.
struct FakeDisk {
  std::map<std::string, FileId> files;
  std::optional<FileId> Identify(const std::string& path) const {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  }
  std::function<std::optional<FileId>(const std::string&)> identify() const {
    return [this](const std::string& p) { return Identify(p); };
  }
};

class ReloadPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    now_ = Load(kTwo);
    disk_.files["/usr/lib/devplug/modules/kvm.so"] = FileId{1, 10, 100, 4096};
    disk_.files["/opt/mods/fpga.so"] = FileId{1, 11, 100, 8192};
    for (const auto& r : now_.resources) {
      Reload::Current c{r, disk_.Identify(modules::ResolveModulePath(r.module, now_.module_dir)),
                        false};
      running_.push_back(c);
    }
  }
  StatusOr<Reload::Plan> Plan(const std::string& toml) {
    next_ = Load(toml);
    return Reload::Make(now_, next_, running_, disk_.identify());
  }

  config::AgentConfig now_, next_;
  std::vector<Reload::Current> running_;
  FakeDisk disk_;
};

TEST_F(ReloadPlanTest, TheSameFilesStageNothing) {
  auto plan = Plan(kTwo);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_TRUE(plan->stage.empty());
  EXPECT_TRUE(plan->replaced.empty());
}

TEST_F(ReloadPlanTest, WhereATableIsWrittenDoesNotMatter) {
  // The two tables swapped, comments and blank lines added.
  auto plan = Plan(R"(
# reordered
[agent]
plugin_dir = "/tmp/dp"

[[resource]]
name = "example.com/fpga"
module = "/opt/mods/fpga.so"


[[resource]]
name = "devices.kubevirt.io/kvm"
module = "kvm"
shares = 10
)");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_TRUE(plan->stage.empty());
}

// A cluster's ConfigMap moved to api = "node-label": on a node whose label
// keeps the device plugin API, the resource is what it was, and nothing is
// staged (the node's name, unset while no resource needed it, may be set
// without a restart).
TEST_F(ReloadPlanTest, ANodeLabelThatKeepsTheDevicePluginApiStagesNothing) {
  std::string labelled = kTwo;
  labelled.replace(labelled.find("shares = 10\n"), 12, "shares = 10\napi = \"node-label\"\n");
  auto plan = Plan(labelled);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_TRUE(next_.resources[0].api_from_node_label);
  EXPECT_FALSE(next_.node_name.empty());
  EXPECT_TRUE(plan->stage.empty());
}

TEST_F(ReloadPlanTest, AChangedModuleKeyStagesThatResourceOnly) {
  auto plan = Plan(R"(
[agent]
plugin_dir = "/tmp/dp"

[[resource]]
name = "devices.kubevirt.io/kvm"
module = "kvm"
shares = 20

[[resource]]
name = "example.com/fpga"
module = "/opt/mods/fpga.so"
)");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->stage, std::vector<size_t>{0});
  EXPECT_TRUE(plan->replaced.empty());
}

TEST_F(ReloadPlanTest, AddedResourcesAreStagedAndRemovedOnesAreNot) {
  auto plan = Plan(R"(
[agent]
plugin_dir = "/tmp/dp"

[[resource]]
name = "example.com/tun"
module = "generic"

[[resource]]
name = "example.com/fpga"
module = "/opt/mods/fpga.so"
)");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  // Position 0 (added); fpga (position 1) is unchanged; kvm is gone, which
  // the commit finds by name.
  EXPECT_EQ(plan->stage, std::vector<size_t>{0});
}

TEST_F(ReloadPlanTest, EveryServingKeyCountsAsAChange) {
  for (const char* extra : {"socket = \"other.sock\"", "required = true",
                            "registration = \"plugin-watcher\"", "cdi = \"both\""}) {
    SCOPED_TRACE(extra);
    auto plan = Plan(std::string(kTwo) + extra + "\n");
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    EXPECT_EQ(plan->stage, std::vector<size_t>{1});
  }
}

TEST_F(ReloadPlanTest, AModuleFileReplacedOnDiskStagesItsResource) {
  disk_.files["/opt/mods/fpga.so"].mtime_ns = 200;
  auto plan = Plan(kTwo);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->stage, std::vector<size_t>{1});
  EXPECT_EQ(plan->replaced, std::vector<std::string>{"example.com/fpga"});
  // Removed from disk: its next load fails, which the reload reports.
  disk_.files.erase("/opt/mods/fpga.so");
  plan = Plan(kTwo);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->stage, std::vector<size_t>{1});
}

TEST_F(ReloadPlanTest, AResourceWhoseModuleNeverLoadedIsLeftToItsRetries) {
  running_[1].module_file.reset();  // left out at start, retrying
  disk_.files["/opt/mods/fpga.so"].mtime_ns = 200;
  auto plan = Plan(kTwo);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_TRUE(plan->stage.empty());
}

TEST_F(ReloadPlanTest, PrestartTimeoutRecreatesOnlyModulesThatTakePreStart) {
  running_[1].takes_prestart = true;  // the fpga module programs in pre_start
  auto plan = Plan(R"(
[agent]
plugin_dir = "/tmp/dp"
prestart_timeout = "20s"

[[resource]]
name = "devices.kubevirt.io/kvm"
module = "kvm"
shares = 10

[[resource]]
name = "example.com/fpga"
module = "/opt/mods/fpga.so"
)");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->stage, std::vector<size_t>{1});
  EXPECT_TRUE(plan->replaced.empty()) << "its file is the same";
}

TEST_F(ReloadPlanTest, KeysOnlyARestartChangesRefuseTheWholeReload) {
  auto plan = Plan(R"(
[agent]
plugin_dir = "/tmp/other"
host_root = "/host"

[[resource]]
name = "devices.kubevirt.io/kvm"
module = "kvm"
shares = 20
)");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  // Each one, by file, line and key.
  EXPECT_EQ(plan.status().message(),
            "devplug.toml:3: agent.plugin_dir: changed from \"/tmp/dp\" to \"/tmp/other\": "
            "needs a restart\n"
            "devplug.toml:4: agent.host_root: changed from \"/\" to \"/host\": needs a restart");
}

TEST_F(ReloadPlanTest, ARestartKeyDroppedFromTheFilesIsNamedAtTheFile) {
  auto plan = Plan(R"(
[agent]

[[resource]]
name = "devices.kubevirt.io/kvm"
module = "kvm"
shares = 10
)");
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("agent.plugin_dir: changed from \"/tmp/dp\" to"),
            std::string::npos)
      << plan.status().message();
  EXPECT_EQ(plan.status().message().rfind("devplug.toml", 0), 0u) << plan.status().message();
}

}  // namespace
}  // namespace devplug
