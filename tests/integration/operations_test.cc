// What operators see: devplugctl inspect-module and status, metrics,
// sd_notify readiness and status, warnings about resources that would fight
// over a container's environment, and a device list too large for the
// kubelet.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "agent_fixture.h"
#include "devplug/module.h"
#include "ops/control.h"

namespace devplug {
namespace {

using OperationsTest = AgentTest;

testing::RunResult Inspect(const std::vector<std::string>& args) {
  std::vector<std::string> argv{testing::DevplugctlPath(), "inspect-module"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunProcess(argv);
}

const std::string kAbiLine = "ABI: 1." + std::to_string(DEVPLUG_MODULE_ABI_MINOR);

TEST(InspectModuleTest, DescribesAModuleAndWhatItFinds) {
  TempDir root;
  WriteFile(root / "dev/kvm", "");  // not a character device: Unhealthy
  auto r = Inspect({testing::ModuleDir() + "/kvm.so", "--host-root", root.path(), "shares=3"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* want :
       {"name: kvm", kAbiLine.c_str(), "optional hooks: on_udev_event", "udev subsystems: misc",
        "shares", "integer", "devices: 3 (0 healthy)", "kvm-2", "Unhealthy", "dev /dev/kvm (rw)"})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
}

// Keys of every type are named, tables and arrays of any values (ABI 1.3)
// included: nvidia's driver_mount, extra_mounts and envs.
TEST(InspectModuleTest, NamesEveryKeyType) {
  auto r = Inspect({testing::ModuleDir() + "/nvidia.so"});
  for (const char* want : {"driver_mount         table", "extra_mounts         array",
                           "envs                 table", "ignored_xids         integer array"})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
}

TEST(InspectModuleTest, FailsWithTheReason) {
  struct Case {
    std::vector<std::string> args;
    const char* reason;
  } cases[] = {
      {{FakeModule("fake_noentry")}, "no devplug_module_entry_v1 symbol"},
      {{FakeModule("fake_unresolved")}, "undefined symbol: devplug_no_such_function"},
      {{FakeModule("fake_createfail")}, "create failed: the fake hardware is on fire"},
      // Seen in review: a failed first scan crashed inspect-module.
      {{FakeModule("fake_full"), "fail_while=/"}, "first scan failed: the fake bus is not ready"},
      {{FakeModule("fake_full"), "late_config_error=true"},
       "resource[0].count: is reported bad, yet create() succeeds"},
      {{testing::ModuleDir() + "/kvm.so", "shares=0"},
       "<command line>:4: resource[0].shares: must be between 1 and 100000"},
      {{testing::ModuleDir() + "/kvm.so", "colour=blue"}, "unknown key for module \"kvm\""},
      {{"/nonexistent.so"}, "cannot load"},
  };
  for (const Case& c : cases) {
    auto r = Inspect(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args[0] << "\n" << r.output;
    EXPECT_NE(r.output.find(c.reason), std::string::npos) << c.reason << "\n" << r.output;
  }
}

TEST_F(OperationsTest, SdNotifyReadinessStatusAndStopping) {
  StartSim();
  NotifySocket notify(dir_ / "notify.sock");
  setenv("NOTIFY_SOCKET", (dir_ / "notify.sock").c_str(), 1);
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")) +
             Resource("bad.example/createfail", FakeModule("fake_createfail")));
  unsetenv("NOTIFY_SOCKET");
  EXPECT_TRUE(notify.WaitFor("READY=1", kWait)) << notify.all();
  ASSERT_TRUE(Registered(kMinimal));
  EXPECT_TRUE(notify.WaitFor("STATUS=registered 1/2 resources; 1 failed", kWait)) << notify.all();
  EXPECT_EQ(agent_->Stop(SIGTERM, 15s), std::optional<int>(0));
  EXPECT_TRUE(notify.WaitFor("STOPPING=1", kWait)) << notify.all();
}

// Under WatchdogSec= systemd sets WATCHDOG_USEC; the main loop then pings
// at half that interval, again and again, with no other activity.
TEST_F(OperationsTest, WatchdogPingsFromTheMainLoop) {
  StartSim();
  NotifySocket notify(dir_ / "notify.sock");
  setenv("NOTIFY_SOCKET", (dir_ / "notify.sock").c_str(), 1);
  setenv("WATCHDOG_USEC", "200000", 1);
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")) +
             Resource(kFull, FakeModule("fake_full"), "count = 1\nunhealthy = [\"fake-0\"]"));
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  ASSERT_TRUE(notify.WaitFor("READY=1", kWait)) << notify.all();
  ASSERT_TRUE(Registered(kMinimal));
  // The status names the resource that offers nothing usable.
  EXPECT_TRUE(notify.WaitFor("STATUS=registered 2/2 resources; no healthy devices: " +
                                 std::string(kFull) + " (see the journal)",
                             kWait))
      << notify.all();
  // Several pings, not one: count them as they come.
  size_t pings = 0;
  const auto end = std::chrono::steady_clock::now() + kWait;
  while (pings < 5 && std::chrono::steady_clock::now() < end) {
    const size_t before = notify.all().size();
    notify.WaitFor("\x01never", 150ms);
    const std::string fresh = notify.all().substr(before);
    for (size_t pos = 0; (pos = fresh.find("WATCHDOG=1", pos)) != std::string::npos; pos++) pings++;
  }
  EXPECT_GE(pings, 5u) << notify.all();
}

TEST_F(OperationsTest, ResourcesThatWouldFightOverAnEnvKeyAreReported) {
  StartSim();
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")) +
             Resource("fake.example/second", FakeModule("fake_minimal")));
  ASSERT_TRUE(Registered(kMinimal));
  ASSERT_TRUE(
      agent_->WaitForLog("resources \"fake.example/minimal\" and \"fake.example/second\" "
                         "can both set env FAKE_VISIBLE",
                         kWait))
      << agent_->Log();
  // Both still serve: it is a warning for the operator, not a refusal.
  ASSERT_TRUE(Registered("fake.example/second"));
}

// A first list the kubelet cannot take means the resource cannot start:
// its first ListAndWatch message must be a complete scan.
TEST_F(OperationsTest, FirstDeviceListOverTheKubeletsLimitLeavesTheResourceOut) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count = 200000") +
             Resource(kMinimal, FakeModule("fake_minimal")));
  ASSERT_TRUE(Registered(kMinimal));
  ASSERT_TRUE(agent_->WaitForLog(
      "resource \"fake.example/full\" left out: resource \"" + std::string(kFull) + "\"", kWait))
      << agent_->Log();
  EXPECT_NE(agent_->Log().find("over the kubelet's 4 MiB message limit"), std::string::npos)
      << agent_->Log();
  EXPECT_FALSE(sim_->resource(kFull).has_value());
}

