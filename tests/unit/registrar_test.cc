// The per-resource serve/register state machine on a fake clock, against a
// fake kubelet (a kubelet.sock identity that tests change, Register answers
// that tests give) and a fake server (whose socket tests remove).
#include "kubelet/registrar.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace devplug::kubelet {
namespace {

using namespace std::chrono_literals;
using State = Registrar::State;
using Clock = Registrar::Clock;

class FakeEnv : public Registrar::Env {
 public:
  Clock::time_point Now() const override { return now; }
  std::optional<KubeletId> Kubelet() const override { return kubelet; }
  Status Serve() override {
    ++serves;
    log.push_back("serve");
    if (!serve_error.ok()) {
      server = false;
      return serve_error;
    }
    server = true;
    socket_ours = true;
    return OkStatus();
  }
  bool HasServer() const override { return server; }
  bool SocketIsOurs() const override { return server && socket_ours; }
  bool KubeletAnswers() const override { return kubelet.has_value() && kubelet_answers; }
  bool PluginDirGone() const override { return dir_gone; }
  void ExpectStream(uint64_t n) override {
    expected_stream = n;
    log.push_back(StrCat("expect ", n));
  }
  std::function<void()> Register(uint64_t n) override {
    sent.push_back(n);
    sent_to.push_back(kubelet);
    log.push_back(StrCat("register ", n));
    return [this, n] { cancelled.push_back(n); };
  }
  std::string Superseded() const override { return newer; }
  bool Streamless() const override { return streamless; }
  void SetSuperseded(bool on) override { superseded_told.push_back(on); }

  Clock::time_point now{std::chrono::seconds(1000)};
  std::optional<KubeletId> kubelet = KubeletId{1, 100};
  Status serve_error;
  bool server = false, socket_ours = false, dir_gone = false, kubelet_answers = true;
  std::string newer;  // a newer devplugd's socket
  bool streamless = false;
  std::vector<bool> superseded_told;
  int serves = 0;
  uint64_t expected_stream = 0;
  std::vector<uint64_t> sent, cancelled;
  std::vector<std::optional<KubeletId>> sent_to;
  std::vector<std::string> log;
};

class RegistrarTest : public ::testing::Test {
 protected:
  RegistrarTest()
      : reg_({"example.com/dev", "dev.sock", "/p/dev.sock", "/p/kubelet.sock"}, &env_) {}

  // Advances the fake clock and runs what is due.
  void Advance(std::chrono::milliseconds d) {
    env_.now += d;
    reg_.OnTimer();
  }
  // Runs the timer at the registrar's next deadline; fails if it has none.
  std::chrono::milliseconds ToNextDeadline() {
    auto next = reg_.NextDeadline();
    EXPECT_TRUE(next.has_value());
    if (!next) return 0ms;
    const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(*next - env_.now);
    env_.now = *next;
    reg_.OnTimer();
    return d;
  }
  void Registered() {
    reg_.Start();
    ASSERT_EQ(reg_.state(), State::kRegistering);
    ASSERT_TRUE(reg_.OnRegisterDone(reg_.registration(), OkStatus()));
    ASSERT_EQ(reg_.state(), State::kRegistered);
  }

