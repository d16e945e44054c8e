// Resource over a fake agent (Resource::Services): a real module (the fake
// module's variants), a real gRPC server on a real socket, and the mailbox
// the agent would read; the test plays the main loop.
#include "resource.h"

#include <poll.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <memory>

#include "test_util.h"

namespace devplug {
namespace {

using namespace std::chrono_literals;
using devplug::testing::FakeModuleDir;
using devplug::testing::TempDir;

class FakeAgent : public Resource::Services {
 public:
  explicit FakeAgent(config::AgentConfig cfg) : cfg_(std::move(cfg)) {}
  const config::AgentConfig& running() const override { return cfg_; }
  std::string KubeletSocketPath() const override { return cfg_.plugin_dir + "/kubelet.sock"; }
  std::optional<kubelet::KubeletId> KubeletSocketIdentity() const override { return std::nullopt; }
  bool PluginDirGone() override { return false; }
  Status WatchRegistry() override {
    ++registry_watches;
    return OkStatus();
  }
  const std::shared_ptr<Mailbox>& mailbox() const override { return mailbox_; }
  Timers& timers() override { return timers_; }
  const std::shared_ptr<kubelet::PodResourcesClient>& pods() const override { return pods_; }
  std::shared_ptr<udev::PathWatch> path_watch() const override { return nullptr; }
  InFlight& registers() override { return registers_; }

  // The next event of `kind` (others are dropped), within `limit`.
  std::optional<AgentEvent> Next(AgentEvent::Kind kind, std::chrono::milliseconds limit = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      for (AgentEvent& ev : mailbox_->Drain())
        if (ev.kind == kind) return ev;
      pollfd p{mailbox_->fd(), POLLIN, 0};
      (void)poll(&p, 1, 50);
    }
    return std::nullopt;
  }

  int registry_watches = 0;

 private:
  config::AgentConfig cfg_;
  std::shared_ptr<Mailbox> mailbox_ = std::make_shared<Mailbox>();
  Timers timers_;
  std::shared_ptr<kubelet::PodResourcesClient> pods_ =
      std::make_shared<kubelet::PodResourcesClient>(kubelet::PodResourcesClient::Options{});
  InFlight registers_;
};

class ResourceTest : public ::testing::Test {
 protected:
  // One [[resource]] of `module` (a fake module variant) with `keys`.
  std::unique_ptr<Resource> Make(const std::string& module, const std::string& keys = "",
                                 bool staged = false, const std::string& agent_keys = "") {
    config::LoadOptions o;
    o.default_module_dir = FakeModuleDir();
    auto cfg = config::LoadString("[agent]\nplugin_dir = \"" + dir_.path() + "\"\n" + agent_keys +
                                      "\n[[resource]]\nname = \"fake.example/dev\"\nmodule = \"" +
                                      module + "\"\n" + keys,
                                  "devplug.toml", o);
    EXPECT_TRUE(cfg.ok()) << cfg.status().message();
    agent_ = std::make_unique<FakeAgent>(*cfg);
    return std::make_unique<Resource>(*agent_, cfg->resources[0], 1, 0,
                                      std::make_shared<ops::ResourceMetrics>("fake.example/dev"),
                                      staged);
  }
  // Launches it and plays the main loop until create() has answered.
  void Start(Resource& r) {
    ASSERT_TRUE(r.LoadModule().ok());
    r.Launch(agent_->running());
    ASSERT_TRUE(r.starting());
    auto ev = agent_->Next(AgentEvent::kCreated);
    ASSERT_TRUE(ev.has_value()) << "create() never answered";
    EXPECT_EQ(ev->resource, r.id());
    EXPECT_TRUE(r.Created(ev->number, ev->status));
    EXPECT_FALSE(r.starting());
  }
  static bool IsSocket(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
  }

