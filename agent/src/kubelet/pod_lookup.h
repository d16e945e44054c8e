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

#include <functional>
#include <memory>
#include <optional>
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

// host->pod_of() for a resource served through DRA. Who holds a device is
// the claim prepared on it, or being prepared (pre_start() runs inside
// NodePrepareResources, before any container of the claim's pod exists):
// `claim_of` answers from the driver. The pod is the claim's namespace's;
// its name and container come from PodResources' dynamic_resources once the
// kubelet lists them, and are "" before.
//
// Thread safety: thread-safe, if claim_of is.
class DraPodLookup final : public modules::PodLookup {
 public:
  struct Claim {
    std::string ns, name;
    std::string device;  // the DRA device name the claim holds
  };
  using ClaimOf = std::function<std::optional<Claim>(const std::string& id)>;

  // `pods` may be null (no PodResources: names stay "").
  DraPodLookup(std::shared_ptr<PodResourcesClient> pods, std::string driver, std::string pool,
               ClaimOf claim_of)
      : pods_(std::move(pods)),
        driver_(std::move(driver)),
        pool_(std::move(pool)),
        claim_of_(std::move(claim_of)) {}

  int PodOf(const std::string& id, std::optional<std::chrono::steady_clock::time_point> not_before,
            modules::PodHolder* holder) override;

 private:
  const std::shared_ptr<PodResourcesClient> pods_;
  const std::string driver_, pool_;
  const ClaimOf claim_of_;
};

}  // namespace devplug::kubelet
