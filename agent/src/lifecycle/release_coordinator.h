// When devplugd asks the kubelet which pods hold which devices, and what each
// answer means for the release trackers: one PodResources List serves every
// resource that tracks releases.
//
//   Schedule(now) ─▶ TakeDue ─▶ (the agent sends the List) ─▶ OnList
//        ▲                                                      │
//        └──── a tracker that needs a List, one period later ◀──┘
//
// A List is sent at once for a resource's first List (it is the truth about
// what is held) and otherwise one poll period after it was asked for; one
// is in flight at most. A failed List is never taken for "nothing is held":
// it is asked again one period later while a tracker still needs one. The
// answer is handed to every tracker; what a tracker gives back is released.
//
// Pure logic on the caller's clock; the agent sends the List and runs the
// releases. Thread safety: not thread-safe; the agent's main thread owns it.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "lifecycle/release_tracker.h"
#include "model/pod_snapshot.h"
#include "util/status.h"

namespace devplug::lifecycle {

class ReleaseCoordinator {
 public:
  // `poll`: pod_resources_poll ("0s": no Lists at all).
  explicit ReleaseCoordinator(std::chrono::milliseconds poll) : poll_(poll) {}

  // "0s" forgets a List that was due.
  void SetPoll(std::chrono::milliseconds poll) {
    poll_ = poll;
    if (poll_.count() == 0) next_.reset();
  }
  std::chrono::milliseconds poll() const { return poll_; }

  // A List is wanted: at once, or within one poll period.
  void Schedule(Clock::time_point now, bool at_once);
  // True when a List is due and none is in flight: it counts as sent from
  // now on, and the caller sends it.
  bool TakeDue(Clock::time_point now);
  // When TakeDue may say yes next; nullopt when no List is wanted.
  std::optional<Clock::time_point> NextDeadline() const { return next_; }
  bool in_flight() const { return in_flight_; }

  // The kubelet started again: its pod list may be incomplete for a while,
  // so its Lists release nothing until kubelet_settle has passed.
  void OnKubeletRestart(Clock::time_point now) { kubelet_restart_ = now; }

  // One resource that tracks releases, as a List's answer reaches it.
  struct Tracked {
    std::string name;  // the resource name PodResources lists
    ReleaseTracker* tracker;
  };
  // A List's outcome (`pods` when it worked). Returns, for each of
  // `tracked` in order, the IDs due for release now. A failure is kept as
  // problem() and leaves every tracker as it was.
  std::vector<std::vector<std::string>> OnList(const Status& status, const PodSnapshotPtr& pods,
                                               const std::vector<Tracked>& tracked,
                                               Clock::time_point now);
  // A tracker's state moved (an Allocate, a release's end, a List). True
  // when what the kubelet is told about it changed since `published`, which
  // is updated: the caller publishes the list again. Asks for a List when
  // the tracker needs one.
  bool OnTrackerChanged(const ReleaseTracker& tracker, uint64_t& published, Clock::time_point now);

  // Why tracking waits: the last List's error ("" while Lists work).
  const std::string& problem() const { return problem_; }

 private:
  std::chrono::milliseconds poll_;
  std::optional<Clock::time_point> next_;
  bool in_flight_ = false;
  std::optional<Clock::time_point> kubelet_restart_;
  std::string problem_;
};

}  // namespace devplug::lifecycle