  FakeEnv env_;
  Registrar reg_;
};

TEST_F(RegistrarTest, WithoutAKubeletItServesAndWaits) {
  env_.kubelet.reset();
  reg_.Start();
  EXPECT_EQ(env_.serves, 1);
  EXPECT_EQ(reg_.state(), State::kWaitingKubelet);
  EXPECT_TRUE(env_.sent.empty());
  EXPECT_FALSE(reg_.NextDeadline().has_value());  // the kubelet's arrival drives it
  // kubelet.sock appears.
  env_.kubelet = KubeletId{7, 1};
  reg_.OnKubeletRestart();
  EXPECT_EQ(reg_.state(), State::kRegistering);
  ASSERT_EQ(env_.sent.size(), 1u);
  EXPECT_EQ(env_.sent_to[0], env_.kubelet);
}

TEST_F(RegistrarTest, StreamIsExpectedBeforeRegisterIsSent) {
  reg_.Start();
  // The kubelet may open ListAndWatch before Register returns.
  ASSERT_EQ(env_.log, (std::vector<std::string>{"serve", "expect 1", "register 1"}));
  EXPECT_TRUE(reg_.OnRegisterDone(1, OkStatus()));
  EXPECT_TRUE(reg_.registered());
  EXPECT_TRUE(reg_.registered_since().has_value());
  EXPECT_TRUE(reg_.WithKubelet(KubeletId{1, 100}));
  EXPECT_FALSE(reg_.WithKubelet(KubeletId{1, 101}));  // same inode, a new file
  EXPECT_FALSE(reg_.WithKubelet(std::nullopt));
}

TEST_F(RegistrarTest, StaleAnswersAreIgnored) {
  Registered();
  EXPECT_FALSE(reg_.OnRegisterDone(1, UnavailableError("late")));
  EXPECT_FALSE(reg_.OnRegisterDone(7, OkStatus()));
  EXPECT_TRUE(reg_.registered());
  EXPECT_TRUE(reg_.last_error().empty());
}

TEST_F(RegistrarTest, FailedRegisterRetriesOnTheSameServerWithBackoff) {
  reg_.Start();
  std::vector<std::chrono::milliseconds> waits;
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(reg_.state(), State::kRegistering) << i;
    EXPECT_FALSE(reg_.OnRegisterDone(reg_.registration(), UnavailableError("no kubelet")));
    EXPECT_EQ(reg_.state(), State::kRetryWait);
    EXPECT_EQ(env_.expected_stream, 0u);  // no stream belongs to a failed Register
    waits.push_back(ToNextDeadline());
  }
  EXPECT_EQ(waits, (std::vector<std::chrono::milliseconds>{500ms, 1000ms, 2000ms, 4000ms, 8000ms,
                                                           16000ms, 30000ms, 30000ms}));
  EXPECT_EQ(env_.serves, 1);  // the server stayed up; only Register was retried
  EXPECT_EQ(reg_.failures(), 8u);
  EXPECT_EQ(reg_.last_error(), "Register failed: UNAVAILABLE: no kubelet");
  EXPECT_TRUE(reg_.OnRegisterDone(reg_.registration(), OkStatus()));
  EXPECT_EQ(reg_.failures(), 0u);
  EXPECT_TRUE(reg_.last_error().empty());
  // The backoff starts over after a success.
  reg_.OnStreamEnded(reg_.registration());
  ToNextDeadline();
  EXPECT_FALSE(reg_.OnRegisterDone(reg_.registration(), UnavailableError("again")));
  EXPECT_EQ(ToNextDeadline(), 500ms);
}

TEST_F(RegistrarTest, EndedStreamRegistersAgainAfterOneSecond) {
  Registered();
  const uint64_t first = reg_.registration();
  reg_.OnStreamEnded(first + 1);  // not ours
  EXPECT_TRUE(reg_.registered());
  reg_.OnStreamEnded(first);
  EXPECT_EQ(reg_.state(), State::kRetryWait);
  Advance(999ms);
  EXPECT_EQ(env_.sent.size(), 1u);
  Advance(1ms);
  ASSERT_EQ(env_.sent.size(), 2u);
  EXPECT_EQ(env_.sent[1], first + 1);
  EXPECT_EQ(env_.serves, 1);  // our socket is still there: the same server
  // A second end of the old stream changes nothing.
  reg_.OnStreamEnded(first);
  EXPECT_EQ(reg_.state(), State::kRegistering);
}

// A newer devplugd took the kubelet's calls (a rolling update): the stream
// the kubelet ended is not registered again while that one serves, and is
// as soon as it is gone.
TEST_F(RegistrarTest, ANewerDevplugdMakesItStandByUntilItIsGone) {
  Registered();
  env_.newer = "/p/dev.b.sock";
  reg_.OnStreamEnded(reg_.registration());
  Advance(Registrar::kStreamLostDelay);
  EXPECT_EQ(reg_.state(), State::kStandby);
  EXPECT_EQ(env_.sent.size(), 1u);
  EXPECT_EQ(env_.expected_stream, 0u);
  // Still there at every look.
  EXPECT_EQ(ToNextDeadline(), Registrar::kStandbyCheck);
  EXPECT_EQ(reg_.state(), State::kStandby);
  EXPECT_EQ(env_.sent.size(), 1u);
  // A kubelet restart does not bring it back either.
  env_.kubelet = KubeletId{4, 4};
  reg_.OnKubeletRestart();
  EXPECT_EQ(reg_.state(), State::kStandby);
  EXPECT_EQ(env_.sent.size(), 1u);
  // The newer one is gone: one more look (a kubelet restart removes its
  // socket for a moment), then registered again.
  env_.newer.clear();
  EXPECT_EQ(ToNextDeadline(), Registrar::kStandbyCheck);
  EXPECT_EQ(reg_.state(), State::kStandby);
  EXPECT_EQ(ToNextDeadline(), Registrar::kStandbyCheck);
  EXPECT_EQ(reg_.state(), State::kRegistering);
  ASSERT_EQ(env_.sent.size(), 2u);
  EXPECT_EQ(env_.sent_to.back(), env_.kubelet);
}

