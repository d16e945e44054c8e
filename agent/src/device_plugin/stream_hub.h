// Fan-out of one resource's device list to its open ListAndWatch streams.
//
// Every message is a full snapshot, so a stream that is still writing keeps
// only the newest pending snapshot: at most one write is in flight per stream
// and a slow reader never builds a queue.
//
// Whose stream counts: the kubelet opens exactly one ListAndWatch per
// registration, possibly before Register returns. The agent arms the hub
// with the registration's number just before it sends Register, and the
// first stream opened after that belongs to that registration: only its end
// is "the kubelet went away". Any other stream (grpcurl, a probe, a
// monitoring client) gets the same snapshots and may come and go freely.
//
// Thread safety: all methods are thread-safe. Lock order: hub, then stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>

#include <grpcpp/grpcpp.h>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "model/device.h"
#include "util/mutex.h"

namespace devplug::device_plugin {

using SnapshotPtr = std::shared_ptr<const v1beta1::ListAndWatchResponse>;

// Builds the ListAndWatch message for a device list.
SnapshotPtr MakeSnapshot(const DeviceList& devices);

class StreamHub {
 public:
  // Called (without locks held) when the stream that belongs to a
  // registration ends other than by CloseAll(): the kubelet went away.
  using KubeletStreamEnded = std::function<void(uint64_t registration)>;

  explicit StreamHub(KubeletStreamEnded on_end) : on_end_(std::move(on_end)) {}
  StreamHub(const StreamHub&) = delete;
  StreamHub& operator=(const StreamHub&) = delete;

  // Sets the current snapshot and sends it to every open stream.
  void Publish(SnapshotPtr snapshot);

  // A new ListAndWatch reactor for a gRPC call; it starts with the current
  // snapshot.
  grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse>* OpenStream();

  // The next stream opened belongs to `registration` (non-zero); 0 disarms.
  void ExpectKubeletStream(uint64_t registration);

  // Ends every open stream with status OK (agent shutdown or restart).
  void CloseAll();

  // The registration whose stream is open now, or 0: the kubelet is
  // connected when it is the current registration's.
  uint64_t kubelet_stream() const;

 private:
  class Stream;
  void Remove(Stream* s, bool by_agent, uint64_t registration);

  const KubeletStreamEnded on_end_;
  mutable Mutex mu_;
  SnapshotPtr latest_ DEVPLUG_GUARDED_BY(mu_);
  std::set<Stream*> streams_ DEVPLUG_GUARDED_BY(mu_);
  uint64_t expected_ DEVPLUG_GUARDED_BY(mu_) = 0;    // registration of the next stream
  uint64_t open_owner_ DEVPLUG_GUARDED_BY(mu_) = 0;  // registration of the open owned stream
};

}  // namespace devplug::device_plugin
