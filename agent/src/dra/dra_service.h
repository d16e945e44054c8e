// The kubelet's DRAPlugin service (dra v1, and v1beta1 for kubelets 1.32
// and 1.33) over one resource's Driver, beside the Registration service on
// its socket in plugins_registry. Each call is handed to the driver's own
// thread and answered from there; gRPC's threads never wait on a module.
//
// Thread safety: gRPC calls it from any thread; the driver is thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include "dra/driver.h"
#include "dra/v1/api.grpc.pb.h"
#include "dra/v1beta1/api.grpc.pb.h"

namespace devplug::dra {

namespace v1api = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace v1beta1api = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

// The plugin watcher's name for this kind of plugin, and the versions
// offered (newest first).
inline constexpr char kDraPluginType[] = "DRAPlugin";
inline constexpr const char* kDraVersions[] = {"v1.DRAPlugin", "v1beta1.DRAPlugin"};

// Both versions' services: their messages have the same fields (v1 adds
// share_id, which devplug never sets: it shares no device between claims).
template <typename Base, typename PrepareRequest, typename PrepareResponse,
          typename UnprepareRequest, typename UnprepareResponse>
class DraService final : public Base {
 public:
  explicit DraService(Driver* driver) : driver_(driver) {}
  grpc::ServerUnaryReactor* NodePrepareResources(grpc::CallbackServerContext* ctx,
                                                 const PrepareRequest* req,
                                                 PrepareResponse* resp) override;
  grpc::ServerUnaryReactor* NodeUnprepareResources(grpc::CallbackServerContext* ctx,
                                                   const UnprepareRequest* req,
                                                   UnprepareResponse* resp) override;

 private:
  Driver* const driver_;
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