// A kubelet restart removes every socket: the newer devplugd's too, for
// the moment before it serves again. Seen before (its socket appeared
// beside ours), it is given that moment: the older one does not register
// in between.
TEST_F(RegistrarTest, AfterAKubeletRestartTheNewerDevplugdIsGivenAMomentToServeAgain) {
  Registered();
  env_.newer = "/p/dev.b.sock";
  reg_.OnPeerSocketCreated();
  env_.newer.clear();  // the restart removed it
  env_.kubelet = KubeletId{5, 5};
  reg_.OnKubeletRestart();
  EXPECT_EQ(reg_.state(), State::kStandby);
  EXPECT_EQ(env_.sent.size(), 1u);
  env_.newer = "/p/dev.b.sock";  // served again
  EXPECT_EQ(ToNextDeadline(), Registrar::kStandbyCheck);
  EXPECT_EQ(reg_.state(), State::kStandby);
  EXPECT_EQ(env_.sent.size(), 1u);
}

// Without a newer one seen, a socket that appears at the other name (an
// older devplugd's, serving again) changes nothing.
TEST_F(RegistrarTest, AnOlderDevplugdsSocketChangesNothing) {
  Registered();
  reg_.OnPeerSocketCreated();  // Superseded() says "": it is older
  env_.kubelet = KubeletId{6, 6};
  reg_.OnKubeletRestart();
  EXPECT_EQ(reg_.state(), State::kRegistering);
  EXPECT_EQ(env_.sent.size(), 2u);
}

TEST_F(RegistrarTest, RetryServesAgainWhenTheSocketIsGone) {
  Registered();
  reg_.OnStreamEnded(reg_.registration());
  env_.socket_ours = false;
  Advance(1000ms);
  EXPECT_EQ(env_.serves, 2);
  EXPECT_EQ(reg_.state(), State::kRegistering);
}

TEST_F(RegistrarTest, KubeletRestartServesAndRegistersAtOnce) {
  env_.kubelet.reset();
  reg_.Start();
  env_.kubelet = KubeletId{2, 5};
  reg_.OnKubeletRestart();
  // A Register in flight to the new kubelet: the restart is already handled.
  EXPECT_TRUE(reg_.WithKubelet(KubeletId{2, 5}));
  ASSERT_TRUE(reg_.OnRegisterDone(reg_.registration(), OkStatus()));
  env_.kubelet = KubeletId{3, 6};
  EXPECT_FALSE(reg_.WithKubelet(env_.kubelet));
  reg_.OnKubeletRestart();
  EXPECT_EQ(env_.serves, 3);  // a fresh socket each time
  EXPECT_EQ(reg_.state(), State::kRegistering);
  EXPECT_EQ(env_.sent_to.back(), env_.kubelet);
}

TEST_F(RegistrarTest, KubeletRestartCancelsTheRegisterInFlight) {
  reg_.Start();
  const uint64_t first = reg_.registration();
  env_.kubelet = KubeletId{9, 9};
  reg_.OnKubeletRestart();
  EXPECT_EQ(env_.cancelled, std::vector<uint64_t>{first});
  // Its answer (CANCELLED) comes later and is stale.
  EXPECT_FALSE(reg_.OnRegisterDone(first, Status(StatusCode::kCancelled, "cancelled")));
  EXPECT_EQ(reg_.state(), State::kRegistering);
  EXPECT_TRUE(reg_.OnRegisterDone(reg_.registration(), OkStatus()));
}

