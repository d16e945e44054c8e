#include "dra/dra_service.h"

namespace devplug::dra {
namespace {

template <typename Request>
std::vector<ClaimRef> Claims(const Request& req) {
  std::vector<ClaimRef> out;
  for (const auto& c : req.claims()) out.push_back({c.namespace_(), c.uid(), c.name()});
  return out;
}

// Both versions' messages have the same fields (v1 adds share_id, which
// devplug never sets: it shares no device between claims).
template <typename Response>
grpc::ServerUnaryReactor* Prepare(Driver* driver, grpc::CallbackServerContext* ctx,
                                  std::vector<ClaimRef> claims, Response* resp) {
  auto* reactor = ctx->DefaultReactor();
  driver->Prepare(std::move(claims), [reactor, resp](std::map<std::string, PrepareResult> out) {
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

template <typename Response>
grpc::ServerUnaryReactor* Unprepare(Driver* driver, grpc::CallbackServerContext* ctx,
                                    std::vector<ClaimRef> claims, Response* resp) {
  auto* reactor = ctx->DefaultReactor();
  driver->Unprepare(std::move(claims), [reactor, resp](std::map<std::string, std::string> out) {
    for (auto& [uid, error] : out) (*resp->mutable_claims())[uid].set_error(error);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* DraServiceV1::NodePrepareResources(
    grpc::CallbackServerContext* ctx, const v1api::NodePrepareResourcesRequest* req,
    v1api::NodePrepareResourcesResponse* resp) {
  return Prepare(driver_, ctx, Claims(*req), resp);
}

grpc::ServerUnaryReactor* DraServiceV1::NodeUnprepareResources(
    grpc::CallbackServerContext* ctx, const v1api::NodeUnprepareResourcesRequest* req,
    v1api::NodeUnprepareResourcesResponse* resp) {
  return Unprepare(driver_, ctx, Claims(*req), resp);
}

grpc::ServerUnaryReactor* DraServiceV1beta1::NodePrepareResources(
    grpc::CallbackServerContext* ctx, const v1beta1api::NodePrepareResourcesRequest* req,
    v1beta1api::NodePrepareResourcesResponse* resp) {
  return Prepare(driver_, ctx, Claims(*req), resp);
}

grpc::ServerUnaryReactor* DraServiceV1beta1::NodeUnprepareResources(
    grpc::CallbackServerContext* ctx, const v1beta1api::NodeUnprepareResourcesRequest* req,
    v1beta1api::NodeUnprepareResourcesResponse* resp) {
  return Unprepare(driver_, ctx, Claims(*req), resp);
}

}  // namespace devplug::dra
