// One DRA resource's driver: what a module's devices become under Dynamic
// Resource Allocation (resource.k8s.io/v1). Two jobs, two classes, as
// Kubernetes' own DRA helper splits them:
// - SlicePublisher (dra/slice_publisher.h): the instance's lists become
//   this node's ResourceSlices; it is the instance's ListSink.
// - ClaimPreparer (dra/claim_preparer.h): NodePrepareResources and
//   NodeUnprepareResources over the resource's DeviceSource, the
//   checkpoint and the claims' CDI specs.
// Driver owns both, hands them the source, and stops them under one
// deadline.
//
// Thread safety: thread-safe, as its parts are.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dra/claim_preparer.h"
#include "dra/slice_publisher.h"
#include "kube/client.h"
#include "model/device.h"
#include "model/rpc.h"
#include "modules/device_source.h"
#include "modules/hooks.h"
#include "util/status.h"

namespace devplug::dra {

class Driver final : public modules::ListSink {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::string resource;  // for messages
    std::string driver;    // the DRA driver name
    std::string node;      // this node: spec.nodeName, and the pool's name
    std::string cdi_dir;   // the spec folder, as the runtime sees it
    std::string host_root;
    std::string checkpoint;  // the prepared claims' file
    std::chrono::milliseconds call_timeout{10'000};
    std::chrono::milliseconds prestart_timeout{28'000};
    // The API server; null: no slices are published, and prepare fails.
    std::shared_ptr<kube::Client> client;
    // See SlicePublisher::Options.
    std::chrono::milliseconds retry{500};
    std::chrono::milliseconds stop_timeout{500};
    std::chrono::milliseconds relist{300'000};
    std::string taint_effect = "NoSchedule";
    std::string hold_for;
    bool await_withheld = false;
    bool await_registration = false;
    // See ClaimPreparer::Options.
    bool module_releases = false;
    std::shared_ptr<RpcObserver> observer;
    std::function<void()> claims_changed;  // see ClaimPreparer::Options
  };

  // Loads the checkpoint (DATA_LOSS names a damaged one), writes again the
  // CDI specs of its claims that are missing, and starts the threads.
  static StatusOr<std::unique_ptr<Driver>> Make(Options options);
  ~Driver() override;
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // The source the kubelet's calls go to (null: none runs now).
  void SetInstance(modules::DeviceSource* source) { claims_->SetSource(source); }
  // `source` stops: the calls no longer go to it (a successor's stays).
  void ClearInstance(const modules::DeviceSource* source) { claims_->ClearSource(source); }

  // ListSink: the slices.
  std::string Accept(const DeviceList& list) override { return slices_->Accept(list); }
  void Publish(const DeviceListPtr& list) override { slices_->Publish(list); }
  // The kubelet confirmed the driver's registration (see
  // SlicePublisher::KubeletRegistered).
  void KubeletRegistered() { slices_->KubeletRegistered(); }
  // See SlicePublisher::SetSuperseded.
  void SetSuperseded(bool superseded) { slices_->SetSuperseded(superseded); }

  // The kubelet's calls (see ClaimPreparer): answered by `until`.
  void Prepare(std::vector<ClaimRef> claims, Clock::time_point until,
               std::function<void(std::map<std::string, PrepareResult>)> done) {
    claims_->Prepare(std::move(claims), until, std::move(done));
  }
  void Unprepare(std::vector<ClaimRef> claims, Clock::time_point until,
                 std::function<void(std::map<std::string, std::string>)> done) {
    claims_->Unprepare(std::move(claims), until, std::move(done));
  }

  // Ends the threads; with `delete_slices`, deletes this node's slices of
  // this driver first (the agent exits: nothing serves them any more),
  // within stop_timeout. False when a thread still ran at the deadline
  // (call_timeout): it is abandoned, and the driver must then be leaked.
  [[nodiscard]] bool Stop(bool delete_slices);
  // The resource moved to the device plugin API while claims were
  // prepared: this node's slices are deleted now (by call_timeout) and no
  // more are written; the prepared claims are still answered and
  // unprepared, and no new one is prepared (ClaimPreparer::SetDraining),
  // or, `open`, not after CloseDrain. False when the slices' thread still
  // ran at the deadline.
  [[nodiscard]] bool Drain(bool open);
  void CloseDrain(std::function<void()> done) { claims_->CloseDrain(std::move(done)); }
  // The same in two steps, so that many drivers stop at once under one
  // deadline: RequestStop queues the end (calls already queued still run),
  // WaitStopped waits for it (false as above; it stays false).
  void RequestStop(bool delete_slices);
  [[nodiscard]] bool WaitStopped(Clock::time_point deadline);

  // Which claim holds each module device (shared with pod_of()).
  using Holders = ClaimPreparer::Holders;
  std::shared_ptr<const Holders> holders() const { return claims_->holders(); }
  std::optional<ClaimRef> ClaimOf(const std::string& id) const {
    std::optional<ClaimPreparer::Holder> h = holders()->Of(id);
    if (!h) return std::nullopt;
    return h->claim;
  }

  // ---- status and tests ----
  const Options& options() const { return options_; }
  std::string Dir() const { return claims_->Dir(); }
  std::vector<PreparedClaim> prepared() const { return claims_->prepared(); }
  std::vector<std::string> releasing() const { return claims_->releasing(); }
  uint64_t syncs() const { return slices_->syncs(); }
  std::string sync_error() const { return slices_->sync_error(); }
  int64_t generation() const { return slices_->generation(); }
  std::vector<std::string> dropped_fields() const { return slices_->dropped_fields(); }
  void SetTaintEffect(const std::string& effect) { slices_->SetTaintEffect(effect); }
  // See SlicePublisher::SetWithheld.
  void SetWithheld(std::set<std::string> ids) { slices_->SetWithheld(std::move(ids)); }
  std::set<std::string> withheld() const { return slices_->withheld(); }

 private:
  Driver(Options options, std::unique_ptr<SlicePublisher> slices,
         std::unique_ptr<ClaimPreparer> claims);

  const Options options_;
  std::unique_ptr<SlicePublisher> slices_;
  std::unique_ptr<ClaimPreparer> claims_;
  bool abandoned_ = false;  // WaitStopped left a thread running (owner thread only)
};

}  // namespace devplug::dra
