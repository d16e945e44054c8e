// Asynchronous v1beta1.Registration/Register calls to kubelet.sock.
//
// Thread safety: thread-safe. The completion callback runs on a gRPC thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "deviceplugin/v1beta1/api.grpc.pb.h"

namespace devplug::kubelet {

// The kubelet dials the plugin (up to 10 s) and calls GetDevicePluginOptions
// before it answers Register, so the call gets a generous deadline.
inline constexpr std::chrono::seconds kRegisterDeadline{30};

class PendingRegister {
 public:
  // Cancels the call if it has not completed; the callback still runs once.
  void Cancel() { ctx_.TryCancel(); }

 private:
  friend std::shared_ptr<PendingRegister> StartRegister(const std::string&,
                                                        const v1beta1::RegisterRequest&,
                                                        std::chrono::milliseconds,
                                                        std::function<void(const grpc::Status&)>);
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1beta1::Registration::Stub> stub_;
  grpc::ClientContext ctx_;
  v1beta1::RegisterRequest req_;
  v1beta1::Empty resp_;
};

// Starts Register against the kubelet socket at `kubelet_socket`. `done` runs
// exactly once with the outcome. Fails fast when nobody listens.
std::shared_ptr<PendingRegister> StartRegister(const std::string& kubelet_socket,
                                               const v1beta1::RegisterRequest& request,
                                               std::chrono::milliseconds deadline,
                                               std::function<void(const grpc::Status&)> done);

}  // namespace devplug::kubelet