// Seen in review: a list held back for its size still became the list
// Allocate checked against, so the kubelet could be handed IDs it never saw.
TEST_F(OperationsTest, LaterDeviceListOverTheLimitIsHeldBackEverywhere) {
  const std::string count = dir_ / "count";
  WriteFile(count, "2");
  StartSim();
  // A scan of 200,000 devices takes seconds under ASan on a loaded machine:
  // the rescans are spaced out and the Allocates below may wait for one.
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count_file = \"" + count + "\""), "1s",
             "call_timeout = \"60s\"");
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(HealthyIs(kFull, 2, 2));
  WriteFile(count, "200000");
  ASSERT_TRUE(
      agent_->WaitForLog("over the kubelet's 4 MiB message limit; not sending it; keeping "
                         "the previous device list",
                         90s))
      << agent_->Log();
  v1beta1::ContainerAllocateResponse resp;
  grpc::Status st = sim_->Allocate(kFull, {"fake-1"}, &resp);
  EXPECT_TRUE(st.ok()) << st.error_code() << ": " << st.error_message();
  st = sim_->Allocate(kFull, {"fake-150000"}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("unknown device ID \"fake-150000\""), std::string::npos)
      << st.error_message();
  auto r = sim_->resource(kFull);
  EXPECT_EQ(r->devices.size(), 2u);
  EXPECT_TRUE(r->connected);
}

