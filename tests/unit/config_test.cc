#include "config/config.h"
#include "model/kubelet_names.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace devplug::config {
namespace {

using devplug::testing::TempDir;
using devplug::testing::WriteFile;
using kubelet::CheckResourceName;
using kubelet::CheckSocketName;
using kubelet::DefaultSocketName;

LoadOptions Opts() {
  LoadOptions o;
  o.default_module_dir = "/usr/lib/devplug/modules";
  return o;
}

TEST(ConfigTest, FullFileParsesIntoTypedStructs) {
  auto cfg = LoadString(R"(
[agent]
plugin_dir = "/tmp/dp/"
module_dir = "/opt/devplug/modules"
host_root = "/host"
log_level = "debug"
resync_interval = "1m30s"
udev_source = "kernel"

[[resource]]
name = "devices.kubevirt.io/kvm"
module = "kvm"
shares = 10

[[resource]]
name = "example.com/fpga"
module = "/opt/mods/fake.so"
socket = "fpga.sock"
required = true
vendors = ["0x8086", "10ee"]
enabled = true
)",
                        "devplug.toml", Opts());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->plugin_dir, "/tmp/dp");
  EXPECT_EQ(cfg->module_dir, "/opt/devplug/modules");
  EXPECT_EQ(cfg->host_root, "/host");
  EXPECT_EQ(cfg->log_level, LogLevel::kDebug);
  EXPECT_EQ(cfg->resync_interval, std::chrono::seconds(90));
  EXPECT_EQ(cfg->udev_source, UdevSource::kKernel);
  ASSERT_EQ(cfg->resources.size(), 2u);
  const ResourceConfig& kvm = cfg->resources[0];
  EXPECT_EQ(kvm.name, "devices.kubevirt.io/kvm");
  EXPECT_EQ(kvm.socket, "devplug-devices.kubevirt.io_kvm.sock");
  EXPECT_FALSE(kvm.required);
  EXPECT_EQ(kvm.where.line, 10);
  ASSERT_TRUE(kvm.module_keys.contains("shares"));
  EXPECT_EQ(std::get<int64_t>(kvm.module_keys.at("shares").value), 10);
  EXPECT_EQ(kvm.module_keys.at("shares").where.line, 13);
  const ResourceConfig& fpga = cfg->resources[1];
  EXPECT_EQ(fpga.socket, "fpga.sock");
  EXPECT_TRUE(fpga.required);
  EXPECT_EQ(std::get<std::vector<std::string>>(fpga.module_keys.at("vendors").value),
            (std::vector<std::string>{"0x8086", "10ee"}));
  EXPECT_TRUE(std::get<bool>(fpga.module_keys.at("enabled").value));
}

constexpr char kOneResource[] = "[[resource]]\nname = \"a.example/b\"\nmodule = \"kvm\"\n";

TEST(ConfigTest, DefaultsApplyWhenAgentTableIsAbsent) {
  auto cfg = LoadString(kOneResource, "defaults.toml", Opts());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->plugin_dir, "/var/lib/kubelet/device-plugins");
  EXPECT_EQ(cfg->module_dir, "/usr/lib/devplug/modules");
  EXPECT_EQ(cfg->host_root, "/");
  EXPECT_EQ(cfg->log_level, LogLevel::kInfo);
  EXPECT_EQ(cfg->resync_interval, std::chrono::seconds(60));
  EXPECT_EQ(cfg->udev_source, UdevSource::kAuto);
  EXPECT_EQ(cfg->call_timeout, std::chrono::seconds(10));
  EXPECT_EQ(cfg->prestart_timeout, std::chrono::seconds(28));
  EXPECT_EQ(cfg->start_timeout, std::chrono::seconds(30));
  EXPECT_EQ(cfg->pod_resources_socket, "/var/lib/kubelet/pod-resources/kubelet.sock");
  EXPECT_EQ(cfg->pod_resources_poll, std::chrono::seconds(5));
  EXPECT_EQ(cfg->release_grace, std::chrono::seconds(10));
  EXPECT_EQ(cfg->kubelet_settle, std::chrono::seconds(60));
  EXPECT_EQ(cfg->unseen_timeout, std::chrono::seconds(120));
  EXPECT_EQ(cfg->resources.size(), 1u);
}

TEST(ConfigTest, NothingToServeIsAnError) {
  for (const char* text : {"", "[agent]\nlog_level = \"debug\"\n", "# only a comment\n"}) {
    auto cfg = LoadString(text, "/etc/devplug/devplug.toml", Opts());
    ASSERT_FALSE(cfg.ok()) << text;
    EXPECT_EQ(cfg.status().message(),
              "/etc/devplug/devplug.toml: no [[resource]] table (in this file or a "
              "conf.d/*.toml drop-in): nothing to serve");
  }
  // A drop-in's resource is enough.
  TempDir dir;
  WriteFile(dir / "devplug.toml", "[agent]\n");
  WriteFile(dir / "conf.d/10-kvm.toml", kOneResource);
  EXPECT_TRUE(LoadFile(dir / "devplug.toml", Opts()).ok());
}

