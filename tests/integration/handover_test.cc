// devplugctl handover: the running devplugd starts its own command line
// again, and leaves once the new process serves (a package upgrade under
// systemd). Measured as the kubelet sees it: Allocates at 100 a second.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "agent_fixture.h"

namespace devplug {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// A process a handover started: once the one that started it has exited it
// is ours (this test process is a subreaper), and it is stopped at the end.
struct Adopted {
  pid_t pid = -1;
  ~Adopted() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  // Waits up to `timeout` for it to end; its exit status, or -1.
  static int Wait(pid_t pid, std::chrono::milliseconds timeout) {
    bool exited = false;
    std::string ending;
    return testing::WaitPid(pid, timeout, &exited, &ending).value_or(-1);
  }
};

// Allocate on one device, 100 times a second, as pods admitted one after
// another; every failure is kept.
class AllocateLoop {
 public:
  explicit AllocateLoop(KubeletSim& sim) : sim_(sim) {
    thread_ = std::thread([this] {
      while (!stop_) {
        v1beta1::ContainerAllocateResponse resp;
        grpc::Status st = sim_.Allocate(kMinimal, {"fake-1"}, &resp);
        if (st.ok())
          ++answered_;
        else
          failures_.push_back(st.error_message());
        std::this_thread::sleep_for(10ms);
      }
    });
  }
  ~AllocateLoop() { Stop(); }
  int answered() const { return answered_; }
  const std::vector<std::string>& Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return failures_;
  }

 private:
  KubeletSim& sim_;
  std::atomic<bool> stop_{false};
  std::atomic<int> answered_{0};
  std::vector<std::string> failures_;
  std::thread thread_;
};

class HandoverTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  }
  testing::RunResult Handover() {
    return testing::RunProcess(
        {testing::DevplugctlPath(), "handover", "--json", "--socket", control_socket()});
  }
  // devplugd serving kMinimal, and Allocates on it at 100 a second.
  std::unique_ptr<AllocateLoop> StartServing() {
    StartSim();
    StartAgent(Resource(kMinimal, FakeModule("fake_minimal"), "count = 2"));
    EXPECT_TRUE(Registered(kMinimal));
    auto allocates = std::make_unique<AllocateLoop>(*sim_);
    EXPECT_TRUE(Eventually([&] { return allocates->answered() >= 10; }));
    return allocates;
  }
  bool ControlAnswers() {
    return Eventually([&] {
      return testing::RunProcess(
                 {testing::DevplugctlPath(), "status", "--socket", control_socket()})
                 .exit_code == 0;
    });
  }
};

TEST_F(HandoverTest, ThreeHandoversInARowFailNoAllocate) {
  const std::unique_ptr<AllocateLoop> started = StartServing();
  ASSERT_FALSE(HasFailure());
  AllocateLoop& allocates = *started;

  pid_t serving = agent_->pid();
  Adopted last;
  const char* sockets[] = {"devplug-fake.example_minimal.b.sock",
                           "devplug-fake.example_minimal.sock"};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("handover " + std::to_string(i + 1));
    const testing::RunResult r = Handover();
    ASSERT_EQ(r.exit_code, 0) << r.output << agent_->Log();
    const json h = json::parse(r.output, nullptr, false).value("handover", json::object());
    const pid_t next = h.value("pid", -1);
    EXPECT_EQ(h.value("previous_pid", -1), serving) << r.output;
    EXPECT_FALSE(h.value("version", std::string()).empty()) << r.output;
    EXPECT_FALSE(h.value("systemd_main_pid", true)) << r.output;  // no systemd here
    ASSERT_GT(next, 0) << r.output;
    EXPECT_NE(next, serving);
    // The new one registered before the old one answered, on the other name.
    EXPECT_EQ(sim_->resource(kMinimal)->registrations, static_cast<uint64_t>(2 + i));
    EXPECT_EQ(sim_->resource(kMinimal)->endpoint, sockets[i % 2]);
    // The old one leaves by itself, with status 0.
    if (i == 0)
      EXPECT_EQ(agent_->Wait(kWait), std::optional<int>(0)) << agent_->Log();
    else
      EXPECT_EQ(Adopted::Wait(serving, kWait), 0);
    last.pid = next;
    serving = next;
    // The control socket is the new one's once the old one is gone.
    EXPECT_TRUE(ControlAnswers()) << agent_->Log();
  }
  const int at_end = allocates.answered();
  EXPECT_TRUE(Eventually([&] { return allocates.answered() >= at_end + 30; }));
  const std::vector<std::string>& failures = allocates.Stop();
  EXPECT_TRUE(failures.empty()) << failures.size()
                                << " failed Allocates, the first: " << failures.front();
  EXPECT_TRUE(sim_->resource(kMinimal)->connected);
  EXPECT_FALSE(FileExists(plugin_dir() + "/" + sockets[1]));  // the second one's, gone with it

  // The last one stops like any devplugd, and takes its socket with it.
  kill(serving, SIGTERM);
  EXPECT_EQ(Adopted::Wait(serving, kWait), 0);
  last.pid = -1;
  EXPECT_FALSE(FileExists(plugin_dir() + "/" + sockets[0]));
  const std::string log = agent_->Log();  // all of them write to the same output
  EXPECT_NE(log.find("handed over to devplugd"), std::string::npos) << log;
  EXPECT_NE(log.find("this one takes over"), std::string::npos) << log;
}

// The new process refuses the configuration (the files were edited
// wrongly before the upgrade): the handover fails with the new one's exit
// status, and the old one serves on with nothing changed.
TEST_F(HandoverTest, ANewProcessThatExitsLeavesTheOldOneServing) {
  const std::unique_ptr<AllocateLoop> started = StartServing();
  ASSERT_FALSE(HasFailure());
  AllocateLoop& allocates = *started;
  WriteFile(config_path(), "[agent]\nlog_level = \"loud\"\n");

  const testing::RunResult r = Handover();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("exited with status 78 before it served"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("serves on"), std::string::npos) << r.output;
  EXPECT_TRUE(agent_->Running());
  EXPECT_EQ(sim_->resource(kMinimal)->registrations, 1u);
  EXPECT_TRUE(ControlAnswers());
  const int at = allocates.answered();
  EXPECT_TRUE(Eventually([&] { return allocates.answered() >= at + 10; }));
  const std::vector<std::string>& failures = allocates.Stop();
  EXPECT_TRUE(failures.empty()) << failures.front();
  // What the new process said about the file is in the shared output.
  EXPECT_TRUE(agent_->WaitForLog("log_level", kWait)) << agent_->Log();
  EXPECT_EQ(agent_->Stop(SIGTERM, 15s), std::optional<int>(0)) << agent_->Log();
}

}  // namespace
}  // namespace devplug
