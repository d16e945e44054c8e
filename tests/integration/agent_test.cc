// devplugd end to end: the real binary as a child process, the kubelet
// simulator in this process, real Unix sockets in a temporary directory.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "agent_fixture.h"

namespace devplug {
namespace {

TEST_F(AgentTest, ResourcesRegisterWithCompleteSnapshots) {
  StartSim();
  StartAgent(Resource(kKvm, "kvm", "shares = 3") +
             Resource(kFull, FakeModule("fake_full"),
                      "count = 4\nunhealthy = [\"fake-3\"]\nnuma = 1\nsocket = \"full.sock\"") +
             Resource(kMinimal, FakeModule("fake_minimal"), "count = 2"));
  ASSERT_TRUE(Registered(kKvm));
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(Registered(kMinimal));

  auto kvm = sim_->resource(kKvm);
  ASSERT_EQ(kvm->devices.size(), 3u);
  EXPECT_EQ(kvm->endpoint, "devplug-devices.kubevirt.io_kvm.sock");
  // No /dev/kvm in the fixture host root: present but unhealthy.
  EXPECT_EQ(kvm->healthy(), 0u);
  EXPECT_FALSE(kvm->options.pre_start_required());
  EXPECT_FALSE(kvm->options.get_preferred_allocation_available());

  auto full = sim_->resource(kFull);
  EXPECT_EQ(full->endpoint, "full.sock");
  ASSERT_EQ(full->devices.size(), 4u);
  EXPECT_EQ(full->healthy(), 3u);
  EXPECT_EQ(full->devices[3].id(), "fake-3");
  EXPECT_EQ(full->devices[3].health(), "Unhealthy");
  ASSERT_EQ(full->devices[0].topology().nodes_size(), 1);
  EXPECT_EQ(full->devices[0].topology().nodes(0).id(), 1);
  // Advertised because the module has the hooks (same in RegisterRequest:
  // the simulator records a violation otherwise).
  EXPECT_TRUE(full->options.pre_start_required());
  EXPECT_TRUE(full->options.get_preferred_allocation_available());

  auto minimal = sim_->resource(kMinimal);
  ASSERT_EQ(minimal->devices.size(), 2u);
  EXPECT_FALSE(minimal->devices[0].has_topology());
  EXPECT_FALSE(minimal->options.pre_start_required());

  // The first message already held the complete scan: one snapshot each.
  EXPECT_EQ(kvm->snapshots, 1u);
  EXPECT_EQ(full->snapshots, 1u);
  EXPECT_EQ(sim_->total_registrations(), 3u);
  EXPECT_TRUE(FileExists(plugin_dir() + "/full.sock"));
  EXPECT_TRUE(FileExists(plugin_dir() + "/devplug-fake.example_minimal.sock"));
}

TEST_F(AgentTest, AllocateAnswersAndRejectsBadIds) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count = 4\nunhealthy = [\"fake-3\"]") +
             Resource(kMinimal, FakeModule("fake_minimal"), "count = 3"));
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(Registered(kMinimal));

  v1beta1::ContainerAllocateResponse resp;
  grpc::Status st = sim_->Allocate(kFull, {"fake-0", "fake-2"}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.envs().at("FAKE_DEVICES"), "fake-0,fake-2");
  ASSERT_EQ(resp.mounts_size(), 1);
  EXPECT_EQ(resp.mounts(0).container_path(), "/fake");
  EXPECT_TRUE(resp.mounts(0).read_only());
  EXPECT_EQ(resp.annotations().at("fake.example/count"), "many");
  ASSERT_EQ(resp.cdi_devices_size(), 1);
  EXPECT_EQ(resp.cdi_devices(0).name(), "fake.example/dev=all");

  // No allocate hook: the devices' default recipes.
  st = sim_->Allocate(kMinimal, {"fake-2", "fake-0"}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.devices_size(), 2);
  EXPECT_EQ(resp.devices(0).host_path(), "/dev/fake2");
  EXPECT_EQ(resp.devices(0).container_path(), "/dev/fake2");
  EXPECT_EQ(resp.devices(0).permissions(), "rw");
  EXPECT_EQ(resp.devices(1).host_path(), "/dev/fake0");
  EXPECT_EQ(resp.envs().at("FAKE_VISIBLE"), "fake-2,fake-0");