struct BadCase {
  const char* name;
  const char* toml;
  const char* expect;  // substring of the error, including file:line: key
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class ConfigErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ConfigErrorTest, NamesFileLineAndKey) {
  auto cfg = LoadString(GetParam().toml, "/etc/devplug/devplug.toml", Opts());
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find(GetParam().expect), std::string::npos)
      << "error was:\n"
      << cfg.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConfigErrorTest,
    ::testing::Values(
        BadCase{"syntax", "[agent\nlog_level = 1\n",
                "/etc/devplug/devplug.toml:1: TOML syntax error"},
        BadCase{"unknown_agent_key", "[agent]\nplugin_dri = \"/x\"\n",
                "devplug.toml:2: agent.plugin_dri: unknown key"},
        BadCase{"bad_registration", "[agent]\nregistration = \"watcher\"\n",
                "devplug.toml:2: agent.registration: unknown mode \"watcher\" (expected "
                "kubelet|plugin-watcher)"},
        BadCase{"bad_resource_registration",
                "[[resource]]\nname = \"a.example/b\"\nmodule = \"kvm\"\nregistration = true\n",
                "devplug.toml:4: resource[0].registration: must be a string"},
        BadCase{"registry_socket_too_long",
                "[agent]\nplugins_registry_dir = \"/very/long/folder/of/the/kubelet/whose/root/dir/"
                "is/somewhere/else/xyz/plugins_registry\"\n[[resource]]\nname = \"a.example/b\"\n"
                "module = \"kvm\"\nregistration = \"plugin-watcher\"\n",
                "devplug.toml:3: resource[0].socket: \"devplug-a.example_b.sock\": with "
                "plugins_registry_dir the path is 111 bytes"},
        BadCase{"bad_level", "[agent]\n\nlog_level = \"verbose\"\n",
                "devplug.toml:3: agent.log_level: unknown level \"verbose\""},
        BadCase{"level_type", "[agent]\nlog_level = 3\n",
                "devplug.toml:2: agent.log_level: must be a string, not an integer"},
        BadCase{"relative_dir", "[agent]\nplugin_dir = \"var/lib\"\n",
                "devplug.toml:2: agent.plugin_dir: must be an absolute path"},
        BadCase{
            "bad_duration", "[agent]\nresync_interval = \"10\"\n",
            "devplug.toml:2: agent.resync_interval: \"10\": a number needs a unit (ms, s, m or h)"},
        // Seen in review: an overflowing value was accepted as a negative one.
        BadCase{"resync_overflow", "[agent]\nresync_interval = \"10000000000000h\"\n",
                "devplug.toml:2: agent.resync_interval: \"10000000000000h\" is over the maximum "
                "of 24h"},
        BadCase{"resync_over_max", "[agent]\nresync_interval = \"24h1ms\"\n",
                "devplug.toml:2: agent.resync_interval: \"24h1ms\" is over the maximum of 24h"},
        BadCase{"resync_too_short", "[agent]\nresync_interval = \"10ms\"\n",
                "devplug.toml:2: agent.resync_interval: \"10ms\" is shorter than the minimum of "
                "100ms (\"0s\" turns it off)"},
        BadCase{"start_timeout_over_max", "[agent]\nstart_timeout = \"3000000h\"\n",
                "devplug.toml:2: agent.start_timeout: \"3000000h\" is over the maximum of 10m"},
        BadCase{"call_timeout_over_max", "[agent]\n\ncall_timeout = \"61s\"\n",
                "devplug.toml:3: agent.call_timeout: \"61s\" is over the maximum of 1m"},
        BadCase{"pod_resources_poll_over_max", "[agent]\npod_resources_poll = \"61m\"\n",
                "devplug.toml:2: agent.pod_resources_poll: \"61m\" is over the maximum of 1h"},
        BadCase{"pod_resources_poll_too_short", "[agent]\npod_resources_poll = \"5ms\"\n",
                "devplug.toml:2: agent.pod_resources_poll: \"5ms\" is shorter than the minimum"},
        BadCase{"release_grace_over_max", "[agent]\nrelease_grace = \"2h\"\n",
                "devplug.toml:2: agent.release_grace: \"2h\" is over the maximum of 1h"},
        BadCase{"pod_resources_socket_relative",
                "[agent]\npod_resources_socket = \"pod-resources/kubelet.sock\"\n",
                "devplug.toml:2: agent.pod_resources_socket: must be an absolute path"},
        BadCase{"prestart_timeout_over_max", "[agent]\nprestart_timeout = \"30s\"\n",
                "devplug.toml:2: agent.prestart_timeout: \"30s\" is over the maximum of 29s"},
        BadCase{"call_timeout_zero", "[agent]\ncall_timeout = \"0s\"\n",
                "devplug.toml:2: agent.call_timeout: \"0s\" is shorter than the minimum of 1ms"},
        BadCase{"bad_source", "[agent]\nudev_source = \"netlink\"\n",
                "devplug.toml:2: agent.udev_source: unknown source"},
        BadCase{"top_level", "plugin_dir = \"/x\"\n", "devplug.toml:1: plugin_dir: unknown key"},
        BadCase{"resource_as_table", "[resource]\nname = \"a.b/c\"\n",
                "devplug.toml:1: resource: must be written as [[resource]] tables"},
        BadCase{"missing_name", "[[resource]]\nmodule = \"kvm\"\n",
                "devplug.toml:1: resource[0].name: missing"},
        BadCase{"missing_module", "[[resource]]\nname = \"a.example/b\"\n",
                "devplug.toml:1: resource[0].module: missing"},
        BadCase{"no_prefix", "[[resource]]\nname = \"kvm\"\nmodule = \"kvm\"\n",
                "devplug.toml:2: resource[0].name: \"kvm\" is not a valid extended resource "
                "name: it needs a domain prefix"},
        BadCase{"native_prefix", "[[resource]]\nname = \"kubernetes.io/kvm\"\nmodule = \"kvm\"\n",
                "resource[0].name: \"kubernetes.io/kvm\" is not a valid"},
        BadCase{"relative_module", "[[resource]]\nname = \"a.example/b\"\nmodule = \"mods/kvm\"\n",
                "devplug.toml:3: resource[0].module: \"mods/kvm\" must be a bare module name"},
        BadCase{"socket_path",
                "[[resource]]\nname = \"a.example/b\"\nmodule = \"kvm\"\nsocket = \"../x.sock\"\n",
                "devplug.toml:4: resource[0].socket: \"../x.sock\": must be a bare file name"},
        BadCase{
            "socket_space",
            "[[resource]]\nname = \"a.example/b\"\nmodule = \"kvm\"\nsocket = \"my dev.sock\"\n",
            "devplug.toml:4: resource[0].socket: \"my dev.sock\": may only hold the "
            "characters A-Z a-z 0-9 . _ -"},
        BadCase{"socket_newline",
                "[[resource]]\nname = \"a.example/b\"\nmodule = \"kvm\"\nsocket = \"a\\nb.sock\"\n",
                "resource[0].socket: \"a\nb.sock\": may only hold the characters"},
        BadCase{
            "socket_kubelet",
            "[[resource]]\nname = \"a.example/b\"\nmodule = \"kvm\"\nsocket = \"kubelet.sock\"\n",
            "resource[0].socket: \"kubelet.sock\": is a name the kubelet uses itself"},
        BadCase{"socket_too_long",
                "[[resource]]\nname = \"a.example/b\"\nmodule = \"kvm\"\nsocket = "
                "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa."
                "sock\"\n",
                "a Unix socket path holds at most 107"},
        BadCase{"required_type",
                "[[resource]]\nname = \"a.example/b\"\nmodule = \"kvm\"\nrequired = \"yes\"\n",
                "devplug.toml:4: resource[0].required: must be a boolean, not a string"},
        BadCase{"duplicate_name",
                "[[resource]]\nname = \"a.example/b\"\nmodule = \"kvm\"\n"
                "[[resource]]\nname = \"a.example/b\"\nmodule = \"kvm\"\nsocket = \"other.sock\"\n",
                "devplug.toml:4: resource[1].name: duplicate resource name \"a.example/b\" (first "
                "defined at /etc/devplug/devplug.toml:1)"},
        BadCase{"duplicate_socket",
                "[[resource]]\nname = \"a.example/b\"\nmodule = \"kvm\"\nsocket = \"s.sock\"\n"
                "[[resource]]\nname = \"a.example/c\"\nmodule = \"kvm\"\nsocket = \"s.sock\"\n",
                "devplug.toml:8: resource[1].socket: socket \"s.sock\" is already used by resource "
                "\"a.example/b\""}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(ConfigTest, ReportsEveryProblemAtOnce) {
  auto cfg =
      LoadString("[agent]\nlog_level = \"loud\"\nudev_source = 4\n[[resource]]\nname = \"x\"\n",
                 "f.toml", Opts());
  ASSERT_FALSE(cfg.ok());
  const std::string& m = cfg.status().message();
  EXPECT_NE(m.find("f.toml:2: agent.log_level"), std::string::npos) << m;
  EXPECT_NE(m.find("f.toml:3: agent.udev_source"), std::string::npos) << m;
  EXPECT_NE(m.find("f.toml:5: resource[0].name"), std::string::npos) << m;
  EXPECT_NE(m.find("f.toml:4: resource[0].module: missing"), std::string::npos) << m;
}

TEST(ConfigTest, ResourceNamesFollowTheKubeletRules) {
  struct Case {
    const char* name;
    bool valid;
  } cases[] = {
      {"devices.kubevirt.io/kvm", true},
      {"nvidia.com/gpu", true},
      {"intel.com/qat_vf", true},
      {"example.com/Upper-Case_ok.1", true},
      {"a/b", true},
      {"kvm", false},
      {"kubernetes.io/gpu", false},
      {"foo.kubernetes.io/gpu", false},
      {"requests.example.com/gpu", false},
      {"Example.com/gpu", false},
      {"example.com/", false},
      {"/gpu", false},
      {"example.com/gpu/x", false},
      {"example.com/-gpu", false},
      {"example.com/gpu-", false},
      {"example..com/gpu", false},
      {"exa_mple.com/gpu", false},
      {"example.com/g pu", false},
  };
  for (const Case& c : cases)
    EXPECT_EQ(CheckResourceName(c.name).empty(), c.valid)
        << c.name << ": " << CheckResourceName(c.name);
  // Name part: at most 63 characters; prefix: "requests." + prefix <= 253.
  EXPECT_TRUE(CheckResourceName("example.com/" + std::string(63, 'a')).empty());
  EXPECT_FALSE(CheckResourceName("example.com/" + std::string(64, 'a')).empty());
  const std::string label(61, 'a');
  std::string prefix = label + "." + label + "." + label + "." + label.substr(0, 58);  // 244
  EXPECT_EQ(prefix.size(), 244u);
  EXPECT_TRUE(CheckResourceName(prefix + "/x").empty());
  EXPECT_FALSE(CheckResourceName(prefix + "a/x").empty());
}

TEST(ConfigTest, DurationsNeedUnitsAndStayUnderTheirMaximum) {
  const auto day = std::chrono::milliseconds(kMaxResyncInterval);
  EXPECT_EQ(*ParseDuration("500ms", day), std::chrono::milliseconds(500));
  EXPECT_EQ(*ParseDuration("60s", day), std::chrono::seconds(60));
  EXPECT_EQ(*ParseDuration("5m", day), std::chrono::minutes(5));
  EXPECT_EQ(*ParseDuration("1h30m", day), std::chrono::minutes(90));
  EXPECT_EQ(*ParseDuration("0s", day), std::chrono::milliseconds(0));
  EXPECT_EQ(*ParseDuration("0", day), std::chrono::milliseconds(0));
  EXPECT_EQ(*ParseDuration("24h", day), day);
  EXPECT_EQ(*ParseDuration("23h59m59s999ms", day), day - std::chrono::milliseconds(1));
  for (const char* bad : {"", "s", "10", "1.5s", "5 m", "-1s", "1d"})
    EXPECT_FALSE(ParseDuration(bad, day).ok()) << bad;
  // Past the maximum, and values that would overflow int64 milliseconds on
  // the way (each part, or their sum), all say the maximum.
  for (const char* big :
       {"24h1ms", "25h", "86400001ms", "10000000000000h", "99999999999999999999999999ms",
        "9223372036854775807s", "12h12h1ms", "5000000h5000000h"}) {
    auto d = ParseDuration(big, day);
    ASSERT_FALSE(d.ok()) << big;
    EXPECT_NE(d.status().message().find("over the maximum of 24h"), std::string::npos)
        << d.status().message();
  }
  EXPECT_EQ(FormatDuration(std::chrono::hours(24)), "24h");
  EXPECT_EQ(FormatDuration(std::chrono::minutes(90)), "90m");
  EXPECT_EQ(FormatDuration(std::chrono::seconds(29)), "29s");
  EXPECT_EQ(FormatDuration(std::chrono::milliseconds(1500)), "1.5s");
  EXPECT_EQ(FormatDuration(std::chrono::milliseconds(500)), "500ms");
  EXPECT_EQ(FormatDuration(std::chrono::milliseconds(0)), "0s");
}

TEST(ConfigTest, CommandLineOverridesAreCheckedLikeFileValues) {
  LoadOptions o = Opts();
  o.plugin_dir = "/run/dp/";
  o.host_root = "/host";
  auto cfg = LoadString(kOneResource, "f.toml", o);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->plugin_dir, "/run/dp");
  EXPECT_EQ(cfg->host_root, "/host");

  o.plugin_dir = "relative/dir";
  o.module_dir = "";
  cfg = LoadString(kOneResource, "f.toml", o);
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find(
                "command line: --plugin-dir: must be an absolute path, got \"relative/dir\""),
            std::string::npos)
      << cfg.status().message();
  EXPECT_NE(cfg.status().message().find("command line: --module-dir: must be an absolute path"),
            std::string::npos)
      << cfg.status().message();

  // Seen in review: a too long plugin dir ran with no resources. The socket
  // that no longer fits is named where it is defined.
  o = Opts();
  o.plugin_dir = "/" + std::string(89, 'p');
  cfg = LoadString(kOneResource, "f.toml", o);
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("f.toml:1: resource[0].socket: "
                                        "\"devplug-a.example_b.sock\": with plugin_dir the path "
                                        "is 115 bytes"),
            std::string::npos)
      << cfg.status().message();
}

