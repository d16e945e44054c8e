// SIGHUP reload (docs/design.md, "Reload, status, metrics"): what did not change keeps serving
// untouched, what changed restarts alone, and any mistake keeps the old
// configuration running. The kubelet simulator counts every registration and
// every stream end, so "untouched" is measured, not assumed.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "agent_fixture.h"
#include "config/config_watch.h"

namespace devplug {
namespace {

class ReloadTest : public AgentTest {
 protected:
  void Rewrite(const std::string& resources, const std::string& extra = "") {
    WriteFile(config_path(), Config(resources, "0s", extra));
  }

  // Registrations and stream ends the kubelet saw for `name`.
  std::pair<uint64_t, uint64_t> Seen(const std::string& name) {
    auto r = sim_->resource(name);
    return r ? std::make_pair(r->registrations, r->stream_ends) : std::make_pair(0ul, 0ul);
  }

  testing::RunResult Status(std::vector<std::string> args = {}) {
    std::vector<std::string> argv{testing::DevplugctlPath(), "status", "--socket",
                                  control_socket()};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::RunProcess(argv);
  }
};

// Nothing changed (the same tables, moved and commented): no stream ends, no
// registration, and the kubelet's view stays as it was.
TEST_F(ReloadTest, AnUnchangedConfigurationTouchesNothing) {
  StartSim();
  const std::string full = Resource(kFull, FakeModule("fake_full"), "count = 2");
  const std::string minimal = Resource(kMinimal, FakeModule("fake_minimal"));
  StartAgent(full + minimal);
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(Registered(kMinimal));
  ASSERT_TRUE(HealthyIs(kFull, 2, 2));
  Rewrite("# the same, in another order\n" + minimal + full);
  ASSERT_TRUE(Reload()) << agent_->Log();
  EXPECT_TRUE(
      agent_->WaitForLog("reloaded: 2 unchanged; added: none; changed: none; removed: none", kWait))
      << agent_->Log();
  EXPECT_EQ(Seen(kFull), std::make_pair(1ul, 0ul));
  EXPECT_EQ(Seen(kMinimal), std::make_pair(1ul, 0ul));
  EXPECT_TRUE(HealthyIs(kFull, 2, 2));
  // A second SIGHUP with nothing new is as quiet.
  ASSERT_TRUE(Reload());
  EXPECT_EQ(Seen(kFull), std::make_pair(1ul, 0ul));
  EXPECT_EQ(Seen(kMinimal), std::make_pair(1ul, 0ul));
}

// One reload that adds, removes and changes a resource and keeps one.
TEST_F(ReloadTest, AddedRemovedAndChangedResourcesAndOnlyThose) {
  StartSim();
  const std::string kept = Resource(kFull, FakeModule("fake_full"), "count = 2");
  const std::string changed = "fake.example/changed", added = "fake.example/added";
  StartAgent(kept + Resource(kMinimal, FakeModule("fake_minimal")) +
             Resource(changed, FakeModule("fake_full"), "count = 1"));
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(Registered(kMinimal));
  ASSERT_TRUE(HealthyIs(changed, 1, 1));
  const std::string removed_socket = plugin_dir() + "/" + sim_->resource(kMinimal)->endpoint;
  ASSERT_TRUE(FileExists(removed_socket));

  Rewrite(kept + Resource(changed, FakeModule("fake_full"), "count = 3") +
          Resource(added, FakeModule("fake_full"), "count = 1"));
  ASSERT_TRUE(Reload()) << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog(
      "reloaded: 1 unchanged; added: " + added + "; changed: " + changed + "; removed: " + kMinimal,
      kWait))
      << agent_->Log();
  // Changed: its old stream ended, it registered again with its new list.
  ASSERT_TRUE(Registered(changed, 2));
  EXPECT_TRUE(HealthyIs(changed, 3, 3));
  EXPECT_EQ(Seen(changed).second, 1u);
  // Added: served and registered like at start.
  ASSERT_TRUE(Registered(added));
  EXPECT_TRUE(HealthyIs(added, 1, 1));
  // Removed: its stream ended and its socket is gone.
  EXPECT_TRUE(sim_->WaitUntil([&](const auto& rs) { return !rs.at(kMinimal).connected; }, kWait));
  EXPECT_EQ(Seen(kMinimal), std::make_pair(1ul, 1ul));
  EXPECT_FALSE(FileExists(removed_socket));
  // Kept: not touched.
  EXPECT_EQ(Seen(kFull), std::make_pair(1ul, 0ul));
  EXPECT_TRUE(HealthyIs(kFull, 2, 2));
  // Its series are gone from the metrics; the others are there.
  auto metrics =
      testing::RunProcess({testing::DevplugctlPath(), "metrics", "--socket", control_socket()});
  ASSERT_EQ(metrics.exit_code, 0) << metrics.output;
  EXPECT_EQ(metrics.output.find("resource=\"" + std::string(kMinimal) + "\""), std::string::npos)
      << metrics.output;
  EXPECT_NE(metrics.output.find("resource=\"" + added + "\""), std::string::npos) << metrics.output;
  EXPECT_NE(metrics.output.find("devplug_reloads_total{result=\"ok\"} 1"), std::string::npos)
      << metrics.output;
}

// Every kind of mistake: the reload is refused as a whole, the journal names
// the problem, STATUS= and devplugctl status say so, and nothing that served
// stops serving. A later good reload clears the error.
TEST_F(ReloadTest, AnyMistakeKeepsTheOldConfigurationRunning) {
  StartSim();
  NotifySocket notify(dir_ / "notify.sock");
  setenv("NOTIFY_SOCKET", (dir_ / "notify.sock").c_str(), 1);
  const std::string full = Resource(kFull, FakeModule("fake_full"), "count = 2");
  StartAgent(full);
  unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(AgentRegistered(kFull));
  ASSERT_TRUE(notify.WaitFor("READY=1", kWait));
  const std::string dropin = dir_ / "etc/conf.d/broken.toml";

  struct Case {
    const char* what;
    std::function<void()> write;
    std::string error;  // the first error line, as STATUS= shows it
  } cases[] = {
      {"a drop-in without a module key",
       [&] { WriteFile(dropin, "[[resource]]\nname = \"fake.example/broken\"\n"); },
       dropin + ":1: resource[1].module: missing"},
      {"a module that cannot be created",
       [&] { Rewrite(full + Resource("fake.example/fire", FakeModule("fake_createfail"))); },
       "the fake hardware is on fire"},
      {"a module file that does not exist",
       [&] { Rewrite(full + Resource("fake.example/gone", dir_ / "gone.so")); }, "cannot load"},
      {"a key that needs a restart",
       [&] {
         std::string text = Config(full);
         text.replace(text.find(plugin_dir()), plugin_dir().size(), dir_ / "elsewhere");
         WriteFile(config_path(), text);
       },
       config_path() + ":2: agent.plugin_dir: changed from \"" + plugin_dir() + "\" to \"" +
           (dir_ / "elsewhere") + "\": needs a restart"},
      {"a bad value of a key that applies at once", [&] { Rewrite(full, "call_timeout = \"2h\""); },
       config_path() + ":8: agent.call_timeout:"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    notify.Clear();
    c.write();
    ASSERT_FALSE(Reload()) << agent_->Log();
    EXPECT_TRUE(notify.WaitFor(c.error, kWait)) << notify.all();
    EXPECT_NE(notify.all().find("RELOADING=1\nMONOTONIC_USEC="), std::string::npos) << notify.all();
    EXPECT_NE(notify.all().find("STATUS=registered 1/1 resources; reload failed (old "
                                "configuration kept): "),
              std::string::npos)
        << notify.all();
    EXPECT_TRUE(notify.WaitFor("READY=1", kWait)) << notify.all();
    EXPECT_TRUE(agent_->WaitForLog(c.error, kWait)) << agent_->Log();
    auto status = Status();
    EXPECT_EQ(status.exit_code, 0) << status.output;
    EXPECT_NE(status.output.find("reload failed (old configuration kept): "), std::string::npos)
        << status.output;
    EXPECT_EQ(Seen(kFull), std::make_pair(1ul, 0ul));
    EXPECT_TRUE(HealthyIs(kFull, 2, 2));
    // Back to the good configuration for the next case.
    std::filesystem::remove(dropin);
    Rewrite(full);
  }
  notify.Clear();
  ASSERT_TRUE(Reload()) << agent_->Log();
  auto status = Status({"--json"});
  EXPECT_NE(status.output.find("\"reload_error\": null"), std::string::npos) << status.output;
  EXPECT_TRUE(notify.WaitFor("STATUS=registered 1/1 resources\n", kWait)) << notify.all();
  auto metrics =
      testing::RunProcess({testing::DevplugctlPath(), "metrics", "--socket", control_socket()});
  EXPECT_NE(metrics.output.find("devplug_reloads_total{result=\"failed\"} 5"), std::string::npos)
      << metrics.output;
}

// An added module that never finishes create() does not hold the agent: the
// reload gives up at start_timeout and the old configuration keeps running.
// Modules see prestart_timeout at create() (ABI 1.4): a change re-creates
// the resources that take PreStartContainer calls, and only those, so a
// module can refuse a deadline its own work does not fit in.
TEST_F(ReloadTest, APrestartTimeoutChangeRecreatesOnlyResourcesWithPreStart) {
  const std::string full = Resource(kFull, FakeModule("fake_full"), "log_host = true") +
                           Resource(kMinimal, FakeModule("fake_minimal"));
  StartSim();
  StartAgent(full);
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(Registered(kMinimal));
  ASSERT_TRUE(agent_->WaitForLog("prestart_timeout_ms=28000 resource_index=0", kWait));
  Rewrite(full, "prestart_timeout = \"20s\"");
  ASSERT_TRUE(Reload()) << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog("prestart_timeout_ms=20000 resource_index=0", kWait));
  EXPECT_TRUE(agent_->WaitForLog("changed: fake.example/full;", kWait)) << agent_->Log();
  ASSERT_TRUE(Registered(kFull, 2));
  EXPECT_EQ(Seen(kMinimal).first, 1u);
  // An fpga region resource whose program_timeout no longer fits: refused,
  // the old configuration keeps running.
  const std::string fpga =
      full + Resource("fpga.example.com/nlb3", FakeModule("fpga-opae-fixture"),
                      "mode = \"region\"\nafu_id = \"f7df405cbd7acf7222f144b0b93acd18\"\n"
                      "program_timeout = \"18s\"");
  Rewrite(fpga, "prestart_timeout = \"20s\"");
  ASSERT_TRUE(Reload()) << agent_->Log();
  Rewrite(fpga, "prestart_timeout = \"15s\"");
  ASSERT_FALSE(Reload());
  EXPECT_TRUE(
      agent_->WaitForLog("program_timeout: \"18s\" must be shorter than the agent's "
                         "prestart_timeout (15s)",
                         kWait))
      << agent_->Log();
  EXPECT_EQ(Seen(kFull).first, 2u);
}

TEST_F(ReloadTest, AHungCreateFailsTheReloadAtItsDeadline) {
  StartSim();
  const std::string full = Resource(kFull, FakeModule("fake_full"), "count = 2");
  StartAgent(full, "0s", "start_timeout = \"1s\"");
  ASSERT_TRUE(Registered(kFull));
  WriteFile(config_path(), Config(full + Resource("fake.example/hung", FakeModule("fake_full"),
                                                  "hang_create = true"),
                                  "0s", "start_timeout = \"1s\""));
  // One reload at a time: a SIGHUP while one is under way runs once that
  // one ends (its files may be newer than what the first one read).
  ASSERT_EQ(kill(agent_->pid(), SIGHUP), 0);
  ASSERT_TRUE(agent_->WaitForLog("SIGHUP: reloading the configuration", kWait));
  ASSERT_FALSE(Reload()) << agent_->Log();
  EXPECT_NE(
      agent_->Log().find("SIGHUP: a reload is already under way; reloading again once it ends"),
      std::string::npos)
      << agent_->Log();
  ASSERT_TRUE(Eventually([&] {
    return Count(agent_->Log(), "reload failed, the old configuration keeps running") == 2;
  })) << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog("fake.example/hung", kWait));
  EXPECT_EQ(Seen(kFull), std::make_pair(1ul, 0ul));
  // Serving as before: Allocate still works.
  v1beta1::ContainerAllocateResponse resp;
  EXPECT_TRUE(sim_->Allocate(kFull, {"fake-0"}, &resp).ok());
  EXPECT_FALSE(sim_->resource("fake.example/hung").has_value());
}

