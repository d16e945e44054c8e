#include "device_plugin/stream_hub.h"

#include <utility>

#include <spdlog/spdlog.h>

namespace devplug::device_plugin {

SnapshotPtr MakeSnapshot(const DeviceList& devices) {
  auto msg = std::make_shared<v1beta1::ListAndWatchResponse>();
  msg->mutable_devices()->Reserve(static_cast<int>(devices.size()));
  for (const Device& d : devices) {
    v1beta1::Device* out = msg->add_devices();
    out->set_id(d.id);
    out->set_health(d.healthy ? "Healthy" : "Unhealthy");
    for (int32_t node : d.Nodes()) out->mutable_topology()->add_nodes()->set_id(node);
  }
  return msg;
}

class StreamHub::Stream final : public grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse> {
 public:
  // registration: the one this stream belongs to, or 0 (someone else's).
  Stream(StreamHub* hub, uint64_t registration) : hub_(hub), registration_(registration) {}

  // Hub lock held.
  void Offer(SnapshotPtr snapshot) {
    MutexLock lock(mu_);
    if (finishing_) return;
    if (writing_) {
      pending_ = std::move(snapshot);
      return;
    }
    StartWriteLocked(std::move(snapshot));
  }

  // Hub lock held.
  void Close() {
    MutexLock lock(mu_);
    by_agent_ = true;
    FinishLocked(grpc::Status::OK);
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(mu_);
    writing_ = false;
    current_.reset();
    if (!ok) {
      // The kubelet went away mid-write.
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    if (finish_after_write_) {
      Finish(finish_status_);
      return;
    }
    if (pending_) StartWriteLocked(std::move(pending_));
  }

  void OnCancel() override {
    MutexLock lock(mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    bool by_agent;
    {
      MutexLock lock(mu_);
      by_agent = by_agent_;
    }
    hub_->Remove(this, by_agent, registration_);
    delete this;
  }

 private:
  void StartWriteLocked(SnapshotPtr snapshot) {
    current_ = std::move(snapshot);
    writing_ = true;
    StartWrite(current_.get());
  }

  // Finish exactly once, after any write in flight completes.
  void FinishLocked(const grpc::Status& status) {
    if (finishing_) return;
    finishing_ = true;
    pending_.reset();
    if (writing_) {
      finish_after_write_ = true;
      finish_status_ = status;
      return;
    }
    Finish(status);
  }

  StreamHub* const hub_;
  const uint64_t registration_;
  Mutex mu_;
  SnapshotPtr current_;  // the message being written; kept alive until done
  SnapshotPtr pending_;  // newest snapshot not yet written
  bool writing_ = false;
  bool finishing_ = false;
  bool finish_after_write_ = false;
  bool by_agent_ = false;
  grpc::Status finish_status_;
};

void StreamHub::Publish(SnapshotPtr snapshot) {
  MutexLock lock(mu_);
  latest_ = snapshot;
  for (Stream* s : streams_) s->Offer(snapshot);
}

grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse>* StreamHub::OpenStream() {
  MutexLock lock(mu_);
  const uint64_t registration = std::exchange(expected_, 0);
  auto* s = new Stream(this, registration);
  if (registration != 0) open_owner_ = registration;
  streams_.insert(s);
  if (latest_) s->Offer(latest_);
  return s;
}

uint64_t StreamHub::kubelet_stream() const {
  MutexLock lock(mu_);
  return open_owner_;
}

void StreamHub::ExpectKubeletStream(uint64_t registration) {
  MutexLock lock(mu_);
  expected_ = registration;
}

void StreamHub::CloseAll() {
  MutexLock lock(mu_);
  for (Stream* s : streams_) s->Close();
}

void StreamHub::Remove(Stream* s, bool by_agent, uint64_t registration) {
  {
    MutexLock lock(mu_);
    streams_.erase(s);
    if (registration != 0 && registration == open_owner_) open_owner_ = 0;
  }
  if (on_end_ && !by_agent && registration != 0) on_end_(registration);
}

}  // namespace devplug::device_plugin