  TempDir dir_;
  std::unique_ptr<FakeAgent> agent_;
};

TEST_F(ResourceTest, ACreatedInstanceServesItsDevicesAtItsSocketUntilWithdrawn) {
  auto r = Make("fake_full", "count = 3");
  EXPECT_EQ(r->socket_path(), dir_.path() + "/devplug-fake.example_dev.sock");
  Start(*r);
  ASSERT_NE(r->instance(), nullptr);
  EXPECT_TRUE(r->failure().ok());
  ASSERT_NE(r->instance()->devices(), nullptr);
  EXPECT_EQ(r->instance()->devices()->size(), 3u);

  // Served; no kubelet.sock, so the registrar waits for one.
  r->registrar().Start();
  EXPECT_TRUE(IsSocket(r->socket_path()));
  EXPECT_FALSE(IsSocket(Resource::BindPath(r->socket_path()))) << "renamed into place";
  EXPECT_EQ(r->registrar().state(), kubelet::Registrar::State::kWaitingKubelet);
  const ops::ResourceView v = r->View("/unused");
  EXPECT_TRUE(v.running);
  EXPECT_FALSE(v.failed);
  EXPECT_EQ(v.module, "fake");
  EXPECT_EQ(v.socket, r->socket_path());
  EXPECT_EQ(v.devices->size(), 3u);

  r->Withdraw();
  EXPECT_FALSE(IsSocket(r->socket_path()));
  EXPECT_EQ(r->registrar().state(), kubelet::Registrar::State::kDown);
  r->RequestStop();
  EXPECT_TRUE(r->StopModule(std::chrono::steady_clock::now() + 10s));
  EXPECT_EQ(r->instance(), nullptr);
}

TEST_F(ResourceTest, AWithdrawnSocketThatIsNoLongerOursIsLeftAlone) {
  auto r = Make("fake_full");
  Start(*r);
  r->registrar().Start();
  ASSERT_TRUE(IsSocket(r->socket_path()));
  // Someone else's file at the same name now (another devplugd, a
  // kubelet clean-up and a new socket).
  ASSERT_EQ(std::remove(r->socket_path().c_str()), 0);
  devplug::testing::WriteFile(r->socket_path(), "theirs");
  r->Withdraw();
  EXPECT_EQ(devplug::testing::ReadFile(r->socket_path()), "theirs");
}

TEST_F(ResourceTest, AFailedCreateIsLeftOutAndRetriedWithBackoff) {
  auto r = Make("fake_createfail");
  const auto before = std::chrono::steady_clock::now();
  Start(*r);
  EXPECT_EQ(r->instance(), nullptr);
  EXPECT_FALSE(r->failure().ok());
  EXPECT_TRUE(r->View("/unused").retrying);
  // The first retry, one second on.
  const auto next = r->NextDeadline();
  ASSERT_TRUE(next.has_value());
  EXPECT_GE(*next, before + 1s);
  EXPECT_FALSE(r->OnTimer(*next - 1ms));
  EXPECT_TRUE(r->OnTimer(*next));
  EXPECT_FALSE(r->NextDeadline().has_value()) << "taken: the agent launches it again";
  // Failing again doubles the wait.
  r->Launch(agent_->running());
  auto ev = agent_->Next(AgentEvent::kCreated);
  ASSERT_TRUE(ev.has_value());
  const auto again = std::chrono::steady_clock::now();
  ASSERT_TRUE(r->Created(ev->number, ev->status));
  ASSERT_TRUE(r->NextDeadline().has_value());
  EXPECT_GE(*r->NextDeadline(), again + 2s);
}

TEST_F(ResourceTest, ACreateStuckPastItsDeadlineIsGivenUpAndNotRetried) {
  auto r = Make("fake_full", "hang_create = true", false, "start_timeout = \"100ms\"");
  ASSERT_TRUE(r->LoadModule().ok());
  r->Launch(agent_->running());
  ASSERT_TRUE(r->starting());
  const auto deadline = r->NextDeadline();
  ASSERT_TRUE(deadline.has_value());
  EXPECT_FALSE(r->OnTimer(*deadline - 1ms));
  EXPECT_TRUE(r->starting()) << "not yet";
  EXPECT_FALSE(r->OnTimer(*deadline));
  EXPECT_FALSE(r->starting());
  EXPECT_EQ(r->failure().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(r->NextDeadline().has_value()) << "another attempt strands another thread";
}

TEST_F(ResourceTest, AStagedResourceKeepsItsFailureForTheReloadAndIsNotRetried) {
  auto r = Make("fake_createfail", "", /*staged=*/true);
  Start(*r);
  EXPECT_FALSE(r->failure().ok());
  EXPECT_FALSE(r->NextDeadline().has_value());
  EXPECT_FALSE(r->View("/unused").retrying);
}

TEST_F(ResourceTest, AStaleCreatedAnswerIsIgnored) {
  auto r = Make("fake_full");
  Start(*r);
  EXPECT_FALSE(r->Created(99, OkStatus())) << "not the launch under way";
  EXPECT_NE(r->instance(), nullptr);
}

TEST_F(ResourceTest, APluginWatcherResourceWatchesItsFolderWhenServed) {
  auto r = Make("fake_full", "registration = \"plugin-watcher\"", false,
                "plugins_registry_dir = \"" + dir_.path() + "/registry\"\n");
  EXPECT_EQ(r->socket_path(), dir_.path() + "/registry/devplug-fake.example_dev.sock");
  Start(*r);
  ASSERT_EQ(mkdir((dir_.path() + "/registry").c_str(), 0755), 0);
  r->registrar().Start();
  EXPECT_EQ(agent_->registry_watches, 1);
  EXPECT_TRUE(IsSocket(r->socket_path()));
  r->Withdraw();
  EXPECT_FALSE(IsSocket(r->socket_path()));
}

}  // namespace
}  // namespace devplug