// A module file replaced on disk (a package upgrade of one module): that
// resource alone restarts, on the new file.
TEST_F(ReloadTest, AReplacedModuleFileRestartsOnlyItsResource) {
  StartSim();
  const std::string module = dir_ / "modules/fake.so";
  std::filesystem::create_directories(dir_ / "modules");
  std::filesystem::copy_file(FakeModule("fake_full"), module);
  const std::string both =
      Resource(kFull, module, "count = 2") + Resource(kMinimal, FakeModule("fake_minimal"));
  StartAgent(both);
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(Registered(kMinimal));
  ASSERT_TRUE(Reload());  // the same file: nothing happens
  EXPECT_EQ(Seen(kFull), std::make_pair(1ul, 0ul));

  // Replaced the way package managers do: a new file renamed over the old.
  std::filesystem::copy_file(FakeModule("fake_full_v2"), module + ".new");
  std::filesystem::rename(module + ".new", module);
  ASSERT_TRUE(Reload()) << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog("module file " + module + " was replaced", kWait));
  EXPECT_TRUE(agent_->WaitForLog("changed: " + std::string(kFull) + "; removed: none", kWait));
  ASSERT_TRUE(Registered(kFull, 2));
  EXPECT_TRUE(HealthyIs(kFull, 2, 2));
  EXPECT_EQ(Seen(kMinimal), std::make_pair(1ul, 0ul));
  auto status = Status({"--json", kFull});
  EXPECT_NE(status.output.find("\"module_version\": \"0.0.2\""), std::string::npos)
      << status.output;
}