TEST_F(RegistrarTest, SocketRemovedBySomeoneElseIsServedAgainAfterSettling) {
  Registered();
  env_.socket_ours = false;
  reg_.OnSocketRemoved();
  reg_.OnSocketRemoved();  // the same removal, seen twice: one check
  Advance(999ms);
  EXPECT_EQ(env_.serves, 1);
  Advance(1ms);
  EXPECT_EQ(env_.serves, 2);  // the old stream ends with the old server
  EXPECT_EQ(reg_.state(), State::kRetryWait);
  EXPECT_EQ(env_.sent.size(), 1u);
  // Registered again once the kubelet has seen the end.
  EXPECT_EQ(ToNextDeadline(), 1000ms);
  EXPECT_EQ(env_.sent.size(), 2u);
  EXPECT_EQ(reg_.state(), State::kRegistering);
}

TEST_F(RegistrarTest, SocketRemovedByAKubeletRestartWaitsForTheRestart) {
  Registered();
  env_.socket_ours = false;
  reg_.OnSocketRemoved();
  env_.kubelet = KubeletId{4, 4};  // a new kubelet.sock: its creation serves us anew
  Advance(1000ms);
  EXPECT_EQ(env_.serves, 1);
  EXPECT_TRUE(reg_.registered());
}

TEST_F(RegistrarTest, SocketServedAgainMeanwhileNeedsNothing) {
  Registered();
  env_.socket_ours = true;  // an old removal event, our socket is back
  reg_.OnSocketRemoved();
  EXPECT_FALSE(reg_.NextDeadline().has_value());
  env_.socket_ours = false;
  env_.dir_gone = true;  // removed with its directory: the agent exits
  reg_.OnSocketRemoved();
  Advance(1000ms);
  EXPECT_EQ(env_.serves, 1);
}

TEST_F(RegistrarTest, ServeFailureIsRetriedWithBackoff) {
  env_.serve_error = UnavailableError("cannot serve");
  reg_.Start();
  EXPECT_EQ(reg_.state(), State::kDown);
  EXPECT_TRUE(env_.sent.empty());
  EXPECT_EQ(ToNextDeadline(), 500ms);
  EXPECT_EQ(env_.serves, 2);
  EXPECT_EQ(ToNextDeadline(), 1000ms);
  env_.serve_error = OkStatus();
  EXPECT_EQ(ToNextDeadline(), 2000ms);
  EXPECT_EQ(reg_.state(), State::kRegistering);
}

TEST_F(RegistrarTest, StopCancelsAndForgetsEverything) {
  reg_.Start();
  const uint64_t n = reg_.registration();
  reg_.Stop();
  EXPECT_EQ(env_.cancelled, std::vector<uint64_t>{n});
  EXPECT_EQ(env_.expected_stream, 0u);
  EXPECT_EQ(reg_.state(), State::kDown);
  EXPECT_FALSE(reg_.NextDeadline().has_value());
  EXPECT_FALSE(reg_.OnRegisterDone(n, OkStatus()));
  EXPECT_EQ(reg_.state(), State::kDown);
}

TEST_F(RegistrarTest, StartAfterServesNowAndRegistersLater) {
  reg_.StartAfter(1000ms);
  EXPECT_EQ(env_.serves, 1);
  EXPECT_EQ(reg_.state(), State::kRetryWait);
  EXPECT_TRUE(env_.sent.empty());
  EXPECT_EQ(ToNextDeadline(), 1000ms);
  EXPECT_EQ(env_.sent.size(), 1u);
  EXPECT_EQ(env_.serves, 1);
}

TEST_F(RegistrarTest, DestroyingCancelsTheRegisterInFlight) {
  auto env = std::make_unique<FakeEnv>();
  {
    Registrar r({"a", "a.sock", "/p/a.sock", "/p/kubelet.sock"}, env.get());
    r.Start();
  }
  EXPECT_EQ(env->cancelled, std::vector<uint64_t>{1});
}

// ---- the plugin watcher: the kubelet probes, we never Register ---------------------

class WatchedRegistrarTest : public RegistrarTest {
 protected:
  WatchedRegistrarTest()
      : watched_({"example.com/dev", "dev.sock", "/r/dev.sock", "/p/kubelet.sock"}, &env_,
                 RegistrationMode::kPluginWatcher) {}

