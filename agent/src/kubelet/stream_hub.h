// Fan-out of one resource's device list to its open ListAndWatch streams.
//
// Every message is a full snapshot, so a stream that is still writing keeps
// only the newest pending snapshot: at most one write is in flight per stream
// and a slow reader never builds a queue.
//
// Thread safety: all methods are thread-safe. Lock order: hub, then stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>

#include <grpcpp/grpcpp.h>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "modules/device.h"

namespace devplug::kubelet {

using SnapshotPtr = std::shared_ptr<const v1beta1::ListAndWatchResponse>;

// Builds the ListAndWatch message for a device list.
SnapshotPtr MakeSnapshot(const modules::DeviceList& devices);

class StreamHub {
 public:
  // Called (without locks held) whenever a stream ends. by_agent: the agent
  // closed it (shutdown, restart) rather than the kubelet going away.
  // generation: the hub's generation when the stream opened.
  using StreamEndListener = std::function<void(bool by_agent, uint64_t generation)>;

  explicit StreamHub(StreamEndListener on_end) : on_end_(std::move(on_end)) {}
  StreamHub(const StreamHub&) = delete;
  StreamHub& operator=(const StreamHub&) = delete;

  // Sets the current snapshot and sends it to every open stream.
  void Publish(SnapshotPtr snapshot);
  SnapshotPtr latest() const;

  // A new ListAndWatch reactor for a gRPC call; it starts with the current
  // snapshot.
  grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse>* OpenStream();

  // Tags streams opened from now on (the agent bumps it per server start).
  void set_generation(uint64_t g);

  // Ends every open stream with status OK (agent shutdown or restart).
  void CloseAll();

  size_t open_streams() const;
  uint64_t streams_opened() const;

 private:
  class Stream;
  void Remove(Stream* s, bool by_agent, uint64_t generation);

  const StreamEndListener on_end_;
  mutable std::mutex mu_;
  SnapshotPtr latest_;         // guarded by mu_
  std::set<Stream*> streams_;  // guarded by mu_
  uint64_t opened_ = 0;        // guarded by mu_
  uint64_t generation_ = 0;    // guarded by mu_
};

}  // namespace devplug::kubelet