// [agent] keys that apply at once: a shorter call_timeout cuts the next slow
// Allocate short.
TEST_F(ReloadTest, CallTimeoutAppliesAtOnce) {
  StartSim();
  const std::string slow = Resource(kFull, FakeModule("fake_full"), "allocate_delay_ms = 1000");
  StartAgent(slow);
  ASSERT_TRUE(Registered(kFull));
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kFull, {"fake-0"}, &resp).ok());
  Rewrite(slow, "call_timeout = \"100ms\"");
  ASSERT_TRUE(Reload()) << agent_->Log();
  EXPECT_EQ(sim_->Allocate(kFull, {"fake-1"}, &resp).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(Seen(kFull), std::make_pair(1ul, 0ul));
}

// An Allocate in flight on a resource that a reload restarts ends with
// UNAVAILABLE at once, not after the old module's answer; the new instance
// serves the next one. (The kubelet does not retry admission: that pod
// fails for good, which is why a reload restarts only what changed.)
TEST_F(ReloadTest, ACallInFlightOnARestartedResourceEndsCleanly) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "allocate_delay_ms = 1500"));
  ASSERT_TRUE(Registered(kFull));
  grpc::Status in_flight;
  std::thread call([&] {
    v1beta1::ContainerAllocateResponse resp;
    in_flight = sim_->Allocate(kFull, {"fake-0"}, &resp);
  });
  ASSERT_TRUE(agent_->WaitForLog("allocate() sleeps now", kWait));
  Rewrite(Resource(kFull, FakeModule("fake_full"), "count = 3"));
  EXPECT_TRUE(Reload()) << agent_->Log();
  call.join();
  EXPECT_EQ(in_flight.error_code(), grpc::StatusCode::UNAVAILABLE) << in_flight.error_message();
  ASSERT_TRUE(Registered(kFull, 2));
  ASSERT_TRUE(HealthyIs(kFull, 3, 3));
  v1beta1::ContainerAllocateResponse resp;
  EXPECT_TRUE(sim_->Allocate(kFull, {"fake-2"}, &resp).ok());
}