testing::RunResult Ctl(const std::vector<std::string>& args) {
  std::vector<std::string> argv{testing::DevplugctlPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunProcess(argv);
}

// devplugd linked as devplugctl (the container image's devplugctl): status,
// the readiness probe and metrics answer as devplugctl's do; the rest of
// devplugctl is not there, and says so.
TEST_F(OperationsTest, DevplugdLinkedAsDevplugctlAnswersStatusAndMetrics) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count = 2"));
  ASSERT_TRUE(Registered(kFull));
  const std::string link = dir_ / "devplugctl";
  ASSERT_EQ(symlink(testing::DevplugdPath().c_str(), link.c_str()), 0);
  auto as_link = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv{link};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::RunProcess(argv);
  };
  const std::string sock = control_socket();
  testing::RunResult ready = as_link({"status", "--ready", "--socket", sock});
  EXPECT_EQ(ready.exit_code, 0) << ready.output;
  testing::RunResult mine, theirs;
  for (int i = 0; i < 200; ++i) {  // the registration's answer may lag the kubelet's side
    mine = as_link({"status", "--socket", sock});
    if (mine.exit_code == 0) break;
    std::this_thread::sleep_for(50ms);
  }
  theirs = Ctl({"status", "--socket", sock});
  EXPECT_EQ(mine.exit_code, 0) << mine.output;
  EXPECT_EQ(mine.output, theirs.output);
  testing::RunResult m = as_link({"metrics", "--socket", sock});
  EXPECT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("devplug_devices{"), std::string::npos) << m.output;
  testing::RunResult sim = as_link({"simulate-kubelet", "--dir", std::string(dir_ / "x")});
  EXPECT_NE(sim.exit_code, 0) << sim.output;
  testing::RunResult down = as_link({"status", "--ready", "--socket", std::string(dir_ / "no")});
  EXPECT_EQ(down.exit_code, 1) << down.output;
}

