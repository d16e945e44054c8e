// Probe-based registration (registration = "plugin-watcher"): devplugd
// serves Registration and DevicePlugin on one socket in plugins_registry,
// and the simulator's plugin watcher finds, probes and connects it, as the
// kubelet's plugin manager does. Everything that holds for kubelet.sock
// registration is checked here too: restarts, streams the kubelet ends,
// sockets removed behind our back, reloads, exit, a second agent.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "agent_fixture.h"

namespace devplug {
namespace {

constexpr char kWatched[] = "fake.example/watched";
constexpr char kDirect[] = "fake.example/direct";

using testing::FileIdentity;

class PluginWatcherTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    sim_plugins_registry_ = registry();
    sim_reconcile_period_ = std::chrono::milliseconds(200);
  }
  std::string registry() const { return dir_ / "plugins_registry"; }
  std::string socket(const char* name = kWatched) const {
    std::string s = std::string("devplug-") + name + ".sock";
    s.replace(s.find('/'), 1, "_");
    return registry() + "/" + s;
  }
  std::string Watched(const std::string& extra = "") const {
    return "registration = \"plugin-watcher\"\nplugins_registry_dir = \"" + registry() + "\"" +
           extra;
  }
  // The resource's entry in `devplugctl status --json`.
  nlohmann::json Status(const char* name = kWatched) {
    auto r = testing::RunProcess(
        {testing::DevplugctlPath(), "status", "--json", "--socket", control_socket()});
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    if (j.is_object())
      for (const auto& res : j.value("resources", nlohmann::json::array()))
        if (res.value("name", "") == name) return res;
    ADD_FAILURE() << r.output;
    return {};
  }
};

TEST_F(PluginWatcherTest, RegistersThroughPluginsRegistryAndServesAllocate) {
  StartSim();
  StartAgent(Resource(kWatched, FakeModule("fake_minimal")), "0s", Watched());
  ASSERT_TRUE(Registered(kWatched));
  ASSERT_TRUE(AgentRegistered(kWatched));
  const auto view = sim_->resource(kWatched);
  EXPECT_EQ(view->via, sim::kViaPluginsRegistry);
  EXPECT_EQ(view->endpoint, socket());
  EXPECT_EQ(view->probes, 1u);
  EXPECT_FALSE(FileExists(plugin_dir() + "/devplug-fake.example_watched.sock"))
      << "a socket in the device-plugins folder too";
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kWatched, {view->devices.at(0).id()}, &resp).ok());

  const auto status = Status();
  EXPECT_EQ(status.value("registration", ""), "plugin-watcher") << status;
  EXPECT_EQ(status.value("socket", ""), socket());
  EXPECT_EQ(status["kubelet_status"], (nlohmann::json{{"registered", true}, {"error", nullptr}}))
      << status;
  EXPECT_EQ(Metric("devplug_registrations_total{resource=\"fake.example/watched\"} "), 1);
  EXPECT_NE(agent_->Log().find("registered with the kubelet through its plugin watcher"),
            std::string::npos);
}

// The kubelet restarts: it wipes the device-plugins folder, not
// plugins_registry, and its watcher probes the same socket again. devplugd
// does nothing: the socket is the very same file.
TEST_F(PluginWatcherTest, AKubeletRestartCostsDevplugdNothing) {
  StartSim();
  StartAgent(Resource(kWatched, FakeModule("fake_minimal")), "0s", Watched());
  ASSERT_TRUE(Registered(kWatched));
  const auto before = FileIdentity(socket());
  ASSERT_TRUE(before);
  ASSERT_TRUE(sim_->Restart(std::chrono::milliseconds(300)).ok());
  ASSERT_TRUE(Registered(kWatched, 2));
  EXPECT_EQ(FileIdentity(socket()), before) << "the socket was made anew";
  EXPECT_EQ(sim_->resource(kWatched)->probes, 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));  // past the re-probe check
  EXPECT_EQ(FileIdentity(socket()), before);
  EXPECT_EQ(sim_->resource(kWatched)->registrations, 2u);
  EXPECT_EQ(agent_->Log().find("serving " + socket() + " anew"), std::string::npos)
      << agent_->Log();
}

