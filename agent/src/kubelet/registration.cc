#include "kubelet/registration.h"

namespace devplug::kubelet {

std::shared_ptr<PendingRegister> StartRegister(const std::string& kubelet_socket,
                                               const v1beta1::RegisterRequest& request,
                                               std::chrono::milliseconds deadline,
                                               std::function<void(const grpc::Status&)> done) {
  auto call = std::shared_ptr<PendingRegister>(new PendingRegister());
  grpc::ChannelArguments args;
  // A short unary call: no keepalive pings (the kubelet's server would answer
  // aggressive pings with GOAWAY), and no shared subchannel with other calls.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  call->channel_ =
      grpc::CreateCustomChannel("unix:" + kubelet_socket, grpc::InsecureChannelCredentials(), args);
  call->stub_ = v1beta1::Registration::NewStub(call->channel_);
  call->req_ = request;
  call->ctx_.set_deadline(std::chrono::system_clock::now() + deadline);
  call->ctx_.set_wait_for_ready(false);
  call->stub_->async()->Register(&call->ctx_, &call->req_, &call->resp_,
                                 [call, done = std::move(done)](grpc::Status st) { done(st); });
  return call;
}

}  // namespace devplug::kubelet
