#include "dra/health_hub.h"

#include <ctime>

#include "dra/resource_slice.h"
#include "util/utf8.h"

namespace devplug::dra {

class HealthHub::StreamBase {
 public:
  virtual ~StreamBase() = default;
  // Hub lock held.
  virtual void Offer(std::shared_ptr<const HealthReport> report) = 0;
  virtual void Close() = 0;
};

template <typename Response>
class HealthHub::Stream final : public grpc::ServerWriteReactor<Response>, public StreamBase {
 public:
  explicit Stream(HealthHub* hub) : hub_(hub) {}

  void Offer(std::shared_ptr<const HealthReport> report) override {
    MutexLock lock(mu_);
    if (finishing_) return;
    if (writing_) {
      pending_ = std::move(report);
      return;
    }
    StartWriteLocked(*report);
  }

  void Close() override {
    MutexLock lock(mu_);
    FinishLocked(grpc::Status::OK);
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    if (finish_after_write_) {
      this->Finish(finish_status_);
      return;
    }
    if (pending_) {
      std::shared_ptr<const HealthReport> next = std::move(pending_);
      StartWriteLocked(*next);
    }
  }

  void OnCancel() override {
    MutexLock lock(mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    hub_->Remove(this);
    delete this;
  }

 private:
  void StartWriteLocked(const HealthReport& report) DEVPLUG_REQUIRES(mu_) {
    message_.Clear();
    const int64_t now = static_cast<int64_t>(std::time(nullptr));
    for (const HealthReport::Entry& e : report.devices) {
      auto* d = message_.add_devices();
      d->mutable_device()->set_pool_name(report.pool);
      d->mutable_device()->set_device_name(e.device);
      d->set_health(e.healthy ? decltype(d->health())(1) : decltype(d->health())(2));
      d->set_last_updated_time(now);
      d->set_health_check_timeout_seconds(kHealthTimeout.count());
      d->set_message(e.message);
    }
    writing_ = true;
    this->StartWrite(&message_);
  }

  // Finish exactly once, after any write in flight completes.
  void FinishLocked(const grpc::Status& status) DEVPLUG_REQUIRES(mu_) {
    if (finishing_) return;
    finishing_ = true;
    pending_.reset();
    if (writing_) {
      finish_after_write_ = true;
      finish_status_ = status;
      return;
    }
    this->Finish(status);
  }

  HealthHub* const hub_;
  Mutex mu_;
  Response message_ DEVPLUG_GUARDED_BY(mu_);  // being written: kept until done
  std::shared_ptr<const HealthReport> pending_ DEVPLUG_GUARDED_BY(mu_);
  bool writing_ DEVPLUG_GUARDED_BY(mu_) = false;
  bool finishing_ DEVPLUG_GUARDED_BY(mu_) = false;
  bool finish_after_write_ DEVPLUG_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ DEVPLUG_GUARDED_BY(mu_);
};

HealthHub::HealthHub(std::string pool, std::chrono::milliseconds period)
    : pool_(std::move(pool)), period_(period), resend_([this] { Resend(); }) {}

HealthHub::~HealthHub() {
  {
    MutexLock lock(wait_mu_);
    stopping_ = true;
  }
  wait_cv_.notify_all();
  resend_.join();
  CloseAll();
}

void HealthHub::Resend() {
  MutexLock lock(wait_mu_);
  while (!stopping_) {
    wait_cv_.wait_for(wait_mu_, period_);
    if (stopping_) break;
    lock.Unlock();
    {
      MutexLock hub(mu_);
      if (latest_)
        for (StreamBase* s : streams_) s->Offer(latest_);
    }
    lock.Lock();
  }
}

void HealthHub::Publish(const DeviceList& devices) {
  auto report = std::make_shared<HealthReport>();
  report->pool = pool_;
  report->devices.reserve(devices.size());
  // A shared device is one entry, Unhealthy while any of its shares is
  // (one held back for a release is not).
  for (const DraDevice& x : DraDevices(devices))
    report->devices.push_back(
        {DraName(*x.device), x.unhealthy == nullptr,
         x.unhealthy ? PrintableUtf8(x.unhealthy->health_reason, kHealthMessageMax) : ""});
  MutexLock lock(mu_);
  latest_ = report;
  for (StreamBase* s : streams_) s->Offer(latest_);
}

void HealthHub::CloseAll() {
  MutexLock lock(mu_);
  for (StreamBase* s : streams_) s->Close();
}

size_t HealthHub::streams() const {
  MutexLock lock(mu_);
  return streams_.size();
}

template <typename Response>
grpc::ServerWriteReactor<Response>* HealthHub::Open() {
  MutexLock lock(mu_);
  auto* s = new Stream<Response>(this);
  streams_.insert(s);
  if (latest_) s->Offer(latest_);
  return s;
}

template grpc::ServerWriteReactor<::v1::NodeWatchResourcesResponse>*
HealthHub::Open<::v1::NodeWatchResourcesResponse>();
template grpc::ServerWriteReactor<::v1alpha1::NodeWatchResourcesResponse>*
HealthHub::Open<::v1alpha1::NodeWatchResourcesResponse>();

void HealthHub::Remove(StreamBase* s) {
  MutexLock lock(mu_);
  streams_.erase(s);
}

}  // namespace devplug::dra