  // What the service does on GetInfo (arm the hub), then the registrar.
  uint64_t Probe() {
    const uint64_t n = ++probes_;
    env_.ExpectStream(n);
    watched_.OnProbed(n);
    return n;
  }
  void Registered() {
    watched_.Start();
    Probe();
    ASSERT_EQ(watched_.state(), State::kRegistering);
    watched_.OnKubeletStatus(OkStatus());
    ASSERT_TRUE(watched_.registered());
  }
  void Run(std::chrono::milliseconds d) {
    env_.now += d;
    watched_.OnTimer();
  }

  uint64_t probes_ = 0;
  Registrar watched_;
};

TEST_F(WatchedRegistrarTest, ServesAndWaitsForTheProbeNeverRegisters) {
  watched_.Start();
  EXPECT_EQ(env_.serves, 1);
  EXPECT_EQ(watched_.state(), State::kWaitingKubelet);
  const uint64_t n = Probe();
  EXPECT_EQ(watched_.state(), State::kRegistering);
  EXPECT_EQ(watched_.registration(), n);
  watched_.OnKubeletStatus(OkStatus());
  EXPECT_TRUE(watched_.registered());
  EXPECT_TRUE(watched_.registered_since().has_value());
  ASSERT_TRUE(watched_.kubelet_status().has_value());
  EXPECT_TRUE(watched_.kubelet_status()->ok());
  Run(10min);
  EXPECT_TRUE(env_.sent.empty()) << "Register sent in plugin-watcher mode";
  EXPECT_EQ(env_.serves, 1);
}

TEST_F(WatchedRegistrarTest, ARefusalIsKeptAndTheKubeletProbesAgainByItself) {
  watched_.Start();
  Probe();
  watched_.OnKubeletStatus(Status(StatusCode::kUnknown, "plugin validation failed"));
  EXPECT_FALSE(watched_.registered());
  EXPECT_EQ(watched_.state(), State::kWaitingKubelet);
  EXPECT_EQ(watched_.last_error(),
            "the kubelet refused the registration: plugin validation failed");
  EXPECT_EQ(watched_.failures(), 1u);
  ASSERT_TRUE(watched_.kubelet_status().has_value());
  EXPECT_FALSE(watched_.kubelet_status()->ok());
  Probe();
  watched_.OnKubeletStatus(OkStatus());
  EXPECT_TRUE(watched_.registered());
  EXPECT_TRUE(watched_.last_error().empty());
  EXPECT_EQ(env_.serves, 1);  // nothing served anew for a refusal
}

// A kubelet restart: its stream ends, kubelet.sock goes and comes back; the
// new kubelet probes the same socket. Nothing is served anew.
TEST_F(WatchedRegistrarTest, AKubeletRestartCostsNothing) {
  Registered();
  const uint64_t first = watched_.registration();
  env_.kubelet_answers = false;  // the old kubelet is going
  watched_.OnStreamEnded(first);
  EXPECT_EQ(watched_.state(), State::kWaitingKubelet);
  env_.kubelet = KubeletId{2, 200};  // the new one's kubelet.sock
  env_.kubelet_answers = true;
  watched_.OnKubeletRestart();
  Run(Registrar::kReprobeDelay);
  EXPECT_EQ(env_.serves, 1) << "the socket was served anew for a kubelet restart";
  Probe();
  watched_.OnKubeletStatus(OkStatus());
  EXPECT_TRUE(watched_.registered());
  EXPECT_TRUE(watched_.WithKubelet(KubeletId{2, 200}));
  EXPECT_EQ(env_.serves, 1);
}

// The same kubelet ends our stream and keeps running: it would never probe
// again, so the socket is served anew (which it sees as a new plugin).
TEST_F(WatchedRegistrarTest, AStreamEndedByARunningKubeletServesTheSocketAnew) {
  Registered();
  watched_.OnStreamEnded(watched_.registration());
  Run(Registrar::kReprobeDelay - 1ms);
  EXPECT_EQ(env_.serves, 1);
  Run(1ms);
  EXPECT_EQ(env_.serves, 2);
  EXPECT_EQ(watched_.state(), State::kWaitingKubelet);
  Probe();
  watched_.OnKubeletStatus(OkStatus());
  EXPECT_TRUE(watched_.registered());
  // A stale end (an earlier probe's stream) changes nothing.
  watched_.OnStreamEnded(1);
  EXPECT_TRUE(watched_.registered());
}

