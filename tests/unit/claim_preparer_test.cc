// dra::ClaimPreparer over a fake DeviceSource (the front ends' seam) and
// the fake API server: what happens to a module call that misses its
// deadline, and to a release that outlives the kubelet's wait. The fake
// source runs its "module code" on one thread of its own, in order, as a
// module instance's worker does; gates hold a call inside the module until
// the test opens them, so no outcome depends on how fast this machine is.
#include "dra/claim_preparer.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "test_util.h"

namespace devplug::dra {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
using devplug::testing::ReadFile;
using devplug::testing::TempDir;

constexpr char kClaims[] = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";
constexpr char kDriver[] = "dra.fake.example";

// Holds a module call until opened; says whether one is inside.
class Gate {
 public:
  void Pass() {
    std::unique_lock lock(mu_);
    ++inside_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool WaitInside(std::chrono::milliseconds t) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, t, [&] { return inside_ > 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int inside_ = 0;
};

class FakeSource final : public modules::DeviceSource {
 public:
  FakeSource() : thread_([this] { Loop(); }) {
    auto list = std::make_shared<DeviceList>();
    for (const char* id : {"fake-0", "fake-1"}) {
      Device d;
      d.id = id;
      d.healthy = true;
      list->push_back(d);
    }
    list_ = list;
  }
  ~FakeSource() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }

  // The next call of `what` ("allocate", "pre_start", "release") waits
  // inside the module for `gate`.
  void HoldNext(const std::string& what, std::shared_ptr<Gate> gate) {
    std::lock_guard lock(mu_);
    gates_[what] = std::move(gate);
  }
  // What module code ran, in order: "allocate fake-0", "release fake-0".
  std::vector<std::string> log() const {
    std::lock_guard lock(mu_);
    return log_;
  }
  int Count(const std::string& entry) const {
    const auto l = log();
    return static_cast<int>(std::count(l.begin(), l.end(), entry));
  }
  // Waits until nothing is queued or running.
  void Drain() {
    std::promise<void> p;
    Post([&] { p.set_value(); });
    p.get_future().wait();
  }

  const std::string& resource_name() const override { return name_; }
  DeviceListPtr devices() const override { return list_; }
  bool module_allocates() const override { return true; }
  bool has_preferred_allocation() const override { return false; }
  bool needs_pre_start() const override { return true; }
  bool runs_pre_start() const override { return true; }
  bool tracks_releases() const override { return true; }

  void Allocate(std::vector<std::string> ids, std::function<void(StatusOr<Recipe>)> done,
                std::function<bool()> wanted) override {
    Post([this, ids, done, wanted] {
      if (wanted && !wanted()) return;
      Run("allocate", ids);
      Recipe r;
      for (const std::string& id : ids) r.envs.emplace_back("FAKE_" + id.substr(5), id);
      done(r);
    });
  }
  void PreferredAllocation(std::vector<std::string>, std::vector<std::string>, int32_t,
                           std::function<void(StatusOr<std::vector<std::string>>)> done,
                           std::function<bool()>) override {
    done(UnimplementedError("none"));
  }
  std::shared_ptr<const modules::LaneWait> PreStart(std::vector<std::string> ids,
                                                    std::function<void(Status)> done,
                                                    std::function<bool()> wanted) override {
    Post([this, ids, done, wanted] {
      if (wanted && !wanted()) return;
      Run("pre_start", ids);
      done(OkStatus());
    });
    return nullptr;
  }
  void Release(std::vector<std::string> ids,
               std::function<void(int, const std::string&)> done) override {
    Post([this, ids, done] {
      Run("release", ids);
      if (done) done(0, "");
    });
  }
  void Republish() override {}

 private:
  void Post(std::function<void()> task) {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
    cv_.notify_all();
  }
  void Run(const std::string& what, const std::vector<std::string>& ids) {
    std::shared_ptr<Gate> gate;
    {
      std::lock_guard lock(mu_);
      if (auto it = gates_.find(what); it != gates_.end()) {
        gate = it->second;
        gates_.erase(it);
      }
    }
    if (gate) gate->Pass();
    std::lock_guard lock(mu_);
    log_.push_back(what + " " + StrJoin(ids, ","));
  }
  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  const std::string name_ = "fake.example/dra";
  DeviceListPtr list_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::map<std::string, std::shared_ptr<Gate>> gates_;
  std::vector<std::string> log_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is made
};

class ClaimPreparerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto api = devplug::testing::StartFakeApiServer(DEVPLUG_FAKE_APISERVER, dir_ / "port",
                                                          dir_ / "api.log");
    pid_ = api.pid;
    ASSERT_GT(pid_, 0) << ReadFile(dir_ / "api.log");
    kube::Client::Options o;
    o.credentials.server = "http://127.0.0.1:" + api.port;
    client_ = std::make_shared<kube::Client>(o);
  }
  void TearDown() override {
    if (preparer_) {
      preparer_->RequestStop();
      EXPECT_TRUE(preparer_->WaitStopped(Clock::now() + 10s));
    }
    preparer_.reset();
    if (pid_ > 0) devplug::testing::StopProcess(pid_, SIGTERM);
  }
  void Start(std::chrono::milliseconds call_timeout, std::function<void()> claims_changed = {}) {
    auto p = ClaimPreparer::Make({.resource = "fake.example/dra",
                                  .driver = kDriver,
                                  .node = "node-1",
                                  .cdi_dir = dir_ / "cdi",
                                  .checkpoint = dir_ / "claims.json",
                                  .call_timeout = call_timeout,
                                  .prestart_timeout = call_timeout,
                                  .client = client_,
                                  .module_releases = true,
                                  .claims_changed = std::move(claims_changed)});
    ASSERT_TRUE(p.ok()) << p.status().message();
    preparer_ = std::move(*p);
    preparer_->SetSource(&source_);
    preparer_->Start();
  }
  ClaimRef Claim(const std::string& name, const std::string& device) {
    Json result = {{"request", "r"}, {"driver", kDriver}, {"pool", "node-1"}, {"device", device}};
    Json claim = {
        {"metadata", {{"name", name}, {"namespace", "default"}}},
        {"status", {{"allocation", {{"devices", {{"results", Json::array({result})}}}}}}}};
    auto made = client_->Create(kClaims, claim);
    EXPECT_TRUE(made.ok()) << made.status().message();
    return {"default", made.ok() ? (*made)["metadata"]["uid"].get<std::string>() : "", name};
  }
  // One call, answered by `until` from now.
  PrepareResult Prepare(const ClaimRef& c, std::chrono::milliseconds until = 30s) {
    std::promise<std::map<std::string, PrepareResult>> p;
    preparer_->Prepare({c}, Clock::now() + until,
                       [&](std::map<std::string, PrepareResult> out) { p.set_value(out); });
    return p.get_future().get()[c.uid];
  }
  std::string Unprepare(const ClaimRef& c, std::chrono::milliseconds until = 30s) {
    std::promise<std::map<std::string, std::string>> p;
    preparer_->Unprepare({c}, Clock::now() + until,
                         [&](std::map<std::string, std::string> out) { p.set_value(out); });
    return p.get_future().get()[c.uid];
  }