// The kubelet ends our stream and keeps running: its watcher would never
// probe again, so devplugd serves the socket anew.
TEST_F(PluginWatcherTest, AStreamEndedByARunningKubeletIsProbedAgain) {
  StartSim();
  StartAgent(Resource(kWatched, FakeModule("fake_minimal")), "0s", Watched());
  ASSERT_TRUE(Registered(kWatched));
  sim_->DropConnections();
  ASSERT_TRUE(Registered(kWatched, 2));
  EXPECT_TRUE(agent_->WaitForLog("serving " + socket() + " anew", kWait));
}

// Our socket removed behind our back: the kubelet deregisters us; devplugd
// serves it again and the watcher probes the new one.
TEST_F(PluginWatcherTest, ASocketRemovedBehindOurBackIsServedAgain) {
  StartSim();
  StartAgent(Resource(kWatched, FakeModule("fake_minimal")), "0s", Watched());
  ASSERT_TRUE(Registered(kWatched));
  ASSERT_EQ(unlink(socket().c_str()), 0);
  ASSERT_TRUE(Registered(kWatched, 2))
      << sim_->resource(kWatched)->registrations << " " << sim_->resource(kWatched)->connected
      << " " << sim_->resource(kWatched)->stream_snapshots;
  EXPECT_TRUE(FileExists(socket()));
  EXPECT_TRUE(HealthyIs(kWatched, 4, 4));
}

// One resource through kubelet.sock, one through the plugin watcher: each
// on its own path, never both for one resource (the simulator would call
// that a violation).
TEST_F(PluginWatcherTest, ModesMixPerResource) {
  StartSim();
  StartAgent(
      Resource(kDirect, FakeModule("fake_minimal")) +
          Resource(kWatched, FakeModule("fake_minimal"), "registration = \"plugin-watcher\""),
      "0s", "plugins_registry_dir = \"" + registry() + "\"");
  ASSERT_TRUE(Registered(kDirect));
  ASSERT_TRUE(Registered(kWatched));
  EXPECT_EQ(sim_->resource(kDirect)->via, sim::kViaKubeletSock);
  EXPECT_EQ(sim_->resource(kWatched)->via, sim::kViaPluginsRegistry);
  EXPECT_TRUE(FileExists(plugin_dir() + "/devplug-fake.example_direct.sock"));
  EXPECT_FALSE(FileExists(registry() + "/devplug-fake.example_direct.sock"));
}

// A reload that moves a resource to the plugin watcher touches only it: it
// leaves the device-plugins folder and registers through plugins_registry.
TEST_F(PluginWatcherTest, AReloadMovesOneResourceToThePluginWatcher) {
  StartSim();
  const std::string agent_keys = "plugins_registry_dir = \"" + registry() + "\"";
  StartAgent(Resource(kDirect, FakeModule("fake_minimal")) +
                 Resource(kWatched, FakeModule("fake_minimal")),
             "0s", agent_keys);
  ASSERT_TRUE(Registered(kDirect));
  ASSERT_TRUE(Registered(kWatched));
  const auto direct = FileIdentity(plugin_dir() + "/devplug-fake.example_direct.sock");
  WriteFile(config_path(), Config(Resource(kDirect, FakeModule("fake_minimal")) +
                                      Resource(kWatched, FakeModule("fake_minimal"),
                                               "registration = \"plugin-watcher\""),
                                  "0s", agent_keys));
  ASSERT_TRUE(Reload());
  ASSERT_TRUE(sim_->WaitUntil(
      [](const auto& rs) {
        auto it = rs.find(kWatched);
        return it != rs.end() && it->second.connected && it->second.via == sim::kViaPluginsRegistry;
      },
      kWait))
      << agent_->Log();
  EXPECT_FALSE(FileExists(plugin_dir() + "/devplug-fake.example_watched.sock"));
  EXPECT_EQ(FileIdentity(plugin_dir() + "/devplug-fake.example_direct.sock"), direct);
  EXPECT_EQ(sim_->resource(kDirect)->registrations, 1u);
}