TEST(ConfigTest, RegistrationIsTheAgentsUnlessTheTableSaysOtherwise) {
  auto cfg = LoadString(
      "[agent]\nregistration = \"plugin-watcher\"\nplugins_registry_dir = \"/k/plugins_registry\"\n"
      "[[resource]]\nname = \"a.example/x\"\nmodule = \"kvm\"\n"
      "[[resource]]\nname = \"a.example/y\"\nmodule = \"kvm\"\nregistration = \"kubelet\"\n",
      "/etc/devplug/devplug.toml", Opts());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->registration, RegistrationMode::kPluginWatcher);
  EXPECT_EQ(cfg->plugins_registry_dir, "/k/plugins_registry");
  EXPECT_EQ(cfg->resources[0].registration, RegistrationMode::kPluginWatcher);
  EXPECT_EQ(cfg->resources[1].registration, RegistrationMode::kKubelet);
  // The default is Register on kubelet.sock.
  auto plain = LoadString(kOneResource, "/etc/devplug/devplug.toml", Opts());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->registration, RegistrationMode::kKubelet);
  EXPECT_EQ(plain->plugins_registry_dir, "/var/lib/kubelet/plugins_registry");
  EXPECT_EQ(plain->resources[0].registration, RegistrationMode::kKubelet);
}