  // Whether every pending release ended within `t`.
  bool ReleasesEnd(std::chrono::milliseconds t) {
    for (const auto end = Clock::now() + t; Clock::now() < end;) {
      if (preparer_->releasing().empty()) return true;
      std::this_thread::sleep_for(5ms);
    }
    return preparer_->releasing().empty();
  }

  TempDir dir_;
  pid_t pid_ = -1;
  std::shared_ptr<kube::Client> client_;
  FakeSource source_;
  std::unique_ptr<ClaimPreparer> preparer_;
};

// An allocate() still queued at its deadline (the module's thread is busy
// with another device's call) never runs: the prepare fails, and nothing
// is left set up (review D1: it ran later, and each retry queued another).
TEST_F(ClaimPreparerTest, AnAllocateQueuedPastItsDeadlineNeverRuns) {
  Start(200ms);
  const ClaimRef busy = Claim("busy", "fake-0");
  const ClaimRef c = Claim("c", "fake-1");
  auto gate = std::make_shared<Gate>();
  source_.HoldNext("allocate", gate);
  // The first claim's allocate() holds the module's thread; the kubelet
  // waits long enough for both, the second's allocate() has 200 ms.
  std::promise<std::map<std::string, PrepareResult>> first;
  preparer_->Prepare({busy}, Clock::now() + 30s,
                     [&](std::map<std::string, PrepareResult> out) { first.set_value(out); });
  ASSERT_TRUE(gate->WaitInside(10s));
  // "busy" fails at its deadline too (its allocate() is inside the module).
  EXPECT_NE(first.get_future().get()[busy.uid].error.find("did not answer within 200 ms"),
            std::string::npos);
  const PrepareResult r = Prepare(c);
  EXPECT_NE(r.error.find("allocate(fake-1): the module did not answer within 200 ms"),
            std::string::npos)
      << r.error;
  gate->Open();
  // busy's late answer posts its release from the module's thread, behind
  // anything the test would post now: wait for both claims' pending
  // releases to end instead.
  ASSERT_TRUE(ReleasesEnd(10s)) << StrJoin(preparer_->releasing(), ",");
  source_.Drain();
  // fake-1's allocate() was never run; busy's ran late and was released.
  EXPECT_EQ(source_.Count("allocate fake-1"), 0);
  EXPECT_EQ(source_.Count("allocate fake-0"), 1);
  EXPECT_EQ(source_.Count("release fake-0"), 1);
  EXPECT_EQ(Unprepare(c), "");
  EXPECT_EQ(Unprepare(busy), "");
  EXPECT_TRUE(preparer_->releasing().empty());
  EXPECT_EQ(source_.Count("release fake-0"), 1);  // once
}