  st = sim_->Allocate(kFull, {"fake-0", "fake-99"}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("unknown device ID \"fake-99\""), std::string::npos)
      << st.error_message();
  st = sim_->Allocate(kFull, {"fake-3"}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("device \"fake-3\" is unhealthy"), std::string::npos);
  st = sim_->Allocate(kFull, {}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Concurrent Allocates on one connection, across resources.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        v1beta1::ContainerAllocateResponse r;
        const char* name = (t % 2) ? kFull : kMinimal;
        if (!sim_->Allocate(name, {"fake-" + std::to_string(i % 3)}, &r).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(AgentTest, PreferredAllocationAndPreStartFollowTheHooks) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count = 6\nfail_pre_start = \"fake-5\"") +
             Resource(kMinimal, FakeModule("fake_minimal")));
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(Registered(kMinimal));

  std::vector<std::string> ids;
  grpc::Status st = sim_->GetPreferredAllocation(kFull, {"fake-0", "fake-1", "fake-2", "fake-4"},
                                                 {"fake-4"}, 2, &ids);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(ids, (std::vector<std::string>{"fake-4", "fake-0"}));

  st = sim_->GetPreferredAllocation(kMinimal, {"fake-0"}, {}, 1, &ids);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNIMPLEMENTED);

  EXPECT_TRUE(sim_->PreStartContainer(kFull, {"fake-0", "fake-1"}).ok());
  st = sim_->PreStartContainer(kFull, {"fake-1", "fake-5"});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("device refused to reset"), std::string::npos)
      << st.error_message();
  EXPECT_TRUE(sim_->PreStartContainer(kMinimal, {"fake-0"}).ok());
}

TEST_F(AgentTest, KubeletRestartedFiveTimesInARow) {
  StartSim();
  StartAgent(Resource(kKvm, "kvm", "shares = 2") + Resource(kMinimal, FakeModule("fake_minimal")));
  ASSERT_TRUE(Registered(kKvm));
  ASSERT_TRUE(Registered(kMinimal));
  for (uint64_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(sim_->Restart(50ms).ok());
    ASSERT_TRUE(Registered(kKvm, i + 2)) << "restart " << i + 1;
    ASSERT_TRUE(Registered(kMinimal, i + 2)) << "restart " << i + 1;
    // The kubelet wiped our sockets; they are back.
    EXPECT_TRUE(FileExists(plugin_dir() + "/devplug-devices.kubevirt.io_kvm.sock"));
  }
  // Settle, then make sure nothing registered more than once per restart.
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(sim_->resource(kKvm)->registrations, 6u);
  EXPECT_EQ(sim_->resource(kMinimal)->registrations, 6u);
  EXPECT_EQ(sim_->resource(kMinimal)->devices.size(), 4u);
  v1beta1::ContainerAllocateResponse resp;
  EXPECT_TRUE(sim_->Allocate(kMinimal, {"fake-1"}, &resp).ok());
}

TEST_F(AgentTest, KubeletAbsentAtStart) {
  // No kubelet and not even the directory.
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")));
  ASSERT_TRUE(agent_->WaitForLog("to appear", kWait)) << agent_->Log();
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(agent_->Running()) << "the agent must keep running";
  StartSim();
  ASSERT_TRUE(Registered(kMinimal));
  EXPECT_EQ(sim_->resource(kMinimal)->registrations, 1u);
}

TEST_F(AgentTest, StreamEndedByKubeletLeadsToNewRegistration) {
  StartSim();
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")));
  ASSERT_TRUE(Registered(kMinimal));
  sim_->DropConnections();
  ASSERT_TRUE(Registered(kMinimal, 2));
  EXPECT_EQ(sim_->resource(kMinimal)->stream_ends, 1u);
}

TEST_F(AgentTest, CheckpointRenamesAndOtherFilesDoNotTriggerReRegistration) {
  StartSim();
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")));
  ASSERT_TRUE(Registered(kMinimal));
  for (int i = 0; i < 50; ++i) {
    const std::string tmp = plugin_dir() + "/.kubelet_internal_checkpoint.tmp" + std::to_string(i);
    WriteFile(tmp, "{}");
    std::rename(tmp.c_str(), (plugin_dir() + "/kubelet_internal_checkpoint").c_str());
    WriteFile(plugin_dir() + "/kubelet.sock.bak", "x");
    std::remove((plugin_dir() + "/kubelet.sock.bak").c_str());
  }
  std::this_thread::sleep_for(1500ms);
  auto r = sim_->resource(kMinimal);
  EXPECT_EQ(r->registrations, 1u);
  EXPECT_TRUE(r->connected);
}

