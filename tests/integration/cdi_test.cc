// Devices by CDI name through devplugd and the kubelet simulator: the spec
// follows the device list and names no device before the kubelet's list
// does, Allocate answers with names and the annotation, only devplugd's own
// files are removed, and a reload that turns CDI off takes its spec away
// while a refused one leaves it.
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "agent_fixture.h"
#include "cdi/spec.h"

namespace devplug {
namespace {

constexpr char kSerial[] = "example.com/serial";
constexpr char kSpecFile[] = "devplug-devplug.example.com-serial.json";

class CdiAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    if (!testing::IsRoot()) GTEST_SKIP() << "mknod needs root";
    AgentTest::SetUp();
  }
  std::string cdi_dir() const { return host_root() + "/run/cdi"; }
  std::string spec_path() const { return cdi_dir() + "/" + kSpecFile; }
  std::vector<std::string> SpecNames() const {
    std::vector<std::string> names;
    if (!testing::FileExists(spec_path())) return names;
    const auto spec = nlohmann::json::parse(testing::ReadFile(spec_path()));
    for (const auto& d : spec["devices"]) names.push_back(d["name"]);
    return names;
  }
  bool Node(const std::string& path, unsigned major, unsigned minor) {
    return testing::MakeCharDevice(host_root() + path, major, minor);
  }
  std::string Serial(const std::string& cdi) {
    return Resource(kSerial, "generic", "paths = [\"/dev/ttyUSB*\"]\ncdi = \"" + cdi + "\"");
  }
};

TEST_F(CdiAgentTest, TheSpecNamesNoDeviceTheKubeletsListLacks) {
  ASSERT_TRUE(Node("/dev/ttyUSB0", 188, 0));
  ASSERT_TRUE(Node("/dev/ttyUSB1", 188, 1));
  testing::WriteFile(cdi_dir() + "/devplug-left-by-an-old-config.json", "{}");
  testing::WriteFile(cdi_dir() + "/vendor.yaml", "not ours");
  // Each list the kubelet receives, with what the spec named at that moment
  // (shared: the simulator's threads may call until it stops, after this
  // function returned).
  struct Seen {
    std::mutex mu;
    std::vector<std::pair<std::string, std::vector<std::string>>> lists;
  };
  auto seen = std::make_shared<Seen>();
  sim_on_event_ = [this, seen](const std::string& line) {
    if (line.find(std::string("kubelet: ") + kSerial + ": ") != 0 ||
        line.find(" devices, ") == std::string::npos)
      return;
    auto names = SpecNames();
    std::lock_guard lock(seen->mu);
    seen->lists.emplace_back(line, std::move(names));
  };
  StartSim();
  StartAgent(Serial("both"), "60s", "cdi_dir = \"/run/cdi\"");
  ASSERT_TRUE(Registered(kSerial));
  ASSERT_TRUE(HealthyIs(kSerial, 2, 2));
  EXPECT_EQ(SpecNames(), (std::vector<std::string>{"ttyUSB0", "ttyUSB1"}));
  EXPECT_FALSE(testing::FileExists(cdi_dir() + "/devplug-left-by-an-old-config.json"));
  EXPECT_TRUE(testing::FileExists(cdi_dir() + "/vendor.yaml"));
  const auto spec = nlohmann::json::parse(testing::ReadFile(spec_path()));
  EXPECT_TRUE(cdi::Validate(spec).empty()) << spec.dump(1);
  const auto& node = spec["devices"][1]["containerEdits"]["deviceNodes"][0];
  EXPECT_EQ(node["hostPath"], "/dev/ttyUSB1");  // a host path: host_root is ours only
  EXPECT_EQ(node["major"], 188);
  EXPECT_EQ(node["minor"], 1);

  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(sim_->Allocate(kSerial, {"ttyUSB1"}, &resp).ok());
  ASSERT_EQ(resp.cdi_devices_size(), 1);
  EXPECT_EQ(resp.cdi_devices(0).name(), "devplug.example.com/serial=ttyUSB1");
  EXPECT_EQ(resp.annotations().at(cdi::AnnotationKey(kSerial)),
            "devplug.example.com/serial=ttyUSB1");
  ASSERT_EQ(resp.devices_size(), 1);  // the classic answer stays beside
  const auto status =
      testing::RunProcess({testing::DevplugctlPath(), "status", "--socket", control_socket()});
  EXPECT_NE(status.output.find("CDI: devplug.example.com/serial, 2 named in"), std::string::npos)
      << status.output;
  EXPECT_NE(status.output.find(std::string(kSpecFile)), std::string::npos) << status.output;

  std::remove((host_root() + "/dev/ttyUSB1").c_str());
  ASSERT_TRUE(HealthyIs(kSerial, 1, 1));
  EXPECT_EQ(SpecNames(), (std::vector<std::string>{"ttyUSB0"}));
  // The simulator reports the one-device list just after taking it in.
  std::optional<std::pair<std::string, std::vector<std::string>>> one;
  for (auto end = std::chrono::steady_clock::now() + kWait;
       !one && std::chrono::steady_clock::now() < end;
       std::this_thread::sleep_for(std::chrono::milliseconds(5))) {
    std::lock_guard lock(seen->mu);
    for (const auto& l : seen->lists)
      if (l.first.find(": 1 devices, ") != std::string::npos) one = l;
  }
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->second, (std::vector<std::string>{"ttyUSB0"})) << one->first;
}

TEST_F(CdiAgentTest, AReloadThatTurnsCdiOffTakesTheSpecAwayARefusedOneLeavesIt) {
  ASSERT_TRUE(Node("/dev/ttyUSB0", 188, 0));
  StartSim();
  StartAgent(Serial("cri"), "60s", "cdi_dir = \"/run/cdi\"");
  ASSERT_TRUE(Registered(kSerial));
  ASSERT_TRUE(HealthyIs(kSerial, 1, 1));
  const std::string before = testing::ReadFile(spec_path());
  ASSERT_EQ(SpecNames(), std::vector<std::string>{"ttyUSB0"});

  testing::WriteFile(config_path(), Config(Serial("sometimes"), "60s", "cdi_dir = \"/run/cdi\""));
  EXPECT_FALSE(Reload());
  EXPECT_EQ(testing::ReadFile(spec_path()), before);

  testing::WriteFile(config_path(), Config(Serial("off"), "60s", "cdi_dir = \"/run/cdi\""));
  ASSERT_TRUE(Reload());
  EXPECT_FALSE(testing::FileExists(spec_path()));
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(Registered(kSerial, 2));
  ASSERT_TRUE(sim_->Allocate(kSerial, {"ttyUSB0"}, &resp).ok());
  EXPECT_EQ(resp.cdi_devices_size(), 0);
  EXPECT_EQ(resp.devices_size(), 1);
}

}  // namespace
}  // namespace devplug