// The kubelet refuses the registration: the reason is in the log, the
// status and the metrics; devplugd keeps serving for the kubelet's retries.
TEST_F(PluginWatcherTest, ARefusalIsLoggedShownAndCounted) {
  sim_refuse_probes_ = "no room for it";
  StartSim();
  StartAgent(Resource(kWatched, FakeModule("fake_minimal")), "0s", Watched());
  ASSERT_TRUE(
      agent_->WaitForLog("the kubelet refused the registration: RegisterPlugin error -- "
                         "plugin registration failed with err: no room for it",
                         kWait))
      << agent_->Log();
  const auto status = Status();
  EXPECT_FALSE(status.value("registered", true)) << status;
  EXPECT_EQ(status["kubelet_status"]["registered"], false) << status;
  EXPECT_NE(status["kubelet_status"].value("error", "").find("no room for it"), std::string::npos)
      << status;
  EXPECT_GE(Metric("devplug_registration_refusals_total{resource=\"fake.example/watched\"} "), 1);
  auto text =
      testing::RunProcess({testing::DevplugctlPath(), "status", "--socket", control_socket()});
  EXPECT_NE(text.output.find("refused: RegisterPlugin error"), std::string::npos) << text.output;
  EXPECT_TRUE(FileExists(socket()));
}

// At exit the socket goes (the kubelet deregisters the plugin); a second
// agent cannot take a socket name a live one serves.
TEST_F(PluginWatcherTest, ExitRemovesTheSocketAndASecondAgentCannotTakeIt) {
  StartSim();
  StartAgent(Resource(kWatched, FakeModule("fake_minimal")), "0s", Watched());
  ASSERT_TRUE(Registered(kWatched));
  AgentProcess second({"--config", ConfigWithOwnState()});
  ASSERT_TRUE(second.WaitForLog("is served by another process", kWait)) << second.Log();
  EXPECT_EQ(second.Stop(SIGTERM, std::chrono::seconds(10)), std::optional<int>(0));
  EXPECT_TRUE(FileExists(socket()));
  EXPECT_EQ(sim_->resource(kWatched)->registrations, 1u);
  EXPECT_EQ(agent_->Stop(SIGTERM, std::chrono::seconds(15)), std::optional<int>(0));
  EXPECT_FALSE(FileExists(socket()));
  EXPECT_TRUE(sim_->WaitUntil([](const auto& rs) { return !rs.at(kWatched).connected; }, kWait));
}

// Sockets a killed devplugd left for resources it no longer has would be
// probed by the kubelet's plugin watcher for ever: removed at start. Live
// ones (another agent's) and other programs' sockets are left alone.
TEST_F(PluginWatcherTest, SocketsAnEarlierAgentLeftAreRemovedAtStart) {
  std::filesystem::create_directories(registry());
  std::filesystem::create_directories(plugin_dir());
  const std::string stale_registry = registry() + "/devplug-old.example_gone.sock";
  const std::string stale_plugins = plugin_dir() + "/devplug-old.example_gone.sock";
  const std::string foreign = registry() + "/sriov.sock";
  const std::string live = registry() + "/devplug-other.example_live.sock";
  ASSERT_TRUE(testing::LeaveDeadUnixSocket(stale_registry));
  ASSERT_TRUE(testing::LeaveDeadUnixSocket(stale_plugins));
  ASSERT_TRUE(testing::LeaveDeadUnixSocket(foreign));
  ASSERT_TRUE(testing::LeaveDeadUnixSocket(socket()));  // our own, from before: served again
  const int live_fd = testing::ListenUnix(live);
  ASSERT_GE(live_fd, 0);
  StartSim();
  StartAgent(Resource(kWatched, FakeModule("fake_minimal")), "0s", Watched());
  ASSERT_TRUE(Registered(kWatched));
  EXPECT_FALSE(FileExists(stale_registry));
  EXPECT_FALSE(FileExists(stale_plugins));
  EXPECT_TRUE(FileExists(foreign));
  EXPECT_TRUE(FileExists(live));
  EXPECT_TRUE(agent_->WaitForLog("removed " + stale_registry, kWait));
  close(live_fd);
}