// devplugctl status: the JSON the contract names, a text table that fits 100
// columns, per-device rows, and exit codes a health check can use.
TEST_F(OperationsTest, StatusSaysWhatIsServedAndWhatIsNot) {
  StartSim();
  const std::string fire = "bad.example/createfail";
  StartAgent(
      Resource(kFull, FakeModule("fake_full"), "count = 2\nnuma = 1\nunhealthy = [\"fake-1\"]") +
      Resource(fire, FakeModule("fake_createfail")));
  ASSERT_TRUE(HealthyIs(kFull, 2, 1));
  const std::string sock = control_socket();
  struct stat st;
  ASSERT_EQ(stat(sock.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // The kubelet's side can see the registration a moment before devplugd
  // has read the kubelet's answer.
  testing::RunResult r;
  for (int i = 0; i < 200; ++i) {
    r = Ctl({"status", "--socket", sock, "--json"});
    if (r.output.find("\"registered\": true") != std::string::npos) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(r.exit_code, 1) << r.output;  // one resource is not registered
  const nlohmann::json j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["agent"]["abi"], "1." + std::to_string(DEVPLUG_MODULE_ABI_MINOR));
  EXPECT_TRUE(j["agent"]["version"].is_string());
  EXPECT_TRUE(j["agent"]["reload_error"].is_null());
  ASSERT_EQ(j["resources"].size(), 2u) << r.output;
  const nlohmann::json& full = j["resources"][0];
  EXPECT_EQ(full["name"], kFull);
  EXPECT_EQ(full["module"], "fake");
  EXPECT_EQ(full["module_version"], "0.0.1");
  EXPECT_EQ(full["module_file"], FakeModule("fake_full"));
  EXPECT_EQ(full["socket"], plugin_dir() + "/devplug-fake.example_full.sock");
  EXPECT_EQ(full["registered"], true);
  EXPECT_EQ(full["state"], "registered");
  EXPECT_TRUE(full["registered_since"].is_string());
  EXPECT_EQ(full["kubelet_connected"], true);
  EXPECT_EQ(full["devices_total"], 2);
  EXPECT_EQ(full["devices_healthy"], 1);
  EXPECT_EQ(full["last_error"], "");
  EXPECT_FALSE(full.contains("devices"));  // only with a RESOURCE or --devices
  const nlohmann::json& bad = j["resources"][1];
  EXPECT_EQ(bad["name"], fire);
  EXPECT_EQ(bad["registered"], false);
  EXPECT_EQ(bad["state"], "left out");
  EXPECT_EQ(bad["kubelet_connected"], false);
  EXPECT_NE(bad["last_error"].get<std::string>().find("the fake hardware is on fire"),
            std::string::npos)
      << r.output;

  // One resource: its devices, and the exit status is about it alone.
  r = Ctl({"status", "--socket", sock, "--json", kFull});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json one = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_TRUE(one.is_object()) << r.output;
  ASSERT_EQ(one["resources"].size(), 1u);
  const nlohmann::json& devices = one["resources"][0]["devices"];
  ASSERT_EQ(devices.size(), 2u) << r.output;
  EXPECT_EQ(devices[0]["id"], "fake-0");
  EXPECT_EQ(devices[0]["health"], "Healthy");
  EXPECT_EQ(devices[0]["numa"], nlohmann::json::array({1}));
  EXPECT_EQ(devices[1]["health"], "Unhealthy");
  EXPECT_EQ(devices[1]["reason"], "listed unhealthy");
  EXPECT_TRUE(devices[1]["holder"].is_null());

  // The text form: a table within 100 columns, the error under its row.
  r = Ctl({"status", "--socket", sock, "--devices"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  for (const char* want :
       {"RESOURCE", "fake.example/full", "fake 0.0.1", "stream", "1/2", "left out",
        "last error: ", "the fake hardware is on fire", "fake-1", "Unhealthy", "listed unhealthy"})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;

  // Found through the configuration file, as an operator would run it.
  r = Ctl({"status", "--config", config_path(), kFull});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("listed unhealthy"), std::string::npos) << r.output;
  // A resource devplugd does not serve; no devplugd at all.
  r = Ctl({"status", "--socket", sock, "nope.example/none"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no resource \"nope.example/none\""), std::string::npos) << r.output;
  r = Ctl({"status", "--socket", dir_ / "nothing.sock"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot reach devplugd at " + (dir_ / "nothing.sock")), std::string::npos)
      << r.output;
  // A stray request gets an error, and the socket keeps answering.
  auto raw = ops::ControlRequest(sock, "hello", 5s);
  ASSERT_TRUE(raw.ok());
  EXPECT_NE(raw->find("unknown request"), std::string::npos) << *raw;
  // Fields of the wrong type are refused with the field's name; they once
  // threw out of the main loop and ended devplugd.
  for (const char* bad : {R"({"status": {"devices": "yes"}})", R"({"status": {"resource": 7}})",
                          R"({"status": 1})", R"({"status": {}, "metrics": {}})"}) {
    raw = ops::ControlRequest(sock, bad, 5s);
    ASSERT_TRUE(raw.ok()) << bad << ": " << raw.status().message() << "\n" << agent_->Log();
    EXPECT_NE(raw->find("\"error\""), std::string::npos) << bad << ": " << *raw;
  }
  EXPECT_EQ(Ctl({"status", "--socket", sock, kFull}).exit_code, 0);

  // The readiness probe: an Unhealthy device and a resource left out do not
  // make devplugd unready (a probe must never get it restarted for them);
  // only an agent that does not answer is.
  r = Ctl({"status", "--ready", "--socket", sock});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ready: devplugd"), std::string::npos) << r.output;
  r = Ctl({"status", "--ready", "--socket", dir_ / "nothing.sock"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("not ready"), std::string::npos) << r.output;
}

// The readiness probe says 1 while devplugd is still starting (a module's
// create() takes its time), though devplugd already answers; 0 once every
// resource's first start attempt has ended.
TEST_F(OperationsTest, NotReadyUntilEveryResourceHasStarted) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count = 1\ncreate_delay_ms = 3000"));
  const std::string sock = control_socket();
  ASSERT_TRUE(Eventually([&] { return ops::ControlRequest(sock, "{\"status\": {}}", 1s).ok(); }));
  auto r = Ctl({"status", "--ready", "--socket", sock});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("is starting"), std::string::npos) << r.output;
  ASSERT_TRUE(Registered(kFull));
  r = Ctl({"status", "--ready", "--socket", sock});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Ready means serving: a resource whose module runs and that no kubelet
// has registered (none is there) keeps the probe at 1, naming it; once the
// kubelet registers it, 0. A resource left out does not count (above).
TEST_F(OperationsTest, NotReadyUntilEveryRunningResourceIsRegistered) {
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count = 1"));
  const std::string sock = control_socket();
  ASSERT_TRUE(Eventually([&] {
    auto st = ops::ControlRequest(sock, "{\"status\": {}}", 1s);
    const auto j = nlohmann::json::parse(st.ok() ? *st : "", nullptr, false);
    return j.is_object() && j.contains("resources") && j["resources"].size() == 1 &&
           j["resources"][0].value("running", false);
  }));
  auto r = Ctl({"status", "--ready", "--socket", sock});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(
      r.output.find("does not serve yet: " + std::string(kFull) + " (waiting for the kubelet)"),
      std::string::npos)
      << r.output;
  StartSim();
  ASSERT_TRUE(Registered(kFull));
  EXPECT_TRUE(Eventually([&] {
    return Ctl({"status", "--ready", "--socket", sock}).exit_code == 0;
  }));
}

// A client that trickles its request one byte at a time holds up neither
// `status` nor the readiness probe, and is cut off at its deadline.
TEST_F(OperationsTest, ASlowControlClientBlocksNobody) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count = 1"));
  ASSERT_TRUE(Registered(kFull));
  const std::string sock = control_socket();
  ASSERT_TRUE(Eventually([&] {
    return Ctl({"status", "--ready", "--socket", sock}).exit_code == 0;
  }));
  std::atomic<bool> stop{false};
  std::atomic<int> sent{0};
  std::atomic<bool> cut_off{false};
  std::thread drip([&] {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock.c_str());
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return;
    const std::string request = "{\"status\": {\"devices\": true}}";
    // 20 s of dripping: longer than devplugctl waits (10 s), so a server
    // that served this client alone would fail every probe below.
    for (size_t i = 0; !stop && i < 200; ++i) {
      if (send(fd, &request[i % request.size()], 1, MSG_NOSIGNAL) != 1) {
        cut_off = true;
        break;
      }
      ++sent;
      std::this_thread::sleep_for(100ms);
    }
    close(fd);
  });
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(200ms);
    auto r = Ctl({"status", "--ready", "--socket", sock});
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  drip.join();
  // The server stopped listening to it after 2 s: its later bytes found the
  // connection closed (EPIPE), long before its 200th.
  EXPECT_TRUE(cut_off) << "sent " << sent.load();
  stop = true;
}

// The metrics count what happened: registrations, calls by result, health
// flips, rescans, the uevents of the subsystems watched, over the control
// socket and over HTTP.
// control_socket pointed at a file by mistake: devplugd serves without a
// control socket and leaves the file as it was, at start and at exit.
TEST_F(OperationsTest, AControlSocketPathThatIsNotASocketIsLeftAlone) {
  WriteFile(control_socket(), "precious\n");
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count = 1"));
  ASSERT_TRUE(Registered(kFull));
  EXPECT_TRUE(agent_->WaitForLog("exists and is not a socket; not replacing it", kWait))
      << agent_->Log();
  ASSERT_EQ(agent_->Stop(SIGTERM, kWait), std::optional<int>(0));
  std::ifstream in(control_socket());
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "precious\n");
}

TEST_F(OperationsTest, MetricsCountWhatHappened) {
  StartSim();
  const std::string sick = dir_ / "sick";
  // A free TCP port on the loopback address for the exposer.
  const int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  close(probe);
  StartAgent(Resource(kFull, FakeModule("fake_full"), "sick_while = \"" + sick + "\""), "100ms",
             "metrics_address = \"127.0.0.1:" + std::to_string(port) + "\"");
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(AgentRegistered(kFull));
  ASSERT_TRUE(HealthyIs(kFull, 4, 4));
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kFull, {"fake-0"}, &resp).ok());
  ASSERT_TRUE(sim_->Allocate(kFull, {"fake-1", "fake-2"}, &resp).ok());
  EXPECT_EQ(sim_->Allocate(kFull, {"fake-9"}, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  WriteFile(sick, "");
  ASSERT_TRUE(HealthyIs(kFull, 4, 3));
  std::filesystem::remove(sick);
  ASSERT_TRUE(HealthyIs(kFull, 4, 4));

  const std::string res = "resource=\"" + std::string(kFull) + "\"";
  // Counters may lag the kubelet's view by a moment: read until they agree.
  testing::RunResult r;
  for (int i = 0; i < 200; ++i) {
    r = Ctl({"metrics", "--socket", control_socket()});
    if (r.output.find("devplug_health_transitions_total{" + res + ",to=\"Healthy\"} 1") !=
        std::string::npos)
      break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& want : std::vector<std::string>{
           "devplug_build_info{abi=\"1." + std::to_string(DEVPLUG_MODULE_ABI_MINOR) +
               "\",version=\"",
           "devplug_resource_registered{" + res + "} 1",
           "devplug_registrations_total{" + res + "} 1",
           "devplug_devices{health=\"Healthy\"," + res + "} 4",
           "devplug_devices{health=\"Unhealthy\"," + res + "} 0",
           "devplug_health_transitions_total{" + res + ",to=\"Unhealthy\"} 1",
           "devplug_health_transitions_total{" + res + ",to=\"Healthy\"} 1",
           "devplug_rpc_requests_total{code=\"OK\"," + res + ",rpc=\"Allocate\"} 2",
           "devplug_rpc_requests_total{code=\"INVALID_ARGUMENT\"," + res + ",rpc=\"Allocate\"} 1",
           "devplug_rpc_requests_total{code=\"OK\"," + res + ",rpc=\"ListAndWatch\"} 1",
           "devplug_rpc_duration_seconds_count{" + res + ",rpc=\"Allocate\"} 3",
           "devplug_rpc_duration_seconds_bucket{" + res + ",rpc=\"Allocate\",le=\"+Inf\"} 3",
           "devplug_rescans_total{cause=\"start\"," + res + "} 1",
           "devplug_rescans_total{cause=\"resync\"," + res + "} ",
           "devplug_kubelet_restarts_total 0",
           "devplug_reloads_total{result=\"ok\"} 0",
           "# TYPE devplug_rpc_duration_seconds histogram",
       })
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  // Stream and option calls are counted, not timed.
  EXPECT_EQ(r.output.find("devplug_rpc_duration_seconds_count{" + res + ",rpc=\"ListAndWatch\"}"),
            std::string::npos)
      << r.output;

  // The same over HTTP (prometheus-cpp's exposer).
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
  const std::string get = "GET /metrics HTTP/1.0\r\n\r\n";
  ASSERT_EQ(write(fd, get.data(), get.size()), static_cast<ssize_t>(get.size()));
  std::string http;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) http.append(buf, static_cast<size_t>(n));
  close(fd);
  EXPECT_EQ(http.rfind("HTTP/1.1 200", 0), 0u) << http;
  EXPECT_NE(http.find("devplug_registrations_total{" + res + "} 1"), std::string::npos) << http;
}

// The configuration we ship, and every drop-in example beside it, is valid
// as written (examples copied into conf.d/ as an operator would).
TEST(ShippedConfigTest, DefaultConfigAndExamplesCheckOut) {
  namespace fs = std::filesystem;
  const fs::path src = DEVPLUG_TEST_SOURCE_DIR "/config";
  TempDir etc;
  fs::copy_file(src / "devplug.toml", etc / "devplug.toml");
  auto check = [&] {
    return testing::RunDevplugd({"--config", etc / "devplug.toml", "--check-config", "--module-dir",
                                 testing::ModuleDir(), "--plugin-dir", etc / "plugins"});
  };
  auto base = check();
  EXPECT_EQ(base.exit_code, 0) << base.output;
  // Every commented-out [agent] key, uncommented as an operator would, is
  // valid too (its documented default or example value).
  {
    std::ifstream in(src / "devplug.toml");
    std::string text, line;
    size_t uncommented = 0;
    bool in_agent = false;
    while (std::getline(in, line)) {
      if (line.starts_with("[")) in_agent = line == "[agent]";
      if (in_agent && line.starts_with("# ") && line.find(" = ") != std::string::npos &&
          line.find(' ', 2) == line.find(" = ")) {
        line = line.substr(
            2, line.find("   #") == std::string::npos ? std::string::npos : line.find("   #") - 2);
        uncommented++;
      }
      text += line + "\n";
    }
    WriteFile(etc / "devplug.toml", text);
    auto all = check();
    EXPECT_EQ(all.exit_code, 0) << text << "\n" << all.output;
    EXPECT_GE(uncommented, 8u) << text;
    fs::copy_file(src / "devplug.toml", etc / "devplug.toml", fs::copy_options::overwrite_existing);
  }
  // The nvidia examples are for GPU nodes: give devplugd a driver library
  // (the fake libnvidia-ml, no GPUs), as such a node has; mig = "only"
  // refuses to start without one.
  TempDir driver;
  fs::create_symlink(testing::FakeModuleDir() + "/fake_nvml.so", driver / "libnvidia-ml.so.1");
  setenv("FAKE_NVML_DIR", driver.path().c_str(), 1);
  const char* old_path = getenv("LD_LIBRARY_PATH");
  const std::string saved = old_path ? old_path : "";
  setenv("LD_LIBRARY_PATH", (driver.path() + (saved.empty() ? "" : ":" + saved)).c_str(), 1);
  size_t examples = 0;
  for (const auto& e : fs::directory_iterator(src / "conf.d")) {
    if (e.path().extension() != ".example") continue;
    examples++;
    fs::create_directories(etc / "conf.d");
    const fs::path dropin = fs::path(etc / "conf.d") / e.path().stem();  // x.toml.example -> x.toml
    fs::copy_file(e.path(), dropin, fs::copy_options::overwrite_existing);
    auto r = check();
    EXPECT_EQ(r.exit_code, 0) << e.path() << "\n" << r.output;
    EXPECT_NE(r.output.find("configuration ok"), std::string::npos) << r.output;
    fs::remove(dropin);
  }
  if (saved.empty())
    unsetenv("LD_LIBRARY_PATH");
  else
    setenv("LD_LIBRARY_PATH", saved.c_str(), 1);
  EXPECT_GE(examples, 1u);
}

}  // namespace
}  // namespace devplug