// A resource added by the reload that raises prestart_timeout gets the new
// deadline, not the one the old configuration had.
TEST_F(ReloadTest, AnAddedResourceRunsUnderTheNewAgentKeys) {
  StartSim();
  const std::string full = Resource(kFull, FakeModule("fake_full"), "count = 1");
  StartAgent(full, "0s", "prestart_timeout = \"1s\"");
  ASSERT_TRUE(Registered(kFull));
  const std::string slow = "fake.example/slow";
  Rewrite(full + Resource(slow, FakeModule("fake_full"), "count = 1\nprestart_delay_ms = 1500"),
          "prestart_timeout = \"5s\"");
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(Registered(slow));
  grpc::Status st = sim_->PreStartContainer(slow, {"fake-0"});
  EXPECT_TRUE(st.ok()) << st.error_message();
}

// A resource a reload adds hears no uevent until the reload commits: the
// commit rescans it, so what changed in between is seen at once (here with
// the resync off, nothing else would ever rescan it).
TEST_F(ReloadTest, ACommitRescansTheResourcesItStarts) {
  StartSim();
  const std::string full = Resource(kFull, FakeModule("fake_full"), "count = 1");
  StartAgent(full);
  ASSERT_TRUE(Registered(kFull));
  const std::string counted = "fake.example/counted", slow = "fake.example/slow";
  const std::string count_file = dir_ / "count";
  WriteFile(count_file, "2");
  Rewrite(full + Resource(counted, FakeModule("fake_full"), "count_file = \"" + count_file + "\"") +
          Resource(slow, FakeModule("fake_full"), "count = 1\ncreate_delay_ms = 2000"));
  ASSERT_EQ(kill(agent_->pid(), SIGHUP), 0);
  // `counted` is created and scanned (2 devices) while `slow` holds the
  // reload open; then its hardware changes.
  ASSERT_TRUE(agent_->WaitForLog("SIGHUP: reloading the configuration", kWait));
  std::this_thread::sleep_for(700ms);
  WriteFile(count_file, "3");
  ASSERT_TRUE(agent_->WaitForLog("reloaded: ", kWait)) << agent_->Log();
  EXPECT_TRUE(HealthyIs(counted, 3, 3));
}