// plugins_registry removed and made again: devplugd serves its socket in
// the new folder and watches that folder, so a later removal of its socket
// is noticed and served again too. (The check is on the socket file: the
// simulator's own watch, like the kubelet's, dies with the folder.)
TEST_F(PluginWatcherTest, ARegistryFolderMadeAnewIsWatchedAgain) {
  StartSim();
  StartAgent(Resource(kWatched, FakeModule("fake_minimal")), "0s", Watched());
  ASSERT_TRUE(Registered(kWatched));
  std::filesystem::remove_all(registry());
  std::this_thread::sleep_for(2s);
  std::filesystem::create_directories(registry());
  ASSERT_TRUE(Eventually([&] { return FileExists(socket()); })) << "not served in the new folder";
  const auto served = testing::FileIdentity(socket());
  ASSERT_EQ(unlink(socket().c_str()), 0);
  ASSERT_TRUE(Eventually([&] { return FileExists(socket()); }))
      << "a removal in the new folder went unnoticed";
  EXPECT_NE(testing::FileIdentity(socket()), served);
}

// No resource uses the plugin watcher now, but a killed devplugd that did
// left its dead socket in plugins_registry: swept at start all the same.
TEST_F(PluginWatcherTest, TheRegistryIsSweptWhenNoResourceUsesIt) {
  std::filesystem::create_directories(registry());
  const std::string stale = registry() + "/devplug-fake.example_watched.sock";
  ASSERT_TRUE(testing::LeaveDeadUnixSocket(stale));
  StartSim();
  StartAgent(Resource(kDirect, FakeModule("fake_minimal")), "0s",
             "plugins_registry_dir = \"" + registry() + "\"");
  ASSERT_TRUE(Registered(kDirect));
  EXPECT_FALSE(FileExists(stale));
  EXPECT_TRUE(agent_->WaitForLog("removed " + stale, kWait)) << agent_->Log();
}

// Another process binds our socket's name after ours was removed: devplugd
// never serves there. It takes the other process for a newer devplugd (a
// rolling update's): serves beside it on the second name, stands by while
// it lives and says so in status; neither re-serving nor its exit removes
// the other process's live socket.
TEST_F(PluginWatcherTest, AnotherProcesssSocketAtOurNameIsNeverRemoved) {
  StartSim();
  StartAgent(Resource(kDirect, FakeModule("fake_minimal")), "0s");
  ASSERT_TRUE(Registered(kDirect));
  const std::string path = plugin_dir() + "/devplug-fake.example_direct.sock";
  ASSERT_TRUE(FileExists(path));
  ASSERT_EQ(unlink(path.c_str()), 0);
  const int other = testing::ListenUnix(path);
  ASSERT_GE(other, 0);
  const auto theirs = testing::FileIdentity(path);
  ASSERT_TRUE(agent_->WaitForLog("standing by", kWait)) << agent_->Log();
  EXPECT_EQ(testing::FileIdentity(path), theirs) << "devplugd removed the other socket";
  EXPECT_TRUE(Eventually([&] {
    return Status(kDirect).value("state", "").find("standing by") != std::string::npos;
  })) << Status(kDirect);
  EXPECT_TRUE(FileExists(plugin_dir() + "/devplug-fake.example_direct.b.sock"));
  EXPECT_EQ(agent_->Stop(SIGTERM, 15s), std::optional<int>(0));
  EXPECT_EQ(testing::FileIdentity(path), theirs) << "devplugd's exit removed the other socket";
  close(other);
}

}  // namespace
}  // namespace devplug
