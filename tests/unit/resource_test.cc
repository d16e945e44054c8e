// Resource over a fake agent (Resource::Services): a real module (the fake
// module's variants), a real gRPC server on a real socket, and the mailbox
// the agent would read; the test plays the main loop.
#include "resource.h"

#include <poll.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <utility>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
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

// A front end that says what its resource asked of it, in order, and
// whose hooks record what the instance published.
class FakeFrontEnd final : public front_end::FrontEnd {
 public:
  struct Shared {
    std::mutex mu;
    std::vector<std::string> log;
    size_t published = 0;  // devices in the last list the instance published
    Status load = OkStatus();
    void Add(std::string s) {
      std::lock_guard lock(mu);
      log.push_back(std::move(s));
    }
  };
  explicit FakeFrontEnd(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  Status ModuleLoaded(const config::AgentConfig&, const modules::LoadedModule& m,
                      const front_end::FrontEnd*) override {
    shared_->Add(StrCat("loaded ", m.name()));
    return shared_->load;
  }
  front_end::InstanceHooks Launch(const config::AgentConfig&, const modules::LoadedModule&,
                                  const front_end::FrontEnd*) override {
    shared_->Add("launch");
    return {.lists = std::make_shared<Sink>(shared_), .pods = nullptr, .releases = nullptr};
  }
  void Serve(modules::DeviceSource* instance, bool commit) override {
    shared_->Add(StrCat("serve ", instance->resource_name(), commit ? " commit" : ""));
  }
  void Clear(const modules::DeviceSource*) override { shared_->Add("clear"); }
  void Register(grpc::ServerBuilder& builder, modules::DeviceSource*,
                const config::AgentConfig&) override {
    shared_->Add("register");
    builder.RegisterService(&service_);  // a server needs one: each call UNIMPLEMENTED
  }
  v1beta1::DevicePluginOptions RegisterOptions(const modules::DeviceSource&) const override {
    return {};
  }
  pluginregistration::PluginInfo Info(const std::string& socket_path) const override {
    shared_->Add("info");
    pluginregistration::PluginInfo info;
    info.set_endpoint(socket_path);
    return info;
  }
  void ExpectStream(uint64_t) override {}
  bool Connected(uint64_t) const override { return false; }
  void EndCalls() override { shared_->Add("end calls"); }
  void DropServices(bool exiting) override {
    shared_->Add(exiting ? "drop services exiting" : "drop services");
  }
  void Withdraw(const modules::DeviceSource*, bool exiting) override {
    shared_->Add(exiting ? "withdraw exiting" : "withdraw");
  }
  bool WaitStopped(Clock::time_point) override { return true; }
  void RegistrationConfirmed() override { shared_->Add("confirmed"); }
  void HandOver(const front_end::FrontEnd&) override { shared_->Add("hand over"); }
  bool ApplyAgentKeys(const config::AgentConfig&, lifecycle::ReleaseCoordinator&,
                      modules::DeviceSource* serving) override {
    shared_->Add(serving ? "agent keys serving" : "agent keys");
    return false;
  }
  std::vector<std::string> Holders() const override { return {}; }
  std::vector<std::pair<std::string, cdi::Kind>> Specs() const override { return {}; }
  bool tracking() const override { return false; }
  lifecycle::ReleaseTracker* TrackerForList(bool, bool) const override { return nullptr; }
  void TrackerChanged(lifecycle::ReleaseCoordinator&, Clock::time_point,
                      modules::DeviceSource*) override {}
  void Release(const std::vector<std::string>& ids, const PodSnapshot&,
               modules::DeviceSource*) override {
    shared_->Add("release " + StrJoin(ids, ","));
  }
  void View(ops::ResourceView& rv) const override { rv.last_error = "the fake's view"; }

 private:
  class Sink final : public modules::ListSink {
   public:
    explicit Sink(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
    std::string Accept(const DeviceList&) override { return ""; }
    void Publish(const DeviceListPtr& list) override {
      std::lock_guard lock(shared_->mu);
      shared_->published = list->size();
    }

   private:
    const std::shared_ptr<Shared> shared_;
  };
  const std::shared_ptr<Shared> shared_;
  v1beta1::DevicePlugin::Service service_;
};

class ResourceTest : public ::testing::Test {
 protected:
  // One [[resource]] of `module` (a fake module variant) with `keys`.
  std::unique_ptr<Resource> Make(const std::string& module, const std::string& keys = "",
                                 bool staged = false, const std::string& agent_keys = "",
                                 const Resource::FrontEndFactory& front_end = {}) {
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
                                      staged, front_end);
  }
  // The same over a fake front end, which says what it was asked.
  std::unique_ptr<Resource> MakeWithFake(const std::string& module, bool staged = false,
                                         const std::string& keys = "") {
    return Make(module, keys, staged, "",
                [this](front_end::Context) { return std::make_unique<FakeFrontEnd>(fake_); });
  }
  std::vector<std::string> Asked() {
    std::lock_guard lock(fake_->mu);
    return std::exchange(fake_->log, {});
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
  std::shared_ptr<FakeFrontEnd::Shared> fake_ = std::make_shared<FakeFrontEnd::Shared>();
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

// Resource on its own, over a fake front end: the front end is asked at each
// step of the resource's life, in order, and what it returns is used: the
// instance publishes into its sink, the view is its view.
TEST_F(ResourceTest, ItsFrontEndIsAskedAtEachStepOfItsLife) {
  auto r = MakeWithFake("fake_full", false, "count = 2");
  Start(*r);
  EXPECT_EQ(Asked(), (std::vector<std::string>{"loaded fake", "launch", "serve fake.example/dev"}));
  {
    std::lock_guard lock(fake_->mu);
    EXPECT_EQ(fake_->published, 2U) << "the instance publishes into the front end's sink";
  }
  r->registrar().Start();
  EXPECT_TRUE(IsSocket(r->socket_path()));
  EXPECT_EQ(Asked(), std::vector<std::string>{"register"});
  EXPECT_EQ(r->View("/unused").last_error, "the fake's view");
  r->Release({"fake-0"}, PodSnapshot{});
  EXPECT_EQ(Asked(), std::vector<std::string>{"release fake-0"});
  r->Withdraw();
  EXPECT_EQ(Asked(), (std::vector<std::string>{"end calls", "drop services", "withdraw"}));
  r->RequestStop();
  EXPECT_TRUE(r->StopModule(std::chrono::steady_clock::now() + 10s));
  EXPECT_EQ(Asked(), std::vector<std::string>{"clear"});
}

// A staged resource is served by its front end only once the reload
// commits it; a plugin-watcher registration announces the front end's
// PluginInfo.
TEST_F(ResourceTest, AStagedResourcesFrontEndServesOnlyOnceCommitted) {
  auto r = MakeWithFake("fake_full", /*staged=*/true);
  Start(*r);
  EXPECT_EQ(Asked(), (std::vector<std::string>{"loaded fake", "launch"}));
  r->Commit();
  EXPECT_EQ(Asked(), std::vector<std::string>{"serve fake.example/dev commit"});
}

// A front end that cannot serve the module (DRA without an API server)
// fails the load, and the resource keeps no module.
TEST_F(ResourceTest, AFrontEndThatRefusesTheModuleFailsItsLoad) {
  fake_->load = FailedPreconditionError("no API server");
  auto r = MakeWithFake("fake_full");
  const Status st = r->LoadModule();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), "no API server");
  EXPECT_EQ(r->module(), nullptr);
}

}  // namespace
}  // namespace devplug