TEST(ConfigTest, CdiIsTheAgentsUnlessTheTableSaysOtherwise) {
  auto cfg = LoadString(
      "[agent]\ncdi = \"cri\"\ncdi_dir = \"/run/cdi/\"\n"
      "[[resource]]\nname = \"a.example/x\"\nmodule = \"kvm\"\n"
      "[[resource]]\nname = \"a.example/y\"\nmodule = \"kvm\"\ncdi = \"both\"\ncdi_only = true\n"
      "cdi_dir = \"/etc/cdi\"\n"
      "[[resource]]\nname = \"a.example/1z\"\nmodule = \"kvm\"\ncdi = \"off\"\n",
      "/etc/devplug/devplug.toml", Opts());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->cdi, CdiMode::kCri);
  EXPECT_EQ(cfg->resources[0].cdi, CdiMode::kCri);
  EXPECT_EQ(cfg->resources[0].cdi_dir, "/run/cdi");
  EXPECT_EQ(cfg->resources[1].cdi, CdiMode::kBoth);
  EXPECT_TRUE(cfg->resources[1].cdi_only);
  EXPECT_EQ(cfg->resources[1].cdi_dir, "/etc/cdi");
  EXPECT_EQ(cfg->resources[2].cdi, CdiMode::kOff);  // no CDI kind, and none needed
  // The default: off, specs in /var/run/cdi.
  auto plain = LoadString(kOneResource, "/etc/devplug/devplug.toml", Opts());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->resources[0].cdi, CdiMode::kOff);
  EXPECT_EQ(plain->resources[0].cdi_dir, "/var/run/cdi");
}