// An allocate() that answers after its deadline set the device up: that
// is released, once, and the kubelet's retry waits for the release before
// the module sets the device up again.
TEST_F(ClaimPreparerTest, ALateAllocateIsReleasedBeforeTheRetrySetsItUpAgain) {
  Start(2s);
  const ClaimRef c = Claim("c", "fake-0");
  auto gate = std::make_shared<Gate>();
  source_.HoldNext("allocate", gate);
  EXPECT_NE(Prepare(c).error.find("did not answer within"), std::string::npos);
  ASSERT_TRUE(gate->WaitInside(10s));
  // Still inside allocate(): the retry is told why it must wait.
  const PrepareResult waiting = Prepare(c, 300ms);
  EXPECT_NE(waiting.error.find("not released yet"), std::string::npos) << waiting.error;
  gate->Open();
  const PrepareResult again = Prepare(c);
  ASSERT_EQ(again.error, "");
  ASSERT_EQ(again.devices.size(), 1U);
  EXPECT_EQ(source_.log(), (std::vector<std::string>{"allocate fake-0", "release fake-0",
                                                     "allocate fake-0", "pre_start fake-0"}));
}

// A pre_start() past its deadline: the prepare fails, its release runs
// after it (same thread), and the retry runs pre_start() again only after
// that release (review D1: three retries ran pre_start() three times and
// on_release() never).
TEST_F(ClaimPreparerTest, APreStartPastItsDeadlineIsReleasedBeforeItRunsAgain) {
  Start(2s);
  const ClaimRef c = Claim("c", "fake-1");
  auto gate = std::make_shared<Gate>();
  source_.HoldNext("pre_start", gate);
  const PrepareResult r = Prepare(c);
  EXPECT_NE(r.error.find("pre_start(fake-1): the module did not answer within 2000 ms"),
            std::string::npos)
      << r.error;
  EXPECT_TRUE(preparer_->prepared().empty());
  gate->Open();
  ASSERT_EQ(Prepare(c).error, "");
  EXPECT_EQ(source_.log(),
            (std::vector<std::string>{"allocate fake-1", "pre_start fake-1", "release fake-1",
                                      "allocate fake-1", "pre_start fake-1"}));
  ASSERT_EQ(Unprepare(c), "");
  EXPECT_EQ(source_.Count("release fake-1"), 2);
}

// A release slower than the kubelet's wait runs once; the kubelet's retries
// are answered from it, and the one after it ends succeeds (review D3: each
// retry queued another on_release(), and none ever succeeded).
TEST_F(ClaimPreparerTest, AReleaseSlowerThanTheKubeletsWaitRunsOnce) {
  Start(5s);
  const ClaimRef c = Claim("c", "fake-0");
  ASSERT_EQ(Prepare(c).error, "");
  auto gate = std::make_shared<Gate>();
  source_.HoldNext("release", gate);
  for (int i = 0; i < 3; ++i) {
    const std::string err = Unprepare(c, 100ms);
    EXPECT_NE(err.find("on_release(fake-0) still runs"), std::string::npos) << err;
  }
  EXPECT_EQ(preparer_->releasing(), std::vector<std::string>{c.uid});
  EXPECT_EQ(preparer_->prepared().size(), 1U);
  gate->Open();
  EXPECT_EQ(Unprepare(c), "");
  EXPECT_TRUE(preparer_->prepared().empty());
  EXPECT_TRUE(preparer_->releasing().empty());
  source_.Drain();
  EXPECT_EQ(source_.Count("release fake-0"), 1);
}

// A device whose release still runs is not set up for another claim.
TEST_F(ClaimPreparerTest, ADeviceBeingReleasedIsNotPreparedForAnotherClaim) {
  Start(5s);
  const ClaimRef first = Claim("first", "fake-0");
  const ClaimRef second = Claim("second", "fake-0");
  ASSERT_EQ(Prepare(first).error, "");
  auto gate = std::make_shared<Gate>();
  source_.HoldNext("release", gate);
  EXPECT_NE(Unprepare(first, 100ms), "");
  const PrepareResult r = Prepare(second);
  EXPECT_NE(r.error.find("is still being released for claim " + first.uid), std::string::npos)
      << r.error;
  gate->Open();
  EXPECT_EQ(Unprepare(first), "");
  EXPECT_EQ(Prepare(second).error, "");
}