// A restarted resource registers again only after the kubelet has had time
// to see its old stream end (a kubelet that handles that end late drops a
// registration that came first).
TEST_F(ReloadTest, AChangedResourceRegistersAgainAfterASecond) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count = 1"));
  ASSERT_TRUE(Registered(kFull));
  Rewrite(Resource(kFull, FakeModule("fake_full"), "count = 2"));
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(sim_->WaitUntil([](const auto& rs) { return !rs.at(kFull).connected; }, kWait));
  const auto ended = std::chrono::steady_clock::now();
  ASSERT_TRUE(Registered(kFull, 2));
  EXPECT_GE(std::chrono::steady_clock::now() - ended, 900ms);
}

// --log-level on the command line still wins after a SIGHUP, as at start.
TEST_F(ReloadTest, TheCommandLineLogLevelSurvivesAReload) {
  StartSim();
  WriteFile(config_path(), Config(Resource(kFull, FakeModule("fake_full"), "count = 1")));
  agent_ = std::make_unique<AgentProcess>(
      std::vector<std::string>{"--config", config_path(), "--log-level", "trace"});
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(Reload()) << agent_->Log();
  EXPECT_EQ(agent_->Log().find("log level: debug"), std::string::npos) << agent_->Log();
}

// While a changed resource is being re-created, the metrics export it once;
// after the commit its counters go on from where they were.
TEST_F(ReloadTest, MetricsShowOneSeriesPerResourceAcrossAReload) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count = 1"));
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(Eventually(
      [&] { return Metric("devplug_registrations_total{resource=\"fake.example/full\"} ") == 1; }));
  Rewrite(Resource(kFull, FakeModule("fake_full"), "count = 1\ncreate_delay_ms = 2000"));
  ASSERT_EQ(kill(agent_->pid(), SIGHUP), 0);
  ASSERT_TRUE(agent_->WaitForLog("SIGHUP: reloading the configuration", kWait));
  std::this_thread::sleep_for(500ms);  // the new instance is being created
  auto m =
      testing::RunProcess({testing::DevplugctlPath(), "metrics", "--socket", control_socket()});
  EXPECT_EQ(Count(m.output, "devplug_resource_registered{resource=\"fake.example/full\"}"), 1u)
      << m.output;
  ASSERT_TRUE(agent_->WaitForLog("reloaded: ", kWait)) << agent_->Log();
  ASSERT_TRUE(Registered(kFull, 2));
  EXPECT_TRUE(Eventually(
      [&] { return Metric("devplug_registrations_total{resource=\"fake.example/full\"} ") == 2; }));
}

// ---- watch_config: a ConfigMap's update, as the kubelet writes it --------------------

// The kubelet's atomic update of a ConfigMap volume: the files are symlinks
// to ..data/<name>, and ..data is switched to a new timestamped folder by
// renaming a ..data_tmp symlink over it; the old folder goes last.
class ConfigMapDir {
 public:
  explicit ConfigMapDir(std::filesystem::path dir) : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_);
  }
  void Write(const std::string& name, const std::string& content) {
    namespace fs = std::filesystem;
    const std::string version = "..2026_11_25_" + std::to_string(++n_);
    fs::create_directories(dir_ / version);
    WriteFile(dir_ / version / name, content);
    fs::create_symlink(version, dir_ / "..data_tmp");
    fs::rename(dir_ / "..data_tmp", dir_ / "..data");
    if (!fs::exists(fs::symlink_status(dir_ / name)))
      fs::create_symlink(fs::path("..data") / name, dir_ / name);
    if (!old_.empty()) fs::remove_all(dir_ / old_);
    old_ = version;
  }

 private:
  std::filesystem::path dir_;
  std::string old_;
  int n_ = 0;
};