TEST(ConfigTest, CdiMistakesNameFileLineAndKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"[[resource]]\nname = \"a.example/x\"\nmodule = \"kvm\"\ncdi = \"yes\"\n",
       "devplug.toml:4: resource[0].cdi: unknown mode \"yes\" (expected off|cri|annotations|both)"},
      {"[agent]\ncdi = 1\n[[resource]]\nname = \"a.example/x\"\nmodule = \"kvm\"\n",
       "devplug.toml:2: agent.cdi: must be a string"},
      {"[[resource]]\nname = \"a.example/x\"\nmodule = \"kvm\"\ncdi_only = true\n",
       "devplug.toml:4: resource[0].cdi_only: needs cdi = "},
      {"[[resource]]\nname = \"a.example/1x\"\nmodule = \"kvm\"\ncdi = \"cri\"\n",
       "devplug.toml:4: resource[0].cdi: resource \"a.example/1x\" has no CDI kind: its CDI class"},
      {"[agent]\ncdi = \"cri\"\n[[resource]]\nname = \"a.example/x.y\"\nmodule = \"kvm\"\n"
       "[[resource]]\nname = \"a.example/x_y\"\nmodule = \"kvm\"\n",
       "resource[1].cdi: resource \"a.example/x_y\" has the CDI kind \"devplug.a.example/x_y\" of "
       "resource \"a.example/x.y\""},
      {"[[resource]]\nname = \"a.example/x\"\nmodule = \"kvm\"\ncdi_dir = \"run/cdi\"\n",
       "devplug.toml:4: resource[0].cdi_dir: must be an absolute path"},
  };
  for (const auto& [toml, expect] : cases) {
    auto cfg = LoadString(toml, "/etc/devplug/devplug.toml", Opts());
    ASSERT_FALSE(cfg.ok()) << toml;
    EXPECT_NE(cfg.status().message().find(expect), std::string::npos)
        << "expected: " << expect << "\nerror was:\n"
        << cfg.status().message();
  }
}

TEST(ConfigTest, DefaultSocketNamesAreAlwaysValid) {
  for (const char* name : {"devices.kubevirt.io/kvm", "intel.com/qat_vf", "a/B-c_d.e"})
    EXPECT_EQ(CheckSocketName(DefaultSocketName(name), "/var/lib/kubelet/device-plugins"), "")
        << name;
}

TEST(ConfigTest, DefaultSocketNamesAreRecognised) {
  EXPECT_TRUE(kubelet::IsDefaultSocketName(DefaultSocketName("devices.kubevirt.io/kvm")));
  for (const char* other : {"kubelet.sock", "devplug-.sock", "devplug-x.socket", "sriov.sock",
                            "devplug-x", "x-devplug-y.sock"})
    EXPECT_FALSE(kubelet::IsDefaultSocketName(other)) << other;
}

