// A slow or hung module costs only its own resource: calls into it answer
// DEADLINE_EXCEEDED after call_timeout, a stuck create() is given up after
// start_timeout, other resources and the kubelet protocol carry on, and
// shutdown still completes.
#include <thread>

#include <gtest/gtest.h>

#include "agent_fixture.h"

namespace devplug {
namespace {

using ContainmentTest = AgentTest;

TEST_F(ContainmentTest, SlowAllocateAnswersDeadlineExceeded) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "allocate_delay_ms = 3000") +
                 Resource(kMinimal, FakeModule("fake_minimal")),
             "0s", "call_timeout = \"300ms\"");
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(Registered(kMinimal));
  v1beta1::ContainerAllocateResponse resp;
  grpc::Status st = sim_->Allocate(kFull, {"fake-0"}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_NE(st.error_message().find("fake.example/full: Allocate: the module did not answer within "
                                    "300 ms"),
            std::string::npos)
      << st.error_message();
  // The other resource answers while the slow module still sleeps.
  EXPECT_TRUE(sim_->Allocate(kMinimal, {"fake-0"}, &resp).ok());
  EXPECT_TRUE(sim_->resource(kFull)->connected);
}

// PreStartContainer has a deadline of its own (the kubelet allows it 30 s:
// programming a device takes longer than an Allocate), which modules see.
TEST_F(ContainmentTest, PreStartHasItsOwnDeadline) {
  StartSim();
  StartAgent(
      Resource(kMinimal, FakeModule("fake_minimal")) +
          Resource(kFull, FakeModule("fake_full"), "prestart_delay_ms = 800\nlog_host = true"),
      "0s", "call_timeout = \"300ms\"\nprestart_timeout = \"2500ms\"");
  ASSERT_TRUE(Registered(kFull));
  EXPECT_TRUE(agent_->WaitForLog("prestart_timeout_ms=2500 resource_index=1", kWait))
      << agent_->Log();
  // Slower than call_timeout, inside prestart_timeout.
  grpc::Status st = sim_->PreStartContainer(kFull, {"fake-0"});
  EXPECT_TRUE(st.ok()) << st.error_message();
  v1beta1::ContainerAllocateResponse resp;
  EXPECT_TRUE(sim_->Allocate(kFull, {"fake-0"}, &resp).ok());
  agent_.reset();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "prestart_delay_ms = 3000"), "0s",
             "call_timeout = \"10s\"\nprestart_timeout = \"500ms\"");
  ASSERT_TRUE(Registered(kFull, 2));
  st = sim_->PreStartContainer(kFull, {"fake-0"});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_NE(st.error_message().find("did not answer within 500 ms"), std::string::npos)
      << st.error_message();
}

TEST_F(ContainmentTest, HungScanCostsOnlyItsResourceAndShutdownStillCompletes) {
  StartSim();
  // The second scan (the first resync) never returns.
  StartAgent(Resource(kFull, FakeModule("fake_full"), "hang_scan_after = 2") +
                 Resource(kMinimal, FakeModule("fake_minimal")),
             "200ms", "call_timeout = \"300ms\"\nstart_timeout = \"1s\"");
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(Registered(kMinimal));
  ASSERT_TRUE(agent_->WaitForLog("list_devices hangs now", kWait)) << agent_->Log();
  v1beta1::ContainerAllocateResponse resp;
  EXPECT_EQ(sim_->Allocate(kFull, {"fake-0"}, &resp).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(sim_->Allocate(kMinimal, {"fake-1"}, &resp).ok());
  // Registration needs no module call: both come back after a kubelet restart.
  ASSERT_TRUE(sim_->Restart(50ms).ok());
  ASSERT_TRUE(Registered(kFull, 2));
  ASSERT_TRUE(Registered(kMinimal, 2));
  EXPECT_EQ(sim_->resource(kFull)->devices.size(), 4u);  // the last good list

  std::optional<int> rc = agent_->Stop(SIGTERM, 20s);
  ASSERT_TRUE(rc.has_value()) << "shutdown hung";
  EXPECT_EQ(*rc, 0);
  EXPECT_NE(agent_->Log().find("resource \"fake.example/full\": module \"fake\" did not stop "
                               "within 1000 ms; abandoning it"),
            std::string::npos)
      << agent_->Log();
}

TEST_F(ContainmentTest, HungCreateIsGivenUp) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "hang_create = true") +
                 Resource(kMinimal, FakeModule("fake_minimal")),
             "0s", "start_timeout = \"500ms\"");
  ASSERT_TRUE(Registered(kMinimal));
  ASSERT_TRUE(agent_->WaitForLog("did not finish create() and its first scan within 500 ms", kWait))
      << agent_->Log();
  EXPECT_EQ(sim_->resource_names(), std::vector<std::string>{kMinimal});
}

