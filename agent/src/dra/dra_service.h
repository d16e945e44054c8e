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

class DraServiceV1 final : public v1api::DRAPlugin::CallbackService {
 public:
  explicit DraServiceV1(Driver* driver) : driver_(driver) {}
  grpc::ServerUnaryReactor* NodePrepareResources(
      grpc::CallbackServerContext* ctx, const v1api::NodePrepareResourcesRequest* req,
      v1api::NodePrepareResourcesResponse* resp) override;
  grpc::ServerUnaryReactor* NodeUnprepareResources(
      grpc::CallbackServerContext* ctx, const v1api::NodeUnprepareResourcesRequest* req,
      v1api::NodeUnprepareResourcesResponse* resp) override;

 private:
  Driver* const driver_;
};

class DraServiceV1beta1 final : public v1beta1api::DRAPlugin::CallbackService {
 public:
  explicit DraServiceV1beta1(Driver* driver) : driver_(driver) {}
  grpc::ServerUnaryReactor* NodePrepareResources(
      grpc::CallbackServerContext* ctx, const v1beta1api::NodePrepareResourcesRequest* req,
      v1beta1api::NodePrepareResourcesResponse* resp) override;
  grpc::ServerUnaryReactor* NodeUnprepareResources(
      grpc::CallbackServerContext* ctx, const v1beta1api::NodeUnprepareResourcesRequest* req,
      v1beta1api::NodeUnprepareResourcesResponse* resp) override;

 private:
  Driver* const driver_;
};

}  // namespace devplug::dra
