// The integration fixture: the real devplugd as a child process, the kubelet
// simulator in this process, real Unix sockets in a temporary directory.
#pragma once

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cdi/spec.h"
#include "kubelet_sim.h"
#include "ops/control.h"
#include "test_util.h"

namespace devplug {

using namespace std::chrono_literals;
using sim::KubeletSim;
using testing::AgentProcess;
using testing::FileExists;
using testing::TempDir;
using testing::WriteFile;

// Generous: CI machines are small and busy. Nothing here measures speed.
inline constexpr auto kWait = 20s;

inline constexpr char kKvm[] = "devices.kubevirt.io/kvm";
inline constexpr char kFull[] = "fake.example/full";
inline constexpr char kMinimal[] = "fake.example/minimal";

inline std::string FakeModule(const std::string& name) {
  return testing::FakeModuleDir() + "/" + name + ".so";
}

// Listens where sd_notify() sends, as systemd does for Type=notify units.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    timeval tv{0, 100000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~NotifySocket() { close(fd_); }
  // Collects messages until `needle` appears in one, or the time is up.
  bool WaitFor(const std::string& needle, std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof(buf) - 1, 0);
      if (n <= 0) continue;
      buf[n] = '\0';
      all_ += std::string(buf) + "\n";
      if (all_.find(needle) != std::string::npos) return true;
    }
    return all_.find(needle) != std::string::npos;
  }
  const std::string& all() const { return all_; }
  // Forgets what came so far (WaitFor then sees only what comes next).
  void Clear() { all_.clear(); }

 private:
  std::string path_;
  int fd_ = -1;
  std::string all_;
};

class AgentTest : public ::testing::Test {
 protected:
  std::string plugin_dir() const { return dir_ / "p"; }
  std::string host_root() const { return dir_ / "host"; }
  std::string config_path() const { return dir_ / "etc/devplug.toml"; }

  void SetUp() override { std::filesystem::create_directories(host_root()); }

  void TearDown() override {
    if (agent_ && agent_->Running()) {
      // Every test ends with a clean shutdown (under the sanitizers this is
      // also where leaks and errors at exit surface).
      EXPECT_EQ(agent_->Stop(SIGTERM, 15s), std::optional<int>(0)) << agent_->Log();
    }
    if (agent_) {
      KeepLog();
      if (!agent_->ending().empty()) agent_log_ += "(devplugd " + agent_->ending() + ")\n";
    }
    agent_.reset();
    if (sim_) {
      sim_->Stop();
      EXPECT_TRUE(sim_->violations().empty()) << Violations();
    }
    if (HasFailure() && agent_log_.empty() == false)
      std::fprintf(stderr, "agent log:\n%s", agent_log_.c_str());
  }

  std::string Violations() const {
    std::string out;
    for (const auto& v : sim_->violations()) out += v + "\n";
    return out;
  }

  void StartSim() {
    KubeletSim::Options o;
    o.dir = plugin_dir();
    o.owns_dir = true;
    o.pod_resources_socket = sim_pod_resources_;
    o.pod_resources_qps = sim_pod_resources_qps_;
    o.pod_resources_burst = sim_pod_resources_burst_;
    o.plugins_registry = sim_plugins_registry_;
    o.reconcile_period = sim_reconcile_period_;
    o.refuse_probes = sim_refuse_probes_;
    o.on_event = sim_on_event_;
    sim_ = std::make_unique<KubeletSim>(o);
    ASSERT_TRUE(sim_->Start().ok());
  }

  // Nine lines of [agent] table (the eighth is `extra`, one agent key or
  // nothing; the ninth this test's state folder), then the resources from
  // line 10 on.
  std::string Config(const std::string& resources, const std::string& resync = "0s",
                     const std::string& extra = "") const {
    return "[agent]\nplugin_dir = \"" + plugin_dir() + "\"\nmodule_dir = \"" +
           testing::ModuleDir() + "\"\nhost_root = \"" + host_root() +
           "\"\nlog_level = \"debug\"\nresync_interval = \"" + resync + "\"\ncontrol_socket = \"" +
           control_socket() + "\"\n" + extra + "\n" +
           // Each test's own state folder (and its one-devplugd lock).
           (extra.find("dra_state_dir") == std::string::npos
                ? "dra_state_dir = \"" + std::string(dir_ / "state") + "\"\n"
                : std::string()) +
           resources;
  }
  std::string control_socket() const { return dir_ / "control.sock"; }
  // The running configuration, copied with a state folder of its own: a
  // second devplugd that is not refused by the first one's lock (to test
  // what else keeps two apart). Its path.
  std::string ConfigWithOwnState(const std::string& state = "state2") const {
    std::string text = testing::ReadFile(config_path());
    const std::string mine = "dra_state_dir = \"" + std::string(dir_ / "state") + "\"";
    const size_t at = text.find(mine);
    if (at != std::string::npos)
      text.replace(at, mine.size(), "dra_state_dir = \"" + std::string(dir_ / state) + "\"");
    const std::string path = dir_ / ("etc/" + state + ".toml");
    WriteFile(path, text);
    return path;
  }

  void StartAgent(const std::string& resources, const std::string& resync = "0s",
                  const std::string& extra = "") {
    WriteFile(config_path(), Config(resources, resync, extra));
    agent_ = std::make_unique<AgentProcess>(std::vector<std::string>{"--config", config_path()});
  }

