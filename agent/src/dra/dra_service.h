// The kubelet's DRAPlugin service (dra v1, and v1beta1 for kubelets 1.32
// and 1.33) over one resource's Driver, beside the Registration service on
// its socket in plugins_registry. Each call is handed to the driver's own
// thread and answered from there, by the kubelet's deadline (the call's
// gRPC deadline, a little early); gRPC's threads never wait on a module.
// AbortPending answers every call still waiting with UNAVAILABLE, so that
// a reload or an exit never waits for the driver's queue.
//
// Thread safety: gRPC calls it from any thread; the driver is thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <memory>

#include <grpcpp/grpcpp.h>

#include "dra/driver.h"
#include "dra/v1/api.grpc.pb.h"
#include "dra/v1beta1/api.grpc.pb.h"
#include "util/mutex.h"

namespace devplug::dra {

namespace v1api = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace v1beta1api = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

// The plugin watcher's name for this kind of plugin, and the versions
// offered (newest first).
inline constexpr char kDraPluginType[] = "DRAPlugin";
inline constexpr const char* kDraVersions[] = {"v1.DRAPlugin", "v1beta1.DRAPlugin"};

// How long the kubelet waits for a DRA call (its defaultClientCallTimeout),
// when a call carries no deadline.
inline constexpr std::chrono::seconds kKubeletDraCallTimeout{45};

// When a call must be answered, on the steady clock: its deadline, less a
// margin for the answer's way back (a tenth, at most 1 s).
std::chrono::steady_clock::time_point AnswerBy(const grpc::ServerContextBase& ctx);

// The calls a service has handed to its driver and not answered yet.
// Whoever takes a call first (the driver's answer, or AbortPending) answers
// it; gRPC may free the response once it is answered.
class PendingAnswers {
 public:
  class Call {
   public:
    explicit Call(grpc::ServerUnaryReactor* reactor) : reactor_(reactor) {}
    // True once, for whoever may answer now.
    bool Take();
    grpc::ServerUnaryReactor* reactor() const { return reactor_; }

   private:
    grpc::ServerUnaryReactor* const reactor_;
    Mutex mu_;
    bool taken_ DEVPLUG_GUARDED_BY(mu_) = false;
  };
  std::shared_ptr<Call> Add(grpc::ServerUnaryReactor* reactor);
  // Answers every call not answered yet with UNAVAILABLE.
  void AbortAll();

 private:
  Mutex mu_;
  std::map<uint64_t, std::weak_ptr<Call>> calls_ DEVPLUG_GUARDED_BY(mu_);
  uint64_t next_ DEVPLUG_GUARDED_BY(mu_) = 0;
};

// Both versions' services: their messages have the same fields (v1 adds
// share_id, set for a share of a shared device).
template <typename Base, typename PrepareRequest, typename PrepareResponse,
          typename UnprepareRequest, typename UnprepareResponse>
class DraService final : public Base {
 public:
  explicit DraService(Driver* driver) : driver_(driver) {}
  // Answers the calls still waiting for the driver with UNAVAILABLE (the
  // driver goes on with them; the kubelet asks again).
  void AbortPending() { pending_->AbortAll(); }
  grpc::ServerUnaryReactor* NodePrepareResources(grpc::CallbackServerContext* ctx,
                                                 const PrepareRequest* req,
                                                 PrepareResponse* resp) override;
  grpc::ServerUnaryReactor* NodeUnprepareResources(grpc::CallbackServerContext* ctx,
                                                   const UnprepareRequest* req,
                                                   UnprepareResponse* resp) override;

 private:
  Driver* const driver_;
  const std::shared_ptr<PendingAnswers> pending_ = std::make_shared<PendingAnswers>();
};

using DraServiceV1 =
    DraService<v1api::DRAPlugin::CallbackService, v1api::NodePrepareResourcesRequest,
               v1api::NodePrepareResourcesResponse, v1api::NodeUnprepareResourcesRequest,
               v1api::NodeUnprepareResourcesResponse>;
using DraServiceV1beta1 =
    DraService<v1beta1api::DRAPlugin::CallbackService, v1beta1api::NodePrepareResourcesRequest,
               v1beta1api::NodePrepareResourcesResponse, v1beta1api::NodeUnprepareResourcesRequest,
               v1beta1api::NodeUnprepareResourcesResponse>;
extern template class DraService<
    v1api::DRAPlugin::CallbackService, v1api::NodePrepareResourcesRequest,
    v1api::NodePrepareResourcesResponse, v1api::NodeUnprepareResourcesRequest,
    v1api::NodeUnprepareResourcesResponse>;
extern template class DraService<
    v1beta1api::DRAPlugin::CallbackService, v1beta1api::NodePrepareResourcesRequest,
    v1beta1api::NodePrepareResourcesResponse, v1beta1api::NodeUnprepareResourcesRequest,
    v1beta1api::NodeUnprepareResourcesResponse>;

}  // namespace devplug::dra