// A call whose kubelet deadline passed while it waited its turn runs no
// module code.
TEST_F(ClaimPreparerTest, ACallPastTheKubeletsDeadlineRunsNoModuleCode) {
  Start(5s);
  const ClaimRef c = Claim("c", "fake-0");
  const PrepareResult r = Prepare(c, -1ms);
  EXPECT_NE(r.error.find("deadline passed"), std::string::npos) << r.error;
  source_.Drain();
  EXPECT_TRUE(source_.log().empty());
}

// Draining (the resource moved to the device plugin API while claims were
// prepared): a prepared claim is answered again from the checkpoint, a new
// one is refused before any module call, and each unprepare that forgets a
// claim is told, after the kubelet has its answer (the drain may end then,
// and must not cut the answer off).
TEST_F(ClaimPreparerTest, DrainingAnswersPreparedClaimsOnlyAndTellsEachUnprepareAfterItsAnswer) {
  std::atomic<bool> answered{false};
  std::atomic<int> told{0}, told_before_answer{0};
  Start(10s, [&] {
    ++told;
    if (!answered.load()) ++told_before_answer;
  });
  const ClaimRef c1 = Claim("c1", "fake-0");
  ASSERT_EQ(Prepare(c1).error, "");
  preparer_->SetDraining();
  EXPECT_EQ(Prepare(c1).error, "");
  const PrepareResult refused = Prepare(Claim("c2", "fake-1"));
  EXPECT_NE(refused.error.find("no longer offers devices on node node-1"), std::string::npos)
      << refused.error;
  source_.Drain();
  EXPECT_EQ(source_.Count("allocate fake-0"), 1);
  EXPECT_EQ(source_.Count("allocate fake-1"), 0);
  EXPECT_EQ(told.load(), 0);

  std::promise<std::string> p;
  preparer_->Unprepare({c1}, Clock::now() + 30s, [&](std::map<std::string, std::string> out) {
    answered = true;
    p.set_value(out[c1.uid]);
  });
  EXPECT_EQ(p.get_future().get(), "");
  EXPECT_TRUE(devplug::testing::Eventually([&] { return told.load() == 1; }));
  EXPECT_EQ(told_before_answer.load(), 0);
  EXPECT_TRUE(preparer_->prepared().empty());
  // An unprepare of a claim no longer there forgets nothing: not told.
  EXPECT_EQ(Unprepare(c1), "");
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(told.load(), 1);
}

// An open drain (a move to the device plugin API whose hand-off waits for
// the claims allocated from the last slices): new claims are prepared
// until CloseDrain, which takes effect after every prepare asked for
// before it, even one still inside the module; after it a new claim is
// refused.
TEST_F(ClaimPreparerTest, AnOpenDrainPreparesUntilCloseDrainWhichComesAfterThePreparesAskedBefore) {
  Start(10s, [] {});
  preparer_->SetDraining(/*closed=*/false);
  const ClaimRef late = Claim("late", "fake-0");
  auto gate = std::make_shared<Gate>();
  source_.HoldNext("allocate", gate);
  std::promise<std::map<std::string, PrepareResult>> first;
  preparer_->Prepare({late}, Clock::now() + 30s,
                     [&](std::map<std::string, PrepareResult> out) { first.set_value(out); });
  ASSERT_TRUE(gate->WaitInside(10s));
  std::atomic<bool> closed{false};
  std::atomic<size_t> prepared_at_close{99};
  preparer_->CloseDrain([&] {
    prepared_at_close = preparer_->prepared().size();
    closed = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(closed.load()) << "closed while a prepare asked for before was inside the module";
  gate->Open();
  EXPECT_EQ(first.get_future().get()[late.uid].error, "");
  ASSERT_TRUE(devplug::testing::Eventually([&] { return closed.load(); }));
  EXPECT_EQ(prepared_at_close.load(), 1u);
  const PrepareResult refused = Prepare(Claim("after", "fake-1"));
  EXPECT_NE(refused.error.find("no longer offers devices on node node-1"), std::string::npos)
      << refused.error;
  EXPECT_EQ(Prepare(late).error, "");  // answered again
  source_.Drain();
  EXPECT_EQ(source_.Count("allocate fake-1"), 0);
}

}  // namespace
}  // namespace devplug::dra
