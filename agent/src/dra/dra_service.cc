#include "dra/dra_service.h"

namespace devplug::dra {

template <typename Base, typename PrepareRequest, typename PrepareResponse,
          typename UnprepareRequest, typename UnprepareResponse>
grpc::ServerUnaryReactor*
DraService<Base, PrepareRequest, PrepareResponse, UnprepareRequest,
           UnprepareResponse>::NodePrepareResources(grpc::CallbackServerContext* ctx,
                                                    const PrepareRequest* req,
                                                    PrepareResponse* resp) {
  std::vector<ClaimRef> claims;
  for (const auto& c : req->claims()) claims.push_back({c.namespace_(), c.uid(), c.name()});
  auto* reactor = ctx->DefaultReactor();
  driver_->Prepare(std::move(claims), [reactor, resp](std::map<std::string, PrepareResult> out) {
    for (auto& [uid, result] : out) {
      auto& claim = (*resp->mutable_claims())[uid];
      claim.set_error(result.error);
      for (const PreparedDevice& d : result.devices) {
        auto* dev = claim.add_devices();
        dev->add_request_names(d.request);
        dev->set_pool_name(d.pool);
        dev->set_device_name(d.device);
        for (const std::string& id : d.cdi_ids) dev->add_cdi_device_ids(id);
      }
    }
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

template <typename Base, typename PrepareRequest, typename PrepareResponse,
          typename UnprepareRequest, typename UnprepareResponse>
grpc::ServerUnaryReactor*
DraService<Base, PrepareRequest, PrepareResponse, UnprepareRequest,
           UnprepareResponse>::NodeUnprepareResources(grpc::CallbackServerContext* ctx,
                                                      const UnprepareRequest* req,
                                                      UnprepareResponse* resp) {
  std::vector<ClaimRef> claims;
  for (const auto& c : req->claims()) claims.push_back({c.namespace_(), c.uid(), c.name()});
  auto* reactor = ctx->DefaultReactor();
  driver_->Unprepare(std::move(claims), [reactor, resp](std::map<std::string, std::string> out) {
    for (auto& [uid, error] : out) (*resp->mutable_claims())[uid].set_error(error);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

template class DraService<v1api::DRAPlugin::CallbackService, v1api::NodePrepareResourcesRequest,
                          v1api::NodePrepareResourcesResponse, v1api::NodeUnprepareResourcesRequest,
                          v1api::NodeUnprepareResourcesResponse>;
template class DraService<
    v1beta1api::DRAPlugin::CallbackService, v1beta1api::NodePrepareResourcesRequest,
    v1beta1api::NodePrepareResourcesResponse, v1beta1api::NodeUnprepareResourcesRequest,
    v1beta1api::NodeUnprepareResourcesResponse>;

}  // namespace devplug::dra