// Beside another devplugd a socket takes its second name: still a valid
// name, still recognised as devplugd's.
TEST(ConfigTest, SecondSocketNamesAreValidAndRecognised) {
  const std::string kvm = DefaultSocketName("devices.kubevirt.io/kvm");
  EXPECT_EQ(kubelet::SecondSocketName(kvm), "devplug-devices.kubevirt.io_kvm.b.sock");
  EXPECT_TRUE(kubelet::IsDefaultSocketName(kubelet::SecondSocketName(kvm)));
  EXPECT_EQ(CheckSocketName(kubelet::SecondSocketName(kvm), "/var/lib/kubelet/device-plugins"), "");
  EXPECT_EQ(kubelet::SecondSocketName("vendor-plugin"), "vendor-plugin.b");
}

TEST(ConfigTest, DropInsAddResourcesInLexicalOrder) {
  TempDir dir;
  WriteFile(dir / "devplug.toml",
            "[agent]\nplugin_dir = \"/tmp/p\"\n[[resource]]\nname = \"a.example/main\"\nmodule = "
            "\"kvm\"\n");
  WriteFile(dir / "conf.d/20-second.toml",
            "[[resource]]\nname = \"a.example/two\"\nmodule = \"kvm\"\n");
  WriteFile(
      dir / "conf.d/10-first.toml",
      "[agent]\nlog_level = \"warn\"\n[[resource]]\nname = \"a.example/one\"\nmodule = \"kvm\"\n");
  WriteFile(dir / "conf.d/README", "not toml");
  WriteFile(dir / "conf.d/.hidden.toml", "garbage [[[");
  auto cfg = LoadFile(dir / "devplug.toml", Opts());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  ASSERT_EQ(cfg->resources.size(), 3u);
  EXPECT_EQ(cfg->resources[0].name, "a.example/main");
  EXPECT_EQ(cfg->resources[1].name, "a.example/one");
  EXPECT_EQ(cfg->resources[1].where.file, dir / "conf.d/10-first.toml");
  EXPECT_EQ(cfg->resources[2].name, "a.example/two");
  EXPECT_EQ(cfg->log_level, LogLevel::kWarn);
  EXPECT_EQ(cfg->files.size(), 3u);
}

TEST(ConfigTest, DuplicateAcrossDropInNamesBothFiles) {
  TempDir dir;
  WriteFile(dir / "devplug.toml", "[[resource]]\nname = \"a.example/x\"\nmodule = \"kvm\"\n");
  WriteFile(dir / "conf.d/50-dup.toml",
            "\n[[resource]]\nname = \"a.example/x\"\nmodule = \"kvm\"\nsocket = \"y.sock\"\n");
  auto cfg = LoadFile(dir / "devplug.toml", Opts());
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find(dir / "conf.d/50-dup.toml:2: resource[1].name: duplicate "
                                              "resource name \"a.example/x\" (first defined at " +
                                        dir / "devplug.toml:1)"),
            std::string::npos)
      << cfg.status().message();
}

TEST(ConfigTest, MissingFileIsAnError) {
  auto cfg = LoadFile("/nonexistent/devplug.toml", Opts());
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("/nonexistent/devplug.toml: cannot open"),
            std::string::npos);
}

// ---- DRA (api = "dra") ----------------------------------------------------------------

TEST(ConfigTest, ADraResourceGetsItsDriverNameSocketAndRegistration) {
  auto cfg = LoadString(R"([agent]
node_name = "node-1"
api_server = "https://10.0.0.1:6443"
api_ca_file = "/etc/kubernetes/pki/ca.crt"
api_token_file = "/var/run/devplug/token"

[[resource]]
name = "devplug.io/tun"
module = "generic"
api = "dra"

[[resource]]
name = "devplug.io/kvm"
module = "kvm"
api = "dra"
dra_driver = "kvm.dra.example.com"

[[resource]]
name = "devplug.io/Net_Dev"
module = "generic"
)",
                        "dra.toml", Opts());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  const auto& r = cfg->resources;
  EXPECT_EQ(r[0].api, ServingApi::kDra);
  EXPECT_EQ(r[0].driver, "tun.devplug.io");
  EXPECT_EQ(r[0].socket, "tun.devplug.io.sock");
  EXPECT_EQ(r[0].registration, RegistrationMode::kPluginWatcher);
  EXPECT_EQ(r[1].driver, "kvm.dra.example.com");
  EXPECT_EQ(r[2].api, ServingApi::kDevicePlugin);
  EXPECT_EQ(r[2].driver, "");
  EXPECT_EQ(r[2].registration, RegistrationMode::kKubelet);
  EXPECT_EQ(cfg->node_name, "node-1");
  EXPECT_EQ(cfg->api_server, "https://10.0.0.1:6443");
  EXPECT_EQ(cfg->api_ca_file, "/etc/kubernetes/pki/ca.crt");
  EXPECT_EQ(cfg->api_token_file, "/var/run/devplug/token");
  EXPECT_EQ(cfg->dra_state_dir, "/var/lib/devplug/dra");
  EXPECT_EQ(DefaultDriverName("devplug.io/Net_Dev"), "net-dev.devplug.io");
}