class ConfigMapReloadTest : public ReloadTest {
 protected:
  std::string cm_dir() const { return dir_ / "configmap"; }
  std::string cm_file() const { return cm_dir() + "/devplug.toml"; }
  void StartFromConfigMap(ConfigMapDir& cm, const std::string& resources,
                          const std::string& extra = "watch_config = true") {
    cm.Write("devplug.toml", Config(resources, "0s", extra));
    agent_ =
        std::make_unique<testing::AgentProcess>(std::vector<std::string>{"--config", cm_file()});
  }
  double Reloads(const char* result) {
    return Metric(std::string("devplug_reloads_total{result=\"") + result + "\"} ");
  }
};

// The ConfigMap gains a resource: devplugd reloads by itself, starts it,
// and leaves the other untouched.
TEST_F(ConfigMapReloadTest, ASymlinkSwapAddsAResourceWithoutDisturbingTheOther) {
  ConfigMapDir cm(cm_dir());
  StartSim();
  const std::string minimal = Resource(kMinimal, FakeModule("fake_minimal"));
  StartFromConfigMap(cm, minimal);
  ASSERT_TRUE(Registered(kMinimal));
  ASSERT_TRUE(agent_->WaitForLog("watching " + cm_file() + " and its conf.d/ for changes", kWait));
  cm.Write("devplug.toml", Config(minimal + Resource(kFull, FakeModule("fake_full"), "count = 2"),
                                  "0s", "watch_config = true"));
  ASSERT_TRUE(Registered(kFull)) << agent_->Log();
  EXPECT_TRUE(
      agent_->WaitForLog("configuration files changed: reloading the configuration", kWait));
  EXPECT_TRUE(agent_->WaitForLog("reloaded: 1 unchanged; added: " + std::string(kFull), kWait));
  EXPECT_EQ(Seen(kMinimal), std::make_pair(1ul, 0ul));
  EXPECT_EQ(Reloads("ok"), 1);
}

// A bad edit keeps the old configuration, says so in the log, the status
// and the metrics, and is not tried again until the files change again.
TEST_F(ConfigMapReloadTest, ABadEditKeepsTheOldConfiguration) {
  ConfigMapDir cm(cm_dir());
  StartSim();
  const std::string minimal = Resource(kMinimal, FakeModule("fake_minimal"));
  StartFromConfigMap(cm, minimal);
  ASSERT_TRUE(Registered(kMinimal));
  ASSERT_TRUE(agent_->WaitForLog("watching " + cm_file(), kWait));
  cm.Write("devplug.toml", Config(minimal + "[[resource]]\nname = \"bad name\"\nmodule = \"kvm\"\n",
                                  "0s", "watch_config = true"));
  ASSERT_TRUE(agent_->WaitForLog("reload failed, the old configuration keeps running", kWait))
      << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog("resource[1].name", kWait));
  const auto status = Status();
  EXPECT_NE(status.output.find("reload failed (old configuration kept)"), std::string::npos)
      << status.output;
  EXPECT_EQ(Reloads("failed"), 1);
  EXPECT_EQ(Seen(kMinimal), std::make_pair(1ul, 0ul));
  EXPECT_TRUE(HealthyIs(kMinimal, 4, 4));
  // An event that leaves the contents as they are (a touch of the symlink
  // in the watched folder) is no change: the bad file is not tried again.
  ASSERT_EQ(utimensat(AT_FDCWD, cm_file().c_str(), nullptr, AT_SYMLINK_NOFOLLOW), 0);
  std::this_thread::sleep_for(ConfigWatch::kSettle * 3);
  EXPECT_EQ(Reloads("failed"), 1) << agent_->Log();
  // Fixed: applied.
  cm.Write("devplug.toml", Config(minimal, "0s", "watch_config = true\ncall_timeout = \"9s\""));
  ASSERT_TRUE(agent_->WaitForLog("reloaded: 1 unchanged", kWait)) << agent_->Log();
  EXPECT_EQ(Reloads("failed"), 1);
  EXPECT_EQ(Reloads("ok"), 1);
}