// Seen in review: a module whose first list_devices() failed left a null
// device list behind: --check-config and Allocate crashed, and the kubelet
// never got a first message. Such a resource is left out and retried; it
// starts once a scan works.
TEST_F(ContainmentTest, FailedFirstScanLeavesTheResourceOutUntilAScanWorks) {
  const std::string not_ready = dir_ / "not-ready";
  WriteFile(not_ready, "");
  const std::string res =
      Resource(kFull, FakeModule("fake_full"), "fail_while = \"" + not_ready + "\"") +
      Resource(kMinimal, FakeModule("fake_minimal"));
  WriteFile(config_path(), Config(res));
  testing::RunResult check = testing::RunDevplugd({"--config", config_path(), "--check-config"});
  EXPECT_EQ(check.exit_code, 78) << check.output;
  EXPECT_NE(check.output.find("first scan failed: the fake bus is not ready"), std::string::npos)
      << check.output;

  StartSim();
  StartAgent(res);
  ASSERT_TRUE(Registered(kMinimal));
  ASSERT_TRUE(agent_->WaitForLog("resource \"fake.example/full\" left out: ", kWait))
      << agent_->Log();
  EXPECT_NE(agent_->Log().find("first scan failed: the fake bus is not ready; retrying in 1 s"),
            std::string::npos)
      << agent_->Log();
  EXPECT_FALSE(sim_->resource(kFull).has_value());
  std::remove(not_ready.c_str());
  ASSERT_TRUE(Registered(kFull));
  ASSERT_TRUE(HealthyIs(kFull, 4, 4));
  EXPECT_TRUE(agent_->WaitForLog("resource \"fake.example/full\": started (attempt ", kWait));
  v1beta1::ContainerAllocateResponse resp;
  EXPECT_TRUE(sim_->Allocate(kFull, {"fake-0"}, &resp).ok());
}

// A module that reports a bad value through config_error() and still
// returns an instance: the configuration error stands (exit 78).
TEST_F(ContainmentTest, ConfigErrorWithASuccessfulCreateIsAConfigError) {
  WriteFile(config_path(),
            Config(Resource(kFull, FakeModule("fake_full"), "late_config_error = true")));
  testing::RunResult r = testing::RunDevplugd({"--config", config_path()});
  EXPECT_EQ(r.exit_code, 78) << r.output;
  EXPECT_NE(r.output.find(config_path() + ":10: resource[0].count: is reported bad, yet create() "
                                          "succeeds"),
            std::string::npos)
      << r.output;
}

TEST_F(ContainmentTest, HungCreateOfARequiredResourceStopsStartup) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "hang_create = true\nrequired = true"), "0s",
             "start_timeout = \"300ms\"");
  std::optional<int> rc = agent_->Wait(kWait);
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 1);
}

}  // namespace
}  // namespace devplug

namespace devplug {
namespace {

TEST_F(ContainmentTest, InvalidDeviceIdsNeverReachTheKubelet) {
  StartSim();
  StartAgent(Resource(kFull, FakeModule("fake_full"), "count = 2\nbad_ids = true"));
  ASSERT_TRUE(Registered(kFull));
  const auto r = sim_->resource(kFull);
  std::vector<std::string> ids;
  for (const auto& d : r->devices) ids.push_back(d.id());
  EXPECT_EQ(ids, (std::vector<std::string>{"caf\xc3\xa9", "fake-0", "fake-1"}));
  const std::string log = agent_->Log();
  const std::string who = "fake.example/full: module " + FakeModule("fake_full") + " reported ";
  for (const char* what : {"a device with an empty ID", "duplicate device ID \"fake-0\"",
                           "is longer than 63 characters", "a device ID with a control character",
                           "a device ID with malformed UTF-8"})
    EXPECT_NE(log.find(what), std::string::npos) << what << "\n" << log;
  EXPECT_NE(log.find(who), std::string::npos) << log;
  // Each of the four malformed forms (an invalid byte, an overlong form, a
  // surrogate, a code point above U+10FFFF) is refused on its own.
  size_t malformed = 0;
  for (size_t at = log.find("malformed UTF-8"); at != std::string::npos;
       at = log.find("malformed UTF-8", at + 1))
    ++malformed;
  EXPECT_EQ(malformed, 4u) << log;
  // The strict simulator saw nothing to complain about (checked in TearDown).
}

}  // namespace
}  // namespace devplug