TEST_F(AgentTest, SigtermStopsServingAndRemovesSockets) {
  for (int sig : {SIGTERM, SIGINT}) {
    StartSim();
    StartAgent(Resource(kKvm, "kvm", "shares = 1") +
               Resource(kMinimal, FakeModule("fake_minimal")));
    ASSERT_TRUE(Registered(kKvm));
    ASSERT_TRUE(Registered(kMinimal));
    const std::string kvm_sock = plugin_dir() + "/devplug-devices.kubevirt.io_kvm.sock";
    ASSERT_TRUE(FileExists(kvm_sock));
    std::optional<int> rc = agent_->Stop(sig, 10s);
    ASSERT_TRUE(rc.has_value()) << "no clean exit on signal " << sig;
    EXPECT_EQ(*rc, 0);
    EXPECT_FALSE(FileExists(kvm_sock));
    EXPECT_FALSE(FileExists(plugin_dir() + "/devplug-fake.example_minimal.sock"));
    ASSERT_TRUE(sim_->WaitUntil(
        [](const auto& rs) {
          for (const auto& [n, r] : rs)
            if (r.connected) return false;
          return true;
        },
        kWait));
    EXPECT_TRUE(FileExists(plugin_dir() + "/kubelet.sock"));  // not ours to remove
    EXPECT_NE(agent_->Log().find("stopped"), std::string::npos);
    sim_->Stop();
    sim_.reset();
    agent_.reset();
  }
}

TEST_F(AgentTest, DeviceNodeChangesReachTheKubeletOnResync) {
  if (!testing::IsRoot()) GTEST_SKIP() << "mknod needs root";
  ASSERT_TRUE(testing::MakeCharDevice(host_root() + "/dev/kvm", 10, 232));
  StartSim();
  StartAgent(Resource(kKvm, "kvm", "shares = 2"), "100ms");
  ASSERT_TRUE(Registered(kKvm));
  EXPECT_EQ(sim_->resource(kKvm)->healthy(), 2u);
  auto healthy_is = [&](size_t n) {
    return sim_->WaitUntil(
        [&](const auto& rs) {
          auto it = rs.find(kKvm);
          return it != rs.end() && it->second.connected && it->second.devices.size() == 2 &&
                 it->second.healthy() == n;
        },
        kWait);
  };
  std::remove((host_root() + "/dev/kvm").c_str());
  ASSERT_TRUE(healthy_is(0));
  ASSERT_TRUE(testing::MakeCharDevice(host_root() + "/dev/kvm", 10, 232));
  ASSERT_TRUE(healthy_is(2));
  // Still the first registration: a change is a new snapshot, not a new stream.
  EXPECT_EQ(sim_->resource(kKvm)->registrations, 1u);
  EXPECT_GE(sim_->resource(kKvm)->snapshots, 3u);
}

TEST_F(AgentTest, BrokenModulesCostOnlyTheirOwnResource) {
  StartSim();
  StartAgent(Resource("bad.example/missing", "/nonexistent/nothing.so") +
             Resource("bad.example/noentry", FakeModule("fake_noentry")) +
             Resource("bad.example/createfail", FakeModule("fake_createfail")) +
             Resource(kMinimal, FakeModule("fake_minimal")));
  ASSERT_TRUE(Registered(kMinimal));
  ASSERT_TRUE(agent_->WaitForLog("bad.example/createfail", kWait));
  const std::string log = agent_->Log();
  EXPECT_NE(log.find("resource \"bad.example/missing\" left out: module /nonexistent/nothing.so: "
                     "cannot load"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("resource \"bad.example/noentry\" left out: module " +
                     FakeModule("fake_noentry") + ": no devplug_module_entry_v1 symbol"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("the fake hardware is on fire"), std::string::npos) << log;
  EXPECT_EQ(sim_->resource_names(), std::vector<std::string>{kMinimal});
  EXPECT_TRUE(agent_->Running());
}

TEST_F(AgentTest, RequiredResourceFailureStopsStartup) {
  StartSim();
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")) +
             Resource("bad.example/createfail", FakeModule("fake_createfail"), "required = true"));
  std::optional<int> rc = agent_->Wait(kWait);
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 1);
  EXPECT_NE(agent_->Log().find("required resource \"bad.example/createfail\" failed"),
            std::string::npos)
      << agent_->Log();
  // Nothing is left behind.
  EXPECT_FALSE(FileExists(plugin_dir() + "/devplug-fake.example_minimal.sock"));
}