  void KeepLog() {
    if (agent_) agent_log_ = agent_->Log();
  }

  bool Registered(const std::string& name, uint64_t n = 1) {
    const bool ok = sim_->WaitForResource(name, n, kWait);
    if (!ok) KeepLog();
    return ok;
  }

  // Waits until devplugd itself counts `name` as registered (its control
  // socket says so). The kubelet's side sees a registration a moment before
  // devplugd has read the kubelet's answer; STATUS= and `devplugctl status`
  // follow devplugd's view.
  bool AgentRegistered(const std::string& name) {
    const std::string request = "{\"status\": {\"resource\": \"" + name + "\"}}";
    const auto end = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < end) {
      auto answer = ops::ControlRequest(control_socket(), request, std::chrono::seconds(5));
      if (answer.ok() && answer->find("\"registered\":true") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    KeepLog();
    return false;
  }

  // A sample's value from `devplugctl metrics` (`prefix` ends right before
  // the value); -1 when absent.
  double Metric(const std::string& prefix) {
    auto m =
        testing::RunProcess({testing::DevplugctlPath(), "metrics", "--socket", control_socket()});
    const size_t at = m.output.find(prefix);
    if (m.exit_code != 0 || at == std::string::npos) return -1;
    return std::strtod(m.output.c_str() + at + prefix.size(), nullptr);
  }

  // The [agent] lines that give every resource a CDI spec in
  // host_root/run/cdi.
  static std::string CdiOn() { return "\ncdi = \"cri\"\ncdi_dir = \"/run/cdi\"\n"; }
  // `resource`'s CDI spec as written under CdiOn(), with every rule the CDI
  // library applies checked; the device names it holds go to `names`.
  nlohmann::json CheckedCdiSpec(const std::string& resource, std::vector<std::string>* names) {
    auto kind = cdi::KindOf(resource);
    EXPECT_TRUE(kind.ok()) << resource;
    if (!kind.ok()) return {};
    const std::string path = host_root() + "/run/cdi/" + cdi::SpecFileName(*kind);
    if (!testing::FileExists(path)) {
      ADD_FAILURE() << "no CDI spec " << path;
      return {};
    }
    auto spec = nlohmann::json::parse(testing::ReadFile(path));
    EXPECT_EQ(StrJoin(cdi::Validate(spec), "\n"), "") << spec.dump(1);
    EXPECT_EQ(spec["kind"], kind->str());
    names->clear();
    for (const auto& d : spec["devices"]) names->push_back(d["name"]);
    return spec;
  }
  // The host paths of a spec device's nodes.
  static std::vector<std::string> SpecNodes(const nlohmann::json& device) {
    std::vector<std::string> out;
    for (const auto& n : device["containerEdits"]["deviceNodes"]) out.push_back(n["hostPath"]);
    return out;
  }

  // Polls `f` until it holds, up to kWait.
  template <class F>
  bool Eventually(F f) {
    for (auto end = std::chrono::steady_clock::now() + kWait;
         std::chrono::steady_clock::now() < end;
         std::this_thread::sleep_for(std::chrono::milliseconds(50)))
      if (f()) return true;
    KeepLog();
    return false;
  }

  // Waits until the kubelet holds `total` devices of `name`, `healthy` of
  // them Healthy, on an open stream.
  bool HealthyIs(const std::string& name, size_t total, size_t healthy) {
    const bool ok = sim_->WaitUntil(
        [&](const auto& rs) {
          auto it = rs.find(name);
          return it != rs.end() && it->second.connected && it->second.devices.size() == total &&
                 it->second.healthy() == healthy;
        },
        kWait);
    if (!ok) KeepLog();
    return ok;
  }

  static size_t Count(const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1))
      ++n;
    return n;
  }

  // Sends SIGHUP and waits for its outcome: true when the new configuration
  // was applied, false when it was refused.
  bool Reload() {
    static constexpr char kApplied[] = "reloaded: ";
    static constexpr char kRefused[] = "reload failed, the old configuration keeps running:";
    const std::string before = agent_->Log();
    const size_t applied = Count(before, kApplied), refused = Count(before, kRefused);
    EXPECT_EQ(kill(agent_->pid(), SIGHUP), 0);
    const auto end = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < end) {
      const std::string log = agent_->Log();
      if (Count(log, kApplied) > applied) return true;
      if (Count(log, kRefused) > refused) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "no reload outcome within " << kWait.count() << " s\n" << agent_->Log();
    return false;
  }

  static std::string Resource(const std::string& name, const std::string& module,
                              const std::string& extra = "") {
    return "[[resource]]\nname = \"" + name + "\"\nmodule = \"" + module + "\"\n" + extra + "\n";
  }

  TempDir dir_;
  // Told everything the simulator sees, on its threads (set before StartSim).
  std::function<void(const std::string&)> sim_on_event_;
  // The simulator also serves PodResources here when set.
  std::string sim_pod_resources_;
  double sim_pod_resources_qps_ = 100;
  int sim_pod_resources_burst_ = 10;
  // The simulator also runs the plugin watcher on this folder when set.
  std::string sim_plugins_registry_;
  std::chrono::milliseconds sim_reconcile_period_{1000};
  std::string sim_refuse_probes_;
  std::unique_ptr<KubeletSim> sim_;
  std::unique_ptr<AgentProcess> agent_;
  std::string agent_log_;
};

}  // namespace devplug
