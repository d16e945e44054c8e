// One resource's release bookkeeping, as the module instance and the device
// plugin service see it: when each device was last handed out (HandedOut),
// and, for a module with on_release(), its release tracker. It answers the
// instance's ReleaseHooks (which devices to hold back, what to release
// before a container starts, each release's result) and records each
// Allocate; `changed` tells the agent that what the kubelet should be told
// changed (it publishes again on its own thread).
//
// Thread safety: thread-safe (the tracker and HandedOut are; `changed` must
// be too).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lifecycle/handed_out.h"
#include "lifecycle/release_tracker.h"
#include "modules/hooks.h"

namespace devplug::lifecycle {

class ResourceReleases final : public modules::ReleaseHooks {
 public:
  // `tracker` null: the module has no on_release(); only hand-outs are
  // recorded.
  ResourceReleases(std::shared_ptr<HandedOut> handed_out, std::shared_ptr<ReleaseTracker> tracker,
                   std::function<void()> changed)
      : handed_out_(std::move(handed_out)),
        tracker_(std::move(tracker)),
        changed_(std::move(changed)) {}

  // A successful Allocate of `ids` (or one whose module set up devices
  // before the call failed as a whole).
  void Allocated(const std::vector<std::string>& ids);

  bool Apply(DeviceList& list) override { return tracker_ && tracker_->Apply(list); }
  std::vector<std::string> DueBeforeStart(const std::vector<std::string>& ids, bool* wait) override;
  void Released(const std::vector<std::string>& ids, int rc, const std::string& why,
                bool before_start) override;

  const std::shared_ptr<HandedOut>& handed_out() const { return handed_out_; }
  const std::shared_ptr<ReleaseTracker>& tracker() const { return tracker_; }

 private:
  const std::shared_ptr<HandedOut> handed_out_;
  const std::shared_ptr<ReleaseTracker> tracker_;
  const std::function<void()> changed_;
};

}  // namespace devplug::lifecycle