// The plugin watcher probes whatever socket appears: standing by means not
// serving anew after the stream ended, until the newer devplugd is gone.
TEST_F(WatchedRegistrarTest, ANewerDevplugdMakesItStandByInsteadOfServingAnew) {
  Registered();
  env_.newer = "/r/dev.b.sock";
  watched_.OnStreamEnded(watched_.registration());
  Run(Registrar::kReprobeDelay);
  EXPECT_EQ(watched_.state(), State::kStandby);
  EXPECT_EQ(env_.serves, 1);
  Run(Registrar::kStandbyCheck);
  EXPECT_EQ(watched_.state(), State::kStandby);
  EXPECT_EQ(env_.serves, 1);
  env_.newer.clear();
  Run(Registrar::kStandbyCheck);  // one more look first
  EXPECT_EQ(env_.serves, 1);
  Run(Registrar::kStandbyCheck);
  EXPECT_EQ(env_.serves, 2);
  EXPECT_EQ(watched_.state(), State::kWaitingKubelet);
  Probe();
  watched_.OnKubeletStatus(OkStatus());
  EXPECT_TRUE(watched_.registered());
}

// DRA: the kubelet opens no stream. A newer devplugd's socket appearing
// supersedes the resource at once, its registration left as it is (the
// kubelet calls the later one, and falls back to ours); a look every
// kStandbyCheck sees the newer one go.
TEST_F(WatchedRegistrarTest, AStreamlessResourceIsSupersededWhileTheNewerOneServes) {
  env_.streamless = true;
  Registered();
  watched_.OnPeerSocketCreated();  // an older one's, or already gone
  EXPECT_FALSE(watched_.superseded());
  EXPECT_TRUE(env_.superseded_told.empty());
  env_.newer = "/r/dev.b.sock";
  watched_.OnPeerSocketCreated();
  EXPECT_TRUE(watched_.superseded());
  EXPECT_EQ(env_.superseded_told, std::vector<bool>{true});
  Run(Registrar::kStandbyCheck);
  Run(Registrar::kStandbyCheck);
  EXPECT_TRUE(watched_.superseded());
  EXPECT_EQ(env_.superseded_told.size(), 1u);
  EXPECT_TRUE(watched_.registered());
  env_.newer.clear();
  Run(Registrar::kStandbyCheck);
  EXPECT_FALSE(watched_.superseded());
  EXPECT_EQ(env_.superseded_told, (std::vector<bool>{true, false}));
  EXPECT_TRUE(watched_.registered());
  EXPECT_EQ(env_.serves, 1);
  EXPECT_TRUE(env_.sent.empty());
  EXPECT_FALSE(watched_.NextDeadline().has_value());
}

// The kubelet opens ListAndWatch before NotifyRegistrationStatus: when the
// stream ends before the kubelet's word arrives, that word is about a lost
// registration, and the socket is still served anew.
TEST_F(WatchedRegistrarTest, AStreamEndedBeforeTheKubeletsWordIsStillLost) {
  watched_.Start();
  Probe();
  ASSERT_EQ(watched_.state(), State::kRegistering);
  watched_.OnStreamEnded(watched_.registration());
  watched_.OnKubeletStatus(OkStatus());
  EXPECT_FALSE(watched_.registered());
  EXPECT_EQ(watched_.state(), State::kWaitingKubelet);
  Run(Registrar::kReprobeDelay);
  EXPECT_EQ(env_.serves, 2) << "the lost registration was taken for a live one";
  Probe();
  watched_.OnKubeletStatus(OkStatus());
  EXPECT_TRUE(watched_.registered());
}

// A kubelet that is down (its old kubelet.sock left, not answering) gets no
// new socket either: it walks plugins_registry when it starts.
TEST_F(WatchedRegistrarTest, NoNewSocketWhileTheKubeletIsDown) {
  Registered();
  env_.kubelet_answers = false;
  watched_.OnStreamEnded(watched_.registration());
  Run(Registrar::kReprobeDelay);
  Run(Registrar::kReprobeDelay);
  EXPECT_EQ(env_.serves, 1);
}

