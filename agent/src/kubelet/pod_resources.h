// The agent's one client of the kubelet's PodResources API (v1 List): who
// holds which device, for every resource at once.
//
// The kubelet shares one token bucket (100 QPS, burst 10) among every client
// of that socket on the node, so this client never loops tightly: concurrent
// needs share one List in flight, a result younger than the asker's
// freshness bound is reused, and after a failure (an error, a timeout,
// RESOURCE_EXHAUSTED) it backs off (1 s doubling to 30 s) and answers with
// the failure meanwhile. A missing socket is not an error worth backing off
// for: it says so, and the next ask looks again. No List is ever sent
// unless asked for.
//
// Thread safety: thread-safe. Callbacks run on a gRPC thread or, when
// answered at once, on the caller's thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "model/pod_snapshot.h"
#include "podresources/v1/api.grpc.pb.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug::kubelet {

using devplug::PodSnapshot;
using devplug::PodSnapshotPtr;

PodSnapshot ToSnapshot(const v1::ListPodResourcesResponse& response,
                       std::chrono::steady_clock::time_point asked,
                       std::chrono::steady_clock::time_point taken);

class PodResourcesClient {
 public:
  using Clock = std::chrono::steady_clock;
  using Done = std::function<void(StatusOr<PodSnapshotPtr>)>;

  struct Options {
    std::string socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
    std::chrono::milliseconds deadline{5000};
    size_t max_message_bytes = 16 * 1024 * 1024;
    std::chrono::milliseconds min_backoff{1000};
    std::chrono::milliseconds max_backoff{30'000};
  };

  explicit PodResourcesClient(Options options);
  ~PodResourcesClient();  // waits for a List in flight
  PodResourcesClient(const PodResourcesClient&) = delete;
  PodResourcesClient& operator=(const PodResourcesClient&) = delete;

  // Asks for a snapshot at most `fresh` old. `done` runs once: at once with
  // a fresh enough result or the current failure (while backing off, or
  // without a socket), else when the List in flight (shared) finishes.
  void Fetch(std::chrono::milliseconds fresh, Done done);
  // Fetch, waiting for the answer (module worker threads: pod_of).
  StatusOr<PodSnapshotPtr> Get(std::chrono::milliseconds fresh);

  std::string socket() const;
  // A reload moved the socket: the next List goes there.
  void set_socket(const std::string& socket);
  uint64_t lists() const;  // List calls sent so far

 private:
  void StartListLocked() DEVPLUG_REQUIRES(mu_);
  void OnListDone(const grpc::Status& st, const v1::ListPodResourcesResponse& resp,
                  Clock::time_point asked);

  Options options_ DEVPLUG_GUARDED_BY(mu_);
  mutable Mutex mu_;
  std::condition_variable_any idle_cv_;
  std::shared_ptr<grpc::Channel> channel_ DEVPLUG_GUARDED_BY(mu_);  // made on first use
  std::unique_ptr<v1::PodResourcesLister::Stub> stub_ DEVPLUG_GUARDED_BY(mu_);
  PodSnapshotPtr latest_ DEVPLUG_GUARDED_BY(mu_);
  std::vector<Done> waiting_ DEVPLUG_GUARDED_BY(mu_);
  bool in_flight_ DEVPLUG_GUARDED_BY(mu_) = false;
  Status failure_ DEVPLUG_GUARDED_BY(mu_);  // the last List's
  Clock::time_point retry_at_ DEVPLUG_GUARDED_BY(mu_){};
  std::chrono::milliseconds backoff_ DEVPLUG_GUARDED_BY(mu_){0};
  uint64_t lists_ DEVPLUG_GUARDED_BY(mu_) = 0;
};

}  // namespace devplug::kubelet
