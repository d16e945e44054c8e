// The kubelet's DRAResourceHealth service for one DRA resource (v1, and
// v1alpha1 for kubelets 1.34 to 1.36): the health of every device it
// serves, one full list per message, on every stream the kubelet opens.
//
// - A new device list is sent at once; a device's health is its module's
//   (Healthy, or Unhealthy with the module's reason as the message, at most
//   1024 characters). A device held back while its release runs is Healthy.
// - The kubelet reads a device it has not heard of for
//   health_check_timeout_seconds as Unknown: the list goes out again every
//   third of kHealthTimeout, changed or not.
// - A stream keeps at most one write in flight and only the newest list
//   pending: a slow reader never builds a queue.
//
// Thread safety: thread-safe. Lock order: hub, then stream.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "dra_health/v1/api.grpc.pb.h"
#include "dra_health/v1alpha1/api.grpc.pb.h"
#include "model/device.h"
#include "util/mutex.h"

namespace devplug::dra {

// The versions of the health service, as a registration names them.
inline constexpr const char* kHealthVersions[] = {"v1.DRAResourceHealth",
                                                  "v1alpha1.DRAResourceHealth"};
// What each message tells the kubelet to wait for the next one.
inline constexpr std::chrono::seconds kHealthTimeout{60};
inline constexpr size_t kHealthMessageMax = 1024;

// One list, as every version's message says it.
struct HealthReport {
  struct Entry {
    std::string device;  // its DRA name
    bool healthy = true;
    std::string message;
  };
  std::string pool;
  std::vector<Entry> devices;
};

class HealthHub {
 public:
  // `pool`: the node's name, which names the pool. `period`: how often the
  // list goes out unchanged.
  explicit HealthHub(std::string pool,
                     std::chrono::milliseconds period =
                         std::chrono::duration_cast<std::chrono::milliseconds>(kHealthTimeout) / 3);
  ~HealthHub();
  HealthHub(const HealthHub&) = delete;
  HealthHub& operator=(const HealthHub&) = delete;

  void Publish(const DeviceList& devices);
  // Ends every open stream with OK (the server stops).
  void CloseAll();
  size_t streams() const;

  // A reactor for a NodeWatchResources call of either version.
  template <typename Response>
  grpc::ServerWriteReactor<Response>* Open();

 private:
  class StreamBase;
  template <typename Response>
  class Stream;
  void Remove(StreamBase* s);
  void Resend();

  const std::string pool_;
  const std::chrono::milliseconds period_;
  mutable Mutex mu_;
  std::shared_ptr<const HealthReport> latest_ DEVPLUG_GUARDED_BY(mu_);
  std::set<StreamBase*> streams_ DEVPLUG_GUARDED_BY(mu_);
  // The resend thread's own wait.
  Mutex wait_mu_;
  std::condition_variable_any wait_cv_;
  bool stopping_ DEVPLUG_GUARDED_BY(wait_mu_) = false;
  std::thread resend_;
};

// The service of each version, over one hub.
template <typename Base, typename Request, typename Response>
class HealthService final : public Base {
 public:
  explicit HealthService(HealthHub* hub) : hub_(hub) {}
  grpc::ServerWriteReactor<Response>* NodeWatchResources(grpc::CallbackServerContext*,
                                                         const Request*) override {
    return hub_->Open<Response>();
  }

 private:
  HealthHub* const hub_;
};

using HealthServiceV1 =
    HealthService<::v1::DRAResourceHealth::CallbackService, ::v1::NodeWatchResourcesRequest,
                  ::v1::NodeWatchResourcesResponse>;
using HealthServiceV1alpha1 =
    HealthService<::v1alpha1::DRAResourceHealth::CallbackService,
                  ::v1alpha1::NodeWatchResourcesRequest, ::v1alpha1::NodeWatchResourcesResponse>;

}  // namespace devplug::dra