// An edit that lands while a reload is still creating its instances is
// applied once that reload ends, not dropped (the files and what runs would
// stay different for good, with no error to show for it).
TEST_F(ConfigMapReloadTest, AnEditDuringAReloadIsAppliedAfterIt) {
  ConfigMapDir cm(cm_dir());
  StartSim();
  auto full = [&](int count) {
    return Config(Resource(kFull, FakeModule("fake_full"),
                           "count = " + std::to_string(count) + "\ncreate_delay_ms = 3000"),
                  "0s", "watch_config = true");
  };
  cm.Write("devplug.toml", full(2));
  agent_ = std::make_unique<testing::AgentProcess>(std::vector<std::string>{"--config", cm_file()});
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(agent_->WaitForLog("watching " + cm_file(), kWait));
  cm.Write("devplug.toml", full(3));
  ASSERT_TRUE(agent_->WaitForLog("configuration files changed: reloading the configuration", kWait))
      << agent_->Log();
  cm.Write("devplug.toml", full(4));  // the first reload's create() still sleeps
  ASSERT_TRUE(agent_->WaitForLog(
      "configuration files changed: a reload is already under way; reloading again once it ends",
      kWait))
      << agent_->Log();
  EXPECT_TRUE(HealthyIs(kFull, 4, 4)) << agent_->Log();
  EXPECT_EQ(Reloads("ok"), 2);
  EXPECT_EQ(Count(agent_->Log(), "reloaded: "), 2u);
}

// The main file's folder removed and made again (a package reinstall,
// configuration management): it is watched again, its new contents are
// applied, later edits too, and the error a missing file caused clears.
TEST_F(ConfigMapReloadTest, AFolderRemovedAndMadeAgainIsWatchedAgain) {
  StartSim();
  auto full = [&](int count) {
    return Resource(kFull, FakeModule("fake_full"), "count = " + std::to_string(count));
  };
  StartAgent(full(2), "0s", "watch_config = true");
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(agent_->WaitForLog("watching " + config_path(), kWait));
  Rewrite(full(3), "watch_config = true");
  ASSERT_TRUE(HealthyIs(kFull, 3, 3)) << agent_->Log();
  const auto folder = std::filesystem::path(config_path()).parent_path();
  std::filesystem::remove_all(folder);
  std::this_thread::sleep_for(ConfigWatch::kSettle * 2);
  Rewrite(full(4), "watch_config = true");  // makes the folder again
  ASSERT_TRUE(HealthyIs(kFull, 4, 4)) << agent_->Log();
  Rewrite(full(5), "watch_config = true");
  ASSERT_TRUE(HealthyIs(kFull, 5, 5)) << agent_->Log();
  const auto status = Status({"--json"});
  EXPECT_NE(status.output.find("\"reload_error\": null"), std::string::npos) << status.output;
}

// A drop-in added to conf.d/ is a change too; without watch_config nothing
// reloads by itself (SIGHUP still does).
TEST_F(ConfigMapReloadTest, DropInsCountAndTheWatchIsOptIn) {
  StartSim();
  const std::string minimal = Resource(kMinimal, FakeModule("fake_minimal"));
  StartAgent(minimal, "0s", "watch_config = true");
  ASSERT_TRUE(Registered(kMinimal));
  ASSERT_TRUE(agent_->WaitForLog("watching " + config_path(), kWait));
  const std::string dropin = std::filesystem::path(config_path()).parent_path() / "conf.d/50.toml";
  WriteFile(dropin, Resource(kFull, FakeModule("fake_full"), "count = 2"));
  ASSERT_TRUE(Registered(kFull)) << agent_->Log();
  // Turned off by a reload: later edits wait for SIGHUP.
  Rewrite(minimal, "watch_config = false");
  ASSERT_TRUE(Reload());
  ASSERT_TRUE(agent_->WaitForLog("no longer watching the configuration files", kWait));
  std::filesystem::remove(dropin);
  // No reload comes by itself: a reload after the settle time would log.
  std::this_thread::sleep_for(ConfigWatch::kSettle * 3);
  EXPECT_EQ(Reloads("ok"), 2) << agent_->Log();
  EXPECT_TRUE(sim_->resource(kFull)->connected);
}

}  // namespace
}  // namespace devplug