// A second devplugd with the same state folder (a DaemonSet's hostPath
// during a rolling update) serves beside the first as its successor,
// naming it, and sweeps nothing of the first one's; it holds the folder's
// lock once the first is gone, so that a third one knows of it.
TEST_F(AgentTest, ASecondAgentOnTheSameStateFolderServesBesideTheFirstAndTakesItsLockAfter) {
  StartSim();
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")));
  ASSERT_TRUE(Registered(kMinimal));
  const std::string lock = std::string(dir_ / "state") + "/devplugd.lock";
  AgentProcess second({"--config", config_path()});
  EXPECT_TRUE(Registered(kMinimal, 2)) << second.Log();
  EXPECT_EQ(sim_->resource(kMinimal)->endpoint, "devplug-fake.example_minimal.b.sock");
  EXPECT_TRUE(second.WaitForLog("another devplugd (pid " + std::to_string(agent_->pid()) +
                                    ") holds " + lock + ": serving beside it",
                                kWait))
      << second.Log();
  EXPECT_TRUE(FileExists(plugin_dir() + "/devplug-fake.example_minimal.sock"));
  EXPECT_EQ(testing::ReadFile(lock), std::to_string(agent_->pid()) + "\n");

  EXPECT_EQ(agent_->Stop(SIGTERM, 15s), std::optional<int>(0)) << agent_->Log();
  EXPECT_TRUE(second.WaitForLog("this one holds " + lock, kWait)) << second.Log();
  EXPECT_EQ(testing::ReadFile(lock), std::to_string(second.pid()) + "\n");
  EXPECT_TRUE(sim_->resource(kMinimal)->connected);
}

// A rolling update (maxSurge): the new devplugd starts while the old one
// serves, with state of its own (another pod). It serves beside it on the
// second socket name and registers; the kubelet calls the newer
// registration. The old one, stopped afterwards, fails no Allocate on the
// way; while both run, a kubelet restart is registered by the newer only.
TEST_F(AgentTest, ANewDevplugdTakesOverBesideTheOldOneWithoutAFailedAllocate) {
  StartSim();
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal"), "count = 2"));
  ASSERT_TRUE(Registered(kMinimal));
  const std::string first_socket = plugin_dir() + "/devplug-fake.example_minimal.sock";
  const std::string second_socket = plugin_dir() + "/devplug-fake.example_minimal.b.sock";

  // 100 Allocates a second, as pods admitted one after another.
  std::atomic<bool> stop{false}, paused{false};
  std::atomic<int> answered{0};
  std::vector<std::string> failures;
  std::thread allocates([&] {
    while (!stop) {
      if (paused) {
        std::this_thread::sleep_for(10ms);
        continue;
      }
      v1beta1::ContainerAllocateResponse resp;
      grpc::Status st = sim_->Allocate(kMinimal, {"fake-1"}, &resp);
      if (st.ok())
        ++answered;
      else
        failures.push_back(st.error_message());
      std::this_thread::sleep_for(10ms);
    }
  });
  ASSERT_TRUE(Eventually([&] { return answered >= 10; }));
  AgentProcess second({"--config", ConfigWithOwnState()});
  const bool took_over = Registered(kMinimal, 2);
  EXPECT_TRUE(took_over) << second.Log();
  EXPECT_EQ(sim_->resource(kMinimal)->endpoint, "devplug-fake.example_minimal.b.sock");
  EXPECT_TRUE(FileExists(first_socket));  // the old one still serves its own

  // A kubelet restart while both run (a kubelet admits no pod meanwhile):
  // only the newer registers; the older stands by.
  if (took_over) {
    paused = true;
    std::this_thread::sleep_for(50ms);
    ASSERT_TRUE(sim_->Restart(100ms).ok());
    ASSERT_TRUE(Registered(kMinimal, 3));
    EXPECT_TRUE(agent_->WaitForLog("standing by", kWait)) << agent_->Log();
    std::this_thread::sleep_for(2500ms);  // past the older one's looks
    EXPECT_EQ(sim_->resource(kMinimal)->registrations, 3u);
    EXPECT_EQ(sim_->resource(kMinimal)->endpoint, "devplug-fake.example_minimal.b.sock");
    paused = false;
  }

  // The DaemonSet stops the old pod once the new one is ready.
  EXPECT_EQ(agent_->Stop(SIGTERM, 15s), std::optional<int>(0)) << agent_->Log();
  const int at_stop = answered;
  EXPECT_TRUE(Eventually([&] { return answered >= at_stop + 30; }));
  stop = true;
  allocates.join();
  EXPECT_TRUE(failures.empty()) << failures.size()
                                << " failed Allocates, the first: " << failures.front();
  EXPECT_FALSE(FileExists(first_socket));
  EXPECT_TRUE(FileExists(second_socket));
  EXPECT_TRUE(sim_->resource(kMinimal)->connected);

  // The next update finds the first name free again and takes it.
  AgentProcess third({"--config", ConfigWithOwnState("state3")});
  EXPECT_TRUE(Registered(kMinimal, 4)) << third.Log();
  EXPECT_EQ(sim_->resource(kMinimal)->endpoint, "devplug-fake.example_minimal.sock");
  EXPECT_EQ(second.Stop(SIGTERM, 15s), std::optional<int>(0)) << second.Log();
  EXPECT_FALSE(FileExists(second_socket));
  EXPECT_EQ(third.Stop(SIGTERM, 15s), std::optional<int>(0)) << third.Log();
}