// api = "node-label": the Node's label (LoadOptions::node_labels, read by
// devplugd) chooses the API; the table is checked for both, so one file
// serves every node.
TEST(ConfigTest, ANodeLabelChoosesTheApiOfANodeLabelResource) {
  constexpr char kText[] = R"([agent]
node_name = "node-1"
api_label = "example.com/devplug-api"

[[resource]]
name = "devplug.io/tun"
module = "generic"
api = "node-label"
dra_driver = "tun.dra.example.com"

[[resource]]
name = "devplug.io/kvm"
module = "kvm"
)";
  LoadOptions o = Opts();
  o.node_labels = std::map<std::string, std::string>{{"example.com/devplug-api", "dra"}};
  auto cfg = LoadString(kText, "label.toml", o);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_TRUE(cfg->resources[0].api_from_node_label);
  EXPECT_EQ(cfg->resources[0].api, ServingApi::kDra);
  EXPECT_EQ(cfg->resources[0].driver, "tun.dra.example.com");
  EXPECT_EQ(cfg->resources[0].socket, "tun.dra.example.com.sock");
  EXPECT_EQ(cfg->resources[0].registration, RegistrationMode::kPluginWatcher);
  EXPECT_EQ(cfg->resources[1].api, ServingApi::kDevicePlugin);  // not labelled: its own
  EXPECT_EQ(cfg->api_label_note, "node node-1's label example.com/devplug-api=dra");

  for (const auto& [labels, note] :
       std::vector<std::pair<std::optional<std::map<std::string, std::string>>, std::string>>{
           {std::map<std::string, std::string>{{"example.com/devplug-api", "device-plugin"}},
            "node node-1's label example.com/devplug-api=device-plugin"},
           {std::map<std::string, std::string>{},
            "node node-1 has no label example.com/devplug-api: the device plugin API"},
           {std::map<std::string, std::string>{{"example.com/devplug-api", "yes"}},
            "node node-1's label example.com/devplug-api=yes is neither dra nor device-plugin: "
            "the device plugin API"},
           {std::nullopt, "node node-1's labels not read (forbidden): the device plugin API"}}) {
    o.node_labels = labels;
    o.node_labels_error = "forbidden";
    cfg = LoadString(kText, "label.toml", o);
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    EXPECT_EQ(cfg->resources[0].api, ServingApi::kDevicePlugin) << note;
    EXPECT_EQ(cfg->resources[0].socket, "devplug-devplug.io_tun.sock") << note;
    EXPECT_EQ(cfg->resources[0].registration, RegistrationMode::kKubelet) << note;
    EXPECT_EQ(cfg->resources[0].driver, "") << note;
    EXPECT_EQ(cfg->api_label_note, note);
  }

  // Checked for DRA on every node: a name with no driver name is refused
  // whatever the label says.
  auto bad = LoadString(
      "[agent]\nnode_name = \"n\"\n[[resource]]\nname = \"devplug.io/a\"\nmodule = "
      "\"kvm\"\napi = \"node-label\"\ncdi = \"cri\"\n",
      "bad.toml", Opts());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.toml:7: resource[0].cdi: a DRA resource always "
                                        "hands its devices out by CDI name"),
            std::string::npos)
      << bad.status().message();
  bad = LoadString(
      "[agent]\napi_label = \"bad label!\"\n[[resource]]\nname = \"devplug.io/a\"\n"
      "module = \"kvm\"\napi = \"auto\"\n",
      "bad.toml", Opts());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.toml:2: agent.api_label: \"bad label!\" is not a "
                                        "label key"),
            std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("(expected device-plugin|dra|node-label)"),
            std::string::npos)
      << bad.status().message();
}

// agent.api_kubeconfig names the API server and its credentials: with
// api_server or one of its credential keys, one of them would be ignored.
TEST(ConfigTest, AKubeconfigOrAnApiServerNotBoth) {
  auto cfg = LoadString(R"([agent]
api_kubeconfig = "/etc/kubernetes/kubelet.conf"
api_token_file = "/run/token"

[[resource]]
name = "devplug.io/a"
module = "generic"
api = "dra"
)",
                        "both.toml", Opts());
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().message(),
            "both.toml:2: agent.api_kubeconfig: names the API server and its credentials, and so "
            "does agent.api_token_file (both.toml:3): set one or the other");
  auto alone = LoadString(R"([agent]
api_kubeconfig = "/etc/kubernetes/kubelet.conf"

[[resource]]
name = "devplug.io/a"
module = "generic"
api = "dra"
)",
                          "alone.toml", Opts());
  ASSERT_TRUE(alone.ok()) << alone.status().message();
  EXPECT_EQ(alone->api_kubeconfig, "/etc/kubernetes/kubelet.conf");
}

