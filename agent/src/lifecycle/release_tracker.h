// Who still holds each device of one resource, and when a device is given
// back: the release state machine (docs/design.md, "Pod identity and
// release"), for resources whose module has on_release().
//
//   FREE ──Allocate returned it──▶ ASSIGNED ──seen in List──▶ HELD
//   HELD ──absent ≥ grace and ≥ 2 Lists, kubelet settled──▶ RELEASING
//   ASSIGNED ──never seen for unseen_timeout (kubelet settled)──▶ RELEASING
//   RELEASING ──on_release 0──▶ FREE   ──-EAGAIN──▶ again at the next List
//             ──error──▶ FAILED ──backoff──▶ RELEASING
//   an Allocate of an ID not FREE marks it pending: the release runs at
//   PreStartContainer, before the container starts (then ASSIGNED).
//
// Only List results move HELD devices: a failed List never counts as
// "absent". The first List after the agent started is the truth: listed
// devices are HELD, the rest FREE. Devices RELEASING or FAILED are reported
// Unhealthy (reason "releasing" or the error) so the kubelet hands them out
// no more; Allocate still accepts them (an admission failure is final) and
// the release then runs at PreStart.
//
// A tracker outlives a reload that re-creates its resource: the new module
// instance takes over the old one's tracker, releases still running in the
// old instance included, so no device's release state is lost.
//
// Tracking can be switched off and on (pod_resources_poll "0s" and back):
// off, it forgets every device and holds nothing back; on again, its next
// List is the truth, as after an agent start.
//
// Pure logic: every input carries the time, so tests drive it with a fake
// clock. Thread safety: thread-safe (gRPC threads report Allocate and
// PreStart, the main loop reports List results and releases).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/device.h"
#include "model/pod_snapshot.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug::lifecycle {

using Clock = std::chrono::steady_clock;

using devplug::Holder;
using devplug::Holders;

struct ReleaseTiming {
  std::chrono::milliseconds grace{std::chrono::seconds(10)};    // release_grace
  std::chrono::milliseconds settle{std::chrono::seconds(60)};   // kubelet_settle
  std::chrono::milliseconds unseen{std::chrono::seconds(120)};  // unseen_timeout
  std::chrono::milliseconds min_backoff{std::chrono::seconds(1)};
  std::chrono::milliseconds max_backoff{std::chrono::minutes(5)};
};

class ReleaseTracker {
 public:
  enum class State { kFree, kAssigned, kHeld, kReleasing, kFailed };
  static std::string_view StateName(State s);

  explicit ReleaseTracker(ReleaseTiming timing, bool enabled = true)
      : timing_(timing), enabled_(enabled) {}
  // A reload changed the timing; it applies from the next List.
  void set_timing(const ReleaseTiming& timing);

  // Tracking on or off. Off forgets every device (returned: those that were
  // not FREE, for the log) and makes every other call a no-op; on starts
  // over (the next List is the truth).
  std::vector<std::string> SetEnabled(bool on);
  bool enabled() const;

  // Allocate answered OK with these IDs. FREE ones become ASSIGNED; any
  // other is still someone's, so its release is due before the new
  // container starts.
  void OnAllocated(const std::vector<std::string>& ids, Clock::time_point now);

  // PreStartContainer for `ids`: those whose release must run first (and
  // no release of them starts from a List meanwhile). When a release of one
  // of them is already running (started by a List, in this instance or in
  // one a reload replaced), *wait is set and nothing is returned: the caller
  // asks again once that release has reported.
  std::vector<std::string> ReleasesBeforeStart(const std::vector<std::string>& ids,
                                               bool* wait = nullptr);
  // Their release ran at PreStart: released, they belong to the new pod.
  void OnReleasedBeforeStart(const std::vector<std::string>& ids, bool released,
                             Clock::time_point now);

  // A successful List: `listed` maps this resource's IDs in use to their
  // holder. `kubelet_restart` is when the kubelet last restarted (if it
  // did since our start). Returns the IDs whose release starts now.
  std::vector<std::string> OnList(const Holders& listed, Clock::time_point now,
                                  std::optional<Clock::time_point> kubelet_restart);

  // The module's on_release() of `ids` returned `result` (0, -EAGAIN or an
  // error with its reason in `why`).
  void OnReleased(const std::vector<std::string>& ids, int result, const std::string& why,
                  Clock::time_point now);

  // True while any device is not FREE, or no List has succeeded yet: the
  // agent keeps polling PodResources.
  bool NeedsList() const;
  // The first List has been seen.
  bool synced() const;

  // Marks RELEASING and FAILED devices Unhealthy (held_back, with a reason)
  // in a device list about to be published. True if it changed anything.
  bool Apply(DeviceList& list) const;

  struct DeviceView {
    State state = State::kFree;
    std::optional<Holder> holder;
    std::string error;  // FAILED: why
  };
  std::optional<DeviceView> View(std::string_view id) const;
  // Bumped whenever a device enters or leaves RELEASING/FAILED (what Apply
  // shows), so the agent knows when to publish again.
  uint64_t generation() const;

 private:
  struct Entry {
    State state = State::kFree;
    std::optional<Holder> holder;
    Clock::time_point since;  // state entered
    std::optional<Clock::time_point> absent_since;
    int absent_lists = 0;
    bool release_at_start = false;  // an Allocate found it not FREE
    bool in_flight = false;         // on_release() is running
    std::chrono::milliseconds backoff{0};
    Clock::time_point retry_at;  // FAILED: not before
    std::string error;
  };
  void Enter(Entry& e, State s, Clock::time_point now) DEVPLUG_REQUIRES(mu_);
  bool Settled(Clock::time_point now, std::optional<Clock::time_point> restart) const
      DEVPLUG_REQUIRES(mu_);

  ReleaseTiming timing_ DEVPLUG_GUARDED_BY(mu_);
  bool enabled_ DEVPLUG_GUARDED_BY(mu_);
  mutable Mutex mu_;
  std::map<std::string, Entry, std::less<>> devices_ DEVPLUG_GUARDED_BY(mu_);  // FREE ones dropped
  bool synced_ DEVPLUG_GUARDED_BY(mu_) = false;
  uint64_t generation_ DEVPLUG_GUARDED_BY(mu_) = 0;
};

}  // namespace devplug::lifecycle