struct ConfigErrorCase {
  const char* name;
  const char* resources;       // appended to a valid [agent] table
  const char* expect;          // substring of the output, after the config path
  const char* agent_key = "";  // one more [agent] key, on line 8
};

void PrintTo(const ConfigErrorCase& c, std::ostream* os) { *os << c.name; }

class ConfigErrorTest : public AgentTest, public ::testing::WithParamInterface<ConfigErrorCase> {};

TEST_P(ConfigErrorTest, ExitsWithStatus78AndNamesTheProblem) {
  std::string resources = GetParam().resources;
  const std::string fake = FakeModule("fake_full");
  if (auto p = resources.find("@FAKE@"); p != std::string::npos) resources.replace(p, 6, fake);
  WriteFile(config_path(), Config(resources, "0s", GetParam().agent_key));
  testing::RunResult r = testing::RunDevplugd({"--config", config_path()});
  EXPECT_EQ(r.exit_code, 78) << r.output;
  EXPECT_NE(r.output.find(config_path() + GetParam().expect), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  // --check-config agrees.
  testing::RunResult c = testing::RunDevplugd({"--config", config_path(), "--check-config"});
  EXPECT_EQ(c.exit_code, 78) << c.output;
  EXPECT_NE(c.output.find(config_path() + GetParam().expect), std::string::npos) << c.output;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConfigErrorTest,
    ::testing::Values(
        ConfigErrorCase{"toml_syntax", "[[resource]\nname = 1\n", ":10: TOML syntax error"},
        ConfigErrorCase{"bad_name", "[[resource]]\nname = \"gpu\"\nmodule = \"kvm\"\n",
                        ":11: resource[0].name: \"gpu\" is not a valid extended resource name"},
        ConfigErrorCase{"module_key_unknown",
                        "[[resource]]\nname = \"a.example/k\"\nmodule = \"kvm\"\nsharez = 3\n",
                        ":13: resource[0].sharez: unknown key for module \"kvm\""},
        ConfigErrorCase{"module_key_value",
                        "[[resource]]\nname = \"a.example/k\"\nmodule = \"kvm\"\nshares = -1\n",
                        ":13: resource[0].shares: must be between 1 and 100000"},
        ConfigErrorCase{"module_key_type",
                        "[[resource]]\nname = \"a.example/f\"\nmodule = \"@FAKE@\"\ncount = true\n",
                        ":13: resource[0].count: must be an integer"},
        ConfigErrorCase{"no_resources", "", ": no [[resource]] table"},
        ConfigErrorCase{"duration_overflow",
                        "[[resource]]\nname = \"a.example/k\"\nmodule = \"kvm\"\n",
                        ":8: agent.start_timeout: \"3000000h\" is over the maximum of 10m",
                        "start_timeout = \"3000000h\""}),
    [](const ::testing::TestParamInfo<ConfigErrorCase>& info) { return info.param.name; });

// Mistakes in several resources' module keys, found at load and at create():
// devplugd names every one in one go, as --check-config does.
TEST_F(AgentTest, EveryResourcesModuleKeyMistakeIsReportedAtStart) {
  WriteFile(config_path(),
            Config(Resource("a.example/k", "kvm", "sharez = 3") +
                   Resource("b.example/k", "kvm", "shares = -1") +
                   Resource("c.example/f", FakeModule("fake_full"), "count = true")));
  for (const char* check : {"", "--check-config"}) {
    std::vector<std::string> args{"--config", config_path()};
    if (*check) args.push_back(check);
    testing::RunResult r = testing::RunDevplugd(args);
    EXPECT_EQ(r.exit_code, 78) << r.output;
    for (const char* want : {"resource[0].sharez: unknown key", "resource[1].shares: must be",
                             "resource[2].count: must be an integer"})
      EXPECT_NE(r.output.find(want), std::string::npos) << check << ": " << want << "\n"
                                                        << r.output;
  }
}

// Once all keys load, every module's own create-time mistakes are named too.
TEST_F(AgentTest, EveryCreateTimeConfigMistakeIsReportedAtStart) {
  WriteFile(config_path(),
            Config(Resource("c.example/f", FakeModule("fake_full"), "late_config_error = true") +
                   Resource("d.example/f", FakeModule("fake_full"), "late_config_error = true")));
  testing::RunResult r = testing::RunDevplugd({"--config", config_path()});
  EXPECT_EQ(r.exit_code, 78) << r.output;
  // In the error devplugd exits with, not only in the log lines before it.
  const size_t at = r.output.find("devplugd: configuration error:");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resource[0].count", at), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resource[1].count", at), std::string::npos) << r.output;
}

