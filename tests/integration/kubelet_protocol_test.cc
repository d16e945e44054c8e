// The kubelet side of the protocol as the real kubelet and the tools around
// it behave: probes that open their own ListAndWatch, a kubelet that
// appears during our start, a dead kubelet.sock, our socket removed behind
// our back, the plugin folder removed, and what the log says about each.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "agent_fixture.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"

namespace devplug {
namespace {

using KubeletProtocolTest = AgentTest;

using testing::FileIdentity;

// A client that is not the kubelet (grpcurl, a health probe): it opens
// ListAndWatch on a resource socket, reads the first message and goes away.
v1beta1::ListAndWatchResponse Probe(const std::string& socket) {
  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::DevicePlugin::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kWait);
  auto reader = stub->ListAndWatch(&ctx, v1beta1::Empty());
  v1beta1::ListAndWatchResponse first;
  EXPECT_TRUE(reader->Read(&first)) << "no first message";
  ctx.TryCancel();
  (void)reader->Finish();
  return first;
}

const std::string kMinimalSocket = "devplug-fake.example_minimal.sock";

// Seen in review: any client's ListAndWatch ending tore down the kubelet's
// stream (allocatable 0 for a second, and a second registration).
TEST_F(KubeletProtocolTest, ProbesComeAndGoWithoutMovingTheKubeletsStream) {
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")));
  ASSERT_TRUE(agent_->WaitForLog("to appear", kWait)) << agent_->Log();
  const std::string socket = plugin_dir() + "/" + kMinimalSocket;
  // Before any kubelet, and after it registered: both get full snapshots.
  EXPECT_EQ(Probe(socket).devices_size(), 4);
  StartSim();
  ASSERT_TRUE(Registered(kMinimal));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Probe(socket).devices_size(), 4);
  // The old bug re-registered 1 s after a probe ended.
  std::this_thread::sleep_for(1500ms);
  auto r = sim_->resource(kMinimal);
  EXPECT_EQ(r->registrations, 1u);
  EXPECT_EQ(r->stream_ends, 0u);
  EXPECT_TRUE(r->connected);
  EXPECT_EQ(agent_->Log().find("closed ListAndWatch"), std::string::npos) << agent_->Log();
}

// Seen in review: a kubelet that created kubelet.sock while a slow create()
// ran got two registrations (the second for a kubelet that never restarted).
TEST_F(KubeletProtocolTest, AKubeletThatAppearsDuringOurStartGetsOneRegistration) {
  StartAgent(Resource(kFull, FakeModule("fake_full"), "create_delay_ms = 1500"));
  ASSERT_TRUE(agent_->WaitForLog("starting:", kWait)) << agent_->Log();
  StartSim();  // during create(): kubelet.sock is created now
  ASSERT_TRUE(Registered(kFull));
  std::this_thread::sleep_for(1500ms);
  // One server, one Register: the old code took the creation event, seen
  // after its own Register went out, for a restart, served a new socket and
  // registered again (the simulator then saw the first attempt fail).
  const std::string log = agent_->Log();
  EXPECT_EQ(Count(log, "serving on"), 1u) << log;
  EXPECT_EQ(log.find("the kubelet (re)started"), std::string::npos) << log;
  EXPECT_EQ(sim_->resource(kFull)->registrations, 1u) << log;
  EXPECT_EQ(sim_->resource(kFull)->stream_ends, 0u);
}

