// PodResources Lists and the release trackers: the agent's side of
// lifecycle::ReleaseCoordinator.
#include <spdlog/spdlog.h>

#include "agent.h"

namespace devplug {

void Agent::SchedulePodList(bool now) { releases_.Schedule(Clock::now(), now); }

void Agent::SendPodListIfDue() {
  if (!releases_.TakeDue(Clock::now())) return;
  // Answers from the last List when it is younger than half a period: every
  // resource shares one List.
  pods_->Fetch(std::min<std::chrono::milliseconds>(std::chrono::milliseconds(1000),
                                                   config_.pod_resources_poll / 2),
               [mailbox = mailbox_](StatusOr<kubelet::PodSnapshotPtr> s) {
                 mailbox->Post({Event::kPodList, 0, 0, s.ok() ? OkStatus() : s.status(),
                                s.ok() ? *s : nullptr});
               });
}

void Agent::OnPodList(const Status& status, const kubelet::PodSnapshotPtr& pods) {
  std::vector<lifecycle::ReleaseCoordinator::Tracked> tracked;
  std::vector<Resource*> of;
  for (auto& r : resources_) {
    if (!r->tracker) continue;
    // Every tracker says whether it needs a List; only running, tracking
    // resources take the answer.
    if (status.ok() && (!Tracking(*r) || !r->instance)) continue;
    tracked.push_back({r->cfg.name, r->tracker.get()});
    of.push_back(r.get());
  }
  const auto due = releases_.OnList(status, pods, tracked, Clock::now());
  if (status.ok()) {
    for (size_t i = 0; i < of.size(); ++i) {
      Resource& r = *of[i];
      // The kubelet hears "Unhealthy (releasing)" before the release runs.
      OnTrackerChanged(r);
      if (!due[i].empty()) {
        spdlog::info("resource \"{}\": {} no longer held; releasing", r.cfg.name,
                     StrJoin(due[i], ","));
        r.instance->Release(due[i]);
        if (r.cdi) r.cdi->Released(due[i], pods->asked);
      }
    }
  }
  UpdateStatus();
}

void Agent::OnTrackerChanged(Resource& r) {
  if (!r.tracker || !r.instance) return;
  // What the kubelet is told about releases changed: publish again.
  if (releases_.OnTrackerChanged(*r.tracker, r.tracker_generation, Clock::now()))
    r.instance->Republish();
}

}  // namespace devplug