TEST(ConfigTest, DraMistakesNameFileLineAndKey) {
  auto cfg = LoadString(R"([agent]
node_name = "Node_1"
api_server = "10.0.0.1:6443"

[[resource]]
name = "devplug.io/a"
module = "generic"
api = "dra"
registration = "kubelet"
cdi = "cri"

[[resource]]
name = "devplug.io/b"
module = "generic"
api = "dra"
dra_driver = "a.devplug.io"

[[resource]]
name = "devplug.io/c"
module = "generic"
api = "grpc"

[[resource]]
name = "devplug.io/d"
module = "generic"
dra_driver = "d.devplug.io"

[[resource]]
name = "devplug.io/e"
module = "generic"
api = "dra"
dra_driver = "E..devplug"

[[resource]]
name = "devplug.io/f"
module = "generic"
api = "dra"
dra_taint_effect = "Evict"

[[resource]]
name = "devplug.io/g"
module = "generic"
dra_taint_effect = "NoExecute"
)",
                        "bad.toml", Opts());
  ASSERT_FALSE(cfg.ok());
  const std::string m(cfg.status().message());
  EXPECT_NE(m.find("bad.toml:2: agent.node_name: \"Node_1\" is not a node name"), std::string::npos)
      << m;
  EXPECT_NE(m.find("bad.toml:3: agent.api_server: \"10.0.0.1:6443\" is not an https:// URL"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("bad.toml:5: resource[0].registration: a DRA resource registers through the "
                   "plugin watcher"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("bad.toml:10: resource[0].cdi: a DRA resource always hands its devices out by "
                   "CDI name"),
            std::string::npos)
      << m;
  EXPECT_NE(
      m.find(
          "bad.toml:16: resource[1].dra_driver: DRA driver \"a.devplug.io\" is already served by "
          "resource \"devplug.io/a\" (bad.toml:5)"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("bad.toml:21: resource[2].api: unknown API \"grpc\" (expected "
                   "device-plugin|dra|node-label)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("bad.toml:26: resource[3].dra_driver: is a DRA key"), std::string::npos) << m;
  EXPECT_NE(m.find("bad.toml:32: resource[4].dra_driver: \"E..devplug\" is not a DRA driver name"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("bad.toml:38: resource[5].dra_taint_effect: unknown effect \"Evict\" "
                   "(expected NoSchedule|NoExecute|None)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("bad.toml:43: resource[6].dra_taint_effect: is a DRA key"), std::string::npos)
      << m;
}

// A DRA resource writes its claims' specs under its CDI kind: a device
// plugin resource of the same kind would sweep them away (review D13).
// Credentials go over http:// only to this host's loopback (review D15).
TEST(ConfigTest, ADraResourceSharesNoCdiKindAndSendsNoTokenInClear) {
  auto clash = LoadString(R"([agent]
node_name = "node-1"
api_server = "https://10.0.0.1:6443"

[[resource]]
name = "fake.example/gpu.a"
module = "generic"
api = "dra"

[[resource]]
name = "fake.example/gpu_a"
module = "generic"
cdi = "cri"
)",
                          "clash.toml", Opts());
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find(
                "clash.toml:13: resource[1].cdi: resource \"fake.example/gpu_a\" has the CDI kind "
                "\"devplug.fake.example/gpu_a\" of resource \"fake.example/gpu.a\""),
            std::string::npos)
      << clash.status().message();
  auto both_dra = LoadString(R"([agent]
node_name = "node-1"
api_server = "https://10.0.0.1:6443"

[[resource]]
name = "fake.example/gpu_a"
module = "generic"
cdi = "cri"

[[resource]]
name = "fake.example/gpu.a"
module = "generic"
api = "dra"
)",
                             "clash.toml", Opts());
  ASSERT_FALSE(both_dra.ok());
  EXPECT_NE(both_dra.status().message().find("clash.toml:13: resource[1].api: resource "
                                             "\"fake.example/gpu.a\" has the CDI kind"),
            std::string::npos)
      << both_dra.status().message();

  auto plain = LoadString(R"([agent]
node_name = "node-1"
api_server = "http://10.0.0.1:8080"

[[resource]]
name = "fake.example/gpu"
module = "generic"
api = "dra"
)",
                          "plain.toml", Opts());
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(
      plain.status().message().find("plain.toml:3: agent.api_server: \"http://10.0.0.1:8080\" "
                                    "is plain http:// to another host"),
      std::string::npos)
      << plain.status().message();
  auto local = LoadString(R"([agent]
node_name = "node-1"
api_server = "http://127.0.0.1:8080"

[[resource]]
name = "fake.example/gpu"
module = "generic"
api = "dra"
)",
                          "local.toml", Opts());
  EXPECT_TRUE(local.ok()) << local.status().message();
}

TEST(ConfigTest, DraDriverNamesAreDnsSubdomains) {
  EXPECT_EQ(CheckDriverName("gpu.example.com"), "");
  EXPECT_EQ(CheckDriverName("a-1.b"), "");
  EXPECT_NE(CheckDriverName(""), "");
  EXPECT_NE(CheckDriverName("-a.b"), "");
  EXPECT_NE(CheckDriverName("a..b"), "");
  EXPECT_NE(CheckDriverName("a.b."), "");
  EXPECT_NE(CheckDriverName("A.b"), "");
  EXPECT_NE(CheckDriverName("a_b.c"), "");
  EXPECT_NE(CheckDriverName(std::string(64, 'a')), "");
  EXPECT_EQ(CheckDriverName(std::string(63, 'a')), "");
}

}  // namespace
}  // namespace devplug::config