TEST_F(AgentTest, CommandLineOverridesAreCheckedLikeTheFile) {
  WriteFile(config_path(), Config(Resource(kKvm, "kvm")));
  testing::RunResult r =
      testing::RunDevplugd({"--config", config_path(), "--plugin-dir", "/" + std::string(89, 'p')});
  EXPECT_EQ(r.exit_code, 78) << r.output;
  EXPECT_NE(r.output.find(config_path() +
                          ":10: resource[0].socket: "
                          "\"devplug-devices.kubevirt.io_kvm.sock\": with plugin_dir the path is "
                          "127 bytes"),
            std::string::npos)
      << r.output;
  r = testing::RunDevplugd({"--config", config_path(), "--host-root", "host", "--check-config"});
  EXPECT_EQ(r.exit_code, 78) << r.output;
  EXPECT_NE(r.output.find("command line: --host-root: must be an absolute path, got \"host\""),
            std::string::npos)
      << r.output;
}

TEST(DevplugdCliTest, MissingConfigExits78) {
  testing::RunResult r = testing::RunDevplugd({"--config", "/nonexistent/devplug.toml"});
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_NE(r.output.find("/nonexistent/devplug.toml: cannot open: No such file or directory"),
            std::string::npos)
      << r.output;
}

TEST(DevplugdCliTest, VersionHelpAndUsage) {
  testing::RunResult v = testing::RunDevplugd({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.output.find("devplugd "), std::string::npos);
  testing::RunResult h = testing::RunDevplugd({"--help"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.output.find("--check-config"), std::string::npos);
  testing::RunResult u = testing::RunDevplugd({"--no-such-flag"});
  EXPECT_EQ(u.exit_code, 64) << u.output;
}

TEST(DevplugdCliTest, CheckConfigPrintsResolvedResources) {
  TempDir dir;
  WriteFile(dir / "devplug.toml",
            "[agent]\nplugin_dir = \"/tmp/dp\"\nmodule_dir = \"" + testing::ModuleDir() +
                "\"\n[[resource]]\nname = \"devices.kubevirt.io/kvm\"\nmodule = \"kvm\"\n");
  WriteFile(dir / "conf.d/10-more.toml",
            "[[resource]]\nname = \"example.com/kvm2\"\nmodule = \"kvm\"\nshares = 5\n");
  testing::RunResult r = testing::RunDevplugd({"--config", dir / "devplug.toml", "--check-config"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("- devices.kubevirt.io/kvm"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("socket: /tmp/dp/devplug-example.com_kvm2.sock"), std::string::npos);
  EXPECT_NE(r.output.find("defined: " + dir / "conf.d/10-more.toml:1"), std::string::npos);
  EXPECT_NE(r.output.find("configuration ok"), std::string::npos);
}

}  // namespace
}  // namespace devplug