// Seen against the real kubelet: while it was down, every Register retry
// re-created our socket and server and logged a warning.
TEST_F(KubeletProtocolTest, ADeadKubeletSockIsRetriedOnTheSameServer) {
  // A socket file nobody listens on: what a kubelet that died leaves behind.
  std::filesystem::create_directories(plugin_dir());
  const std::string kubelet_sock = plugin_dir() + "/kubelet.sock";
  ASSERT_TRUE(testing::LeaveDeadUnixSocket(kubelet_sock));
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")));
  const std::string socket = plugin_dir() + "/" + kMinimalSocket;
  ASSERT_TRUE(agent_->WaitForLog("Register failed", kWait)) << agent_->Log();
  const auto inode = FileIdentity(socket);
  ASSERT_TRUE(inode.has_value());
  // Three more attempts (0.5, 1 and 2 s apart).
  const auto end = std::chrono::steady_clock::now() + kWait;
  while (Count(agent_->Log(), "Register failed") < 4 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(50ms);
  const std::string log = agent_->Log();
  ASSERT_GE(Count(log, "Register failed"), 4u) << log;
  EXPECT_EQ(Count(log, "warning resource \"fake.example/minimal\": Register failed"), 1u) << log;
  EXPECT_EQ(FileIdentity(socket), inode) << "the server was restarted for a retry";
  EXPECT_EQ(Count(log, "serving on"), 1u) << log;
  // The kubelet comes back: registered, and the log says after how much.
  StartSim();
  ASSERT_TRUE(Registered(kMinimal));
  EXPECT_TRUE(agent_->WaitForLog("failed attempts)", kWait)) << agent_->Log();
}

// Seen against the real kubelet: our socket deleted while registered (not
// by a kubelet restart) went unnoticed. It is served again, and the
// registration follows once the old stream has ended.
TEST_F(KubeletProtocolTest, OurSocketRemovedIsServedAndRegisteredAgain) {
  StartSim();
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")));
  ASSERT_TRUE(Registered(kMinimal));
  const std::string socket = plugin_dir() + "/" + kMinimalSocket;
  ASSERT_EQ(std::remove(socket.c_str()), 0);
  ASSERT_TRUE(Registered(kMinimal, 2));
  EXPECT_TRUE(FileExists(socket));
  auto r = sim_->resource(kMinimal);
  EXPECT_EQ(r->stream_ends, 1u);  // ended by us, before the new registration
  v1beta1::ContainerAllocateResponse resp;
  EXPECT_TRUE(sim_->Allocate(kMinimal, {"fake-0"}, &resp).ok());
  EXPECT_NE(agent_->Log().find("socket " + socket + " was removed; serving it again in 1000 ms"),
            std::string::npos)
      << agent_->Log();
  // The strict simulator saw no registration while the old stream was open
  // (checked in TearDown).
}

// Seen against the real kubelet: a debug line said "socket ... removed"
// right after "serving on ..." (an old event). Only what is true is said.
TEST_F(KubeletProtocolTest, TheLogSaysWhatIsTrueAfterRestartsAndDroppedStreams) {
  StartSim();
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")));
  ASSERT_TRUE(Registered(kMinimal));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(sim_->Restart(50ms).ok());
    ASSERT_TRUE(Registered(kMinimal, i + 2));
  }
  // A stream the kubelet drops: registered again (the old code served a new
  // socket, and then reported its own unlink of the old file as a removal).
  sim_->DropConnections();
  ASSERT_TRUE(Registered(kMinimal, 5));
  std::this_thread::sleep_for(1500ms);  // any late event has been handled
  const std::string log = agent_->Log();
  const size_t served = log.rfind("serving on");
  ASSERT_NE(served, std::string::npos) << log;
  EXPECT_EQ(log.find("removed", served), std::string::npos) << log;
  EXPECT_EQ(sim_->resource(kMinimal)->registrations, 5u);
}

// Seen against the real kubelet: no Allocate was logged at any level.
TEST_F(KubeletProtocolTest, EveryCallIsLoggedAtDebugLevel) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full")));
  ASSERT_TRUE(Registered(kFull));
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kFull, {"fake-0", "fake-1"}, &resp).ok());
  EXPECT_FALSE(sim_->Allocate(kFull, {"nope"}, &resp).ok());
  std::vector<std::string> ids;
  ASSERT_TRUE(sim_->GetPreferredAllocation(kFull, {"fake-2", "fake-3"}, {}, 1, &ids).ok());
  ASSERT_TRUE(sim_->PreStartContainer(kFull, {"fake-0"}).ok());
  ASSERT_TRUE(agent_->WaitForLog("PreStartContainer [fake-0]: OK in ", kWait)) << agent_->Log();
  const std::string log = agent_->Log();
  for (const char* want : {"debug fake.example/full: Allocate [fake-0,fake-1]: OK in ",
                           "fake.example/full: Allocate [nope]: INVALID_ARGUMENT: "
                           "fake.example/full: unknown device ID \"nope\" in ",
                           "fake.example/full: GetPreferredAllocation [fake-2,fake-3]: OK in "})
    EXPECT_NE(log.find(want), std::string::npos) << want << "\n" << log;
}

// The unit's sandbox cannot see a plugin folder made anew (kubeadm reset):
// devplugd exits with 75 so that the service manager starts a fresh one.
TEST_F(KubeletProtocolTest, PluginFolderRemovedEndsTheProcessWith75) {
  StartSim();
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")));
  ASSERT_TRUE(Registered(kMinimal));
  sim_->Stop();
  std::filesystem::remove_all(plugin_dir());
  const std::optional<int> rc = agent_->Wait(kWait);
  ASSERT_TRUE(rc.has_value()) << agent_->Log();
  EXPECT_EQ(*rc, 75) << agent_->Log();
  EXPECT_NE(agent_->Log().find(plugin_dir() + " was removed; exiting (status 75)"),
            std::string::npos)
      << agent_->Log();
}

