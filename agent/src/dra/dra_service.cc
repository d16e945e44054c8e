#include "dra/dra_service.h"

#include <algorithm>
#include <utility>

namespace devplug::dra {

std::chrono::steady_clock::time_point AnswerBy(const grpc::ServerContextBase& ctx) {
  const auto now = std::chrono::steady_clock::now();
  const auto left = ctx.deadline() - std::chrono::system_clock::now();
  const std::chrono::milliseconds wait =
      left > std::chrono::duration_cast<std::chrono::system_clock::duration>(kKubeletDraCallTimeout)
          ? std::chrono::milliseconds(kKubeletDraCallTimeout)
          : std::chrono::duration_cast<std::chrono::milliseconds>(left);
  return now + wait - std::min<std::chrono::milliseconds>(wait / 10, std::chrono::seconds(1));
}

bool PendingAnswers::Call::Take() {
  MutexLock lock(mu_);
  return !std::exchange(taken_, true);
}

std::shared_ptr<PendingAnswers::Call> PendingAnswers::Add(grpc::ServerUnaryReactor* reactor) {
  auto call = std::make_shared<Call>(reactor);
  MutexLock lock(mu_);
  if (calls_.size() >= 64) std::erase_if(calls_, [](const auto& e) { return e.second.expired(); });
  calls_.emplace(next_++, call);
  return call;
}

void PendingAnswers::AbortAll() {
  std::map<uint64_t, std::weak_ptr<Call>> calls;
  {
    MutexLock lock(mu_);
    calls.swap(calls_);
  }
  for (auto& [n, weak] : calls)
    if (auto call = weak.lock(); call && call->Take())
      call->reactor()->Finish(
          grpc::Status(grpc::StatusCode::UNAVAILABLE, "the DRA driver is stopping"));
}

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
  auto call = pending_->Add(reactor);
  driver_->Prepare(std::move(claims), AnswerBy(*ctx),
                   [call, resp](std::map<std::string, PrepareResult> out) {
                     if (!call->Take()) return;  // answered already: resp may be gone
                     for (auto& [uid, result] : out) {
                       auto& claim = (*resp->mutable_claims())[uid];
                       claim.set_error(result.error);
                       for (const PreparedDevice& d : result.devices) {
                         auto* dev = claim.add_devices();
                         dev->add_request_names(d.request);
                         dev->set_pool_name(d.pool);
                         dev->set_device_name(d.device);
                         for (const std::string& id : d.cdi_ids) dev->add_cdi_device_ids(id);
                         // v1 only: the share of a shared device.
                         if constexpr (requires { dev->set_share_id(d.share_id); })
                           if (!d.share_id.empty()) dev->set_share_id(d.share_id);
                       }
                     }
                     call->reactor()->Finish(grpc::Status::OK);
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
  auto call = pending_->Add(reactor);
  driver_->Unprepare(std::move(claims), AnswerBy(*ctx),
                     [call, resp](std::map<std::string, std::string> out) {
                       if (!call->Take()) return;
                       for (auto& [uid, error] : out)
                         (*resp->mutable_claims())[uid].set_error(error);
                       call->reactor()->Finish(grpc::Status::OK);
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
