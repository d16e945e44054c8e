#include "dra/driver.h"

#include "util/leak.h"

namespace devplug::dra {

StatusOr<std::unique_ptr<Driver>> Driver::Make(Options o) {
  auto claims = ClaimPreparer::Make({.resource = o.resource,
                                     .driver = o.driver,
                                     .node = o.node,
                                     .cdi_dir = o.cdi_dir,
                                     .host_root = o.host_root,
                                     .checkpoint = o.checkpoint,
                                     .call_timeout = o.call_timeout,
                                     .prestart_timeout = o.prestart_timeout,
                                     .client = o.client,
                                     .module_releases = o.module_releases,
                                     .observer = o.observer,
                                     .claims_changed = o.claims_changed});
  if (!claims.ok()) return claims.status();
  auto slices = std::make_unique<SlicePublisher>(SlicePublisher::Options{
      .resource = o.resource,
      .driver = o.driver,
      .node = o.node,
      .client = o.client,
      .retry = o.retry,
      .stop_timeout = o.stop_timeout,
      .relist = o.relist,
      .taint_effect = o.taint_effect,
      .hold_for = o.hold_for,
      .await_withheld = o.await_withheld,
      .await_registration = o.await_registration,
  });
  std::unique_ptr<Driver> d(new Driver(std::move(o), std::move(slices), std::move(*claims)));
  d->slices_->Start();
  d->claims_->Start();
  return d;
}

Driver::Driver(Options options, std::unique_ptr<SlicePublisher> slices,
               std::unique_ptr<ClaimPreparer> claims)
    : options_(std::move(options)), slices_(std::move(slices)), claims_(std::move(claims)) {}

Driver::~Driver() {
  if (Stop(false)) return;
  // A thread still runs in a part: the parts outlive the driver.
  LeakOnPurpose(std::shared_ptr<SlicePublisher>(slices_.release()));
  LeakOnPurpose(std::shared_ptr<ClaimPreparer>(claims_.release()));
}

void Driver::RequestStop(bool delete_slices) {
  claims_->RequestStop();
  slices_->RequestStop(delete_slices);
}

bool Driver::WaitStopped(Clock::time_point deadline) {
  const bool claims = claims_->WaitStopped(deadline);
  const bool slices = slices_->WaitStopped(deadline);
  if (!(claims && slices)) abandoned_ = true;
  return !abandoned_;
}

bool Driver::Drain(bool open) {
  claims_->SetDraining(/*closed=*/!open);
  slices_->RequestStop(/*delete_slices=*/true);
  if (!slices_->WaitStopped(Clock::now() + options_.call_timeout)) abandoned_ = true;
  return !abandoned_;
}

bool Driver::Stop(bool delete_slices) {
  RequestStop(delete_slices);
  return WaitStopped(Clock::now() + options_.call_timeout);
}

}  // namespace devplug::dra