// Seen in a package test: a process that still serves a socket in the
// folder (a kubelet not stopped yet, a simulator) pins the removed directory,
// and the kernel reports its removal only when that socket closes. The
// removal of our own socket leads to the same end.
TEST_F(KubeletProtocolTest, PluginFolderRemovedWhileAnotherSocketPinsIt) {
  StartSim();
  StartAgent(Resource(kMinimal, FakeModule("fake_minimal")));
  ASSERT_TRUE(Registered(kMinimal));
  sim_->Stop();
  const std::string pin_path = plugin_dir() + "/other-plugin.sock";
  const int pin = testing::ListenUnix(pin_path);
  ASSERT_GE(pin, 0) << std::strerror(errno);
  std::filesystem::remove_all(plugin_dir());
  const std::optional<int> rc = agent_->Wait(kWait);
  close(pin);
  ASSERT_TRUE(rc.has_value()) << agent_->Log();
  EXPECT_EQ(*rc, 75) << agent_->Log();
  EXPECT_NE(agent_->Log().find(plugin_dir() + " was removed; exiting (status 75)"),
            std::string::npos)
      << agent_->Log();
}

// Seen in review: two hung modules took 2 x start_timeout to stop, past
// systemd's TimeoutStopSec. They are stopped together, under one deadline.
TEST_F(KubeletProtocolTest, HungModulesStopTogetherUnderOneDeadline) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "hang_scan_after = 2") +
                 Resource("fake.example/other", FakeModule("fake_full"), "hang_scan_after = 2"),
             "200ms", "start_timeout = \"3s\"");
  ASSERT_TRUE(Registered(kFull));
  const auto end = std::chrono::steady_clock::now() + kWait;
  while (Count(agent_->Log(), "list_devices hangs now") < 2 &&
         std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(20ms);
  ASSERT_EQ(Count(agent_->Log(), "list_devices hangs now"), 2u) << agent_->Log();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(agent_->Stop(SIGTERM, kWait), std::optional<int>(0));
  const auto took = std::chrono::steady_clock::now() - t0;
  // One 3 s deadline for both; one after the other would take 6 s.
  EXPECT_LT(took, 5s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
  EXPECT_EQ(Count(agent_->Log(), "did not stop within 3000 ms; abandoning it"), 2u)
      << agent_->Log();
}

testing::RunResult SimulateKubelet(const std::vector<std::string>& args) {
  std::vector<std::string> argv{testing::DevplugctlPath(), "simulate-kubelet"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunProcess(argv);
}

// Seen in review: run on a node, the simulator defaulted to the real plugin
// folder, deleted the live kubelet.sock and other plugins' sockets, and
// overwrote the kubelet's checkpoint.
TEST(SimulateKubeletTest, IsSafeOnARealNode) {
  testing::RunResult r = SimulateKubelet({"--duration", "0.1"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--dir is required"), std::string::npos) << r.output;

  // Another plugin's socket and the kubelet's checkpoint stay as they are.
  TempDir dir;
  const int other = testing::ListenUnix(dir / "other.sock");
  ASSERT_GE(other, 0);
  WriteFile(dir / "kubelet_internal_checkpoint", "the kubelet's own");
  r = SimulateKubelet({"--dir", dir.path(), "--duration", "0.3"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(FileExists(dir / "other.sock"));
  EXPECT_EQ(testing::ReadFile(dir / "kubelet_internal_checkpoint"), "the kubelet's own");
  close(other);

  // A checkpoint it wrote itself is gone when it exits.
  TempDir empty;
  r = SimulateKubelet({"--dir", empty.path(), "--duration", "0.3"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(FileExists(empty / "kubelet_internal_checkpoint"));

  // A live kubelet: refused.
  TempDir live;
  KubeletSim::Options o;
  o.dir = live.path();
  o.owns_dir = true;
  KubeletSim kubelet(o);
  ASSERT_TRUE(kubelet.Start().ok());
  r = SimulateKubelet({"--dir", live.path(), "--duration", "0.3"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("a kubelet already answers on " + live / "kubelet.sock" +
                          "; refusing to run beside it"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(FileExists(live / "kubelet.sock"));
}

}  // namespace
}  // namespace devplug