// Our socket removed behind our back: served again after the settle time,
// and the kubelet (which deregistered the old one) probes the new one.
TEST_F(WatchedRegistrarTest, ASocketRemovedIsServedAgain) {
  Registered();
  env_.socket_ours = false;
  watched_.OnSocketRemoved();
  watched_.OnStreamEnded(watched_.registration());  // the kubelet deregistered us
  Run(Registrar::kSocketSettle);
  EXPECT_EQ(env_.serves, 2);
  EXPECT_EQ(watched_.state(), State::kWaitingKubelet);
  Probe();
  Run(Registrar::kReprobeDelay);  // the stream-end check finds the new probe
  EXPECT_EQ(env_.serves, 2);
  watched_.OnKubeletStatus(OkStatus());
  EXPECT_TRUE(watched_.registered());
}

TEST_F(WatchedRegistrarTest, AReloadServesAtOnceAndStopCancelsTimers) {
  watched_.StartAfter(1000ms);
  EXPECT_EQ(env_.serves, 1);
  EXPECT_EQ(watched_.state(), State::kWaitingKubelet);
  EXPECT_TRUE(watched_.NextDeadline().has_value());  // the probe it waits for
  watched_.Stop();
  EXPECT_EQ(watched_.state(), State::kDown);
  EXPECT_FALSE(watched_.NextDeadline().has_value());
  watched_.OnProbed(5);  // a probe on the old server, answered after Stop
  EXPECT_EQ(watched_.state(), State::kDown);
}

// A GetInfo from a client other than the kubelet (an operator's grpcurl)
// while registered changes nothing: the state stays registered, and the
// end of the kubelet's own stream still counts (served anew).
TEST_F(WatchedRegistrarTest, AForeignGetInfoChangesNothing) {
  Registered();
  const uint64_t kubelets = watched_.registration();
  Probe();  // no NotifyRegistrationStatus follows
  EXPECT_TRUE(watched_.registered());
  EXPECT_EQ(watched_.registration(), kubelets);
  watched_.OnStreamEnded(kubelets);
  EXPECT_EQ(watched_.state(), State::kWaitingKubelet);
  Run(Registrar::kReprobeDelay);
  EXPECT_EQ(env_.serves, 2) << "the kubelet's stream end was ignored";
}

// The kubelet itself probing again while we count it registered: its
// NotifyRegistrationStatus makes the new probe's stream the one that counts.
TEST_F(WatchedRegistrarTest, AProbeTheKubeletConfirmsTakesOver) {
  Registered();
  const uint64_t first = watched_.registration();
  const uint64_t second = Probe();
  watched_.OnKubeletStatus(OkStatus());
  EXPECT_TRUE(watched_.registered());
  EXPECT_EQ(watched_.registration(), second);
  watched_.OnStreamEnded(first);  // the old stream's end is stale now
  EXPECT_TRUE(watched_.registered());
}

// A socket that cannot be served shows why in last_error (status), and the
// reason clears once serving works; a re-served socket forgets what the
// kubelet said about the previous one.
TEST_F(WatchedRegistrarTest, AServeFailureShowsItsReason) {
  env_.serve_error = FailedPreconditionError("socket /p/dev.sock is served by another process");
  watched_.Start();
  EXPECT_EQ(watched_.state(), State::kDown);
  EXPECT_EQ(watched_.last_error(), "socket /p/dev.sock is served by another process");
  env_.serve_error = OkStatus();
  Run(Registrar::kMinBackoff);
  EXPECT_EQ(watched_.state(), State::kWaitingKubelet);
  EXPECT_TRUE(watched_.last_error().empty());
  Probe();
  watched_.OnKubeletStatus(OkStatus());
  ASSERT_TRUE(watched_.kubelet_status().has_value());
  watched_.OnStreamEnded(watched_.registration());
  Run(Registrar::kReprobeDelay);  // the running kubelet: served anew
  EXPECT_EQ(env_.serves, 3);
  EXPECT_FALSE(watched_.kubelet_status().has_value());
}

}  // namespace
}  // namespace devplug::kubelet
