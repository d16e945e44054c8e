// host->pod_of() for one resource (the instance's PodLookup): who holds a
// device, from the kubelet's PodResources List.
//
// The answer comes from a List sent after the device was last handed out
// (its last Allocate, and the PreStartContainer being run, if any): an
// older one may still name the previous holder. The shared List serves when
// it is at most 1 s old and new enough; otherwise one of our own. A device
// listed under two pods is no answer (-ENOTUNIQ).
//
// Thread safety: thread-safe (module workers and lanes ask).
#pragma once

#include <memory>
#include <string>

#include "kubelet/pod_resources.h"
#include "lifecycle/handed_out.h"
#include "modules/hooks.h"

namespace devplug::kubelet {

class PodLookup final : public modules::PodLookup {
 public:
  PodLookup(std::shared_ptr<PodResourcesClient> pods,
            std::shared_ptr<const lifecycle::HandedOut> handed_out, std::string resource)
      : pods_(std::move(pods)),
        handed_out_(std::move(handed_out)),
        resource_(std::move(resource)) {}

  int PodOf(const std::string& id, std::optional<std::chrono::steady_clock::time_point> not_before,
            modules::PodHolder* holder) override;

 private:
  const std::shared_ptr<PodResourcesClient> pods_;
  const std::shared_ptr<const lifecycle::HandedOut> handed_out_;
  const std::string resource_;
};

}  // namespace devplug::kubelet
