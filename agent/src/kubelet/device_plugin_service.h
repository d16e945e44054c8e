// The v1beta1.DevicePlugin gRPC service of one resource (callback API).
//
// Reactions never block and never call module code: Allocate,
// GetPreferredAllocation and PreStartContainer are handed to the module
// instance's worker thread, which finishes the call.
//
// Thread safety: thread-safe; one object per gRPC server (a service object
// cannot be registered with two servers), all sharing the resource's hub and
// module instance, which must outlive the server.
#pragma once

#include <grpcpp/grpcpp.h>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "kubelet/stream_hub.h"
#include "modules/module_instance.h"

namespace devplug::kubelet {

// The kubelet's default receive limit for every message from a plugin.
inline constexpr size_t kKubeletMaxMessageBytes = 4 * 1024 * 1024;

// The options a resource advertises, derived from the module's hooks; used
// identically in RegisterRequest and GetDevicePluginOptions.
v1beta1::DevicePluginOptions OptionsFor(const modules::LoadedModule& module);

// Fills one container's Allocate answer from a recipe.
void FillContainerResponse(const modules::Recipe& recipe, v1beta1::ContainerAllocateResponse* out);

class DevicePluginService final : public v1beta1::DevicePlugin::CallbackService {
 public:
  DevicePluginService(modules::ModuleInstance* instance, StreamHub* hub)
      : instance_(instance), hub_(hub), options_(OptionsFor(instance->module())) {}

  grpc::ServerUnaryReactor* GetDevicePluginOptions(grpc::CallbackServerContext* ctx,
                                                   const v1beta1::Empty* req,
                                                   v1beta1::DevicePluginOptions* resp) override;
  grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse>* ListAndWatch(
      grpc::CallbackServerContext* ctx, const v1beta1::Empty* req) override;
  grpc::ServerUnaryReactor* GetPreferredAllocation(
      grpc::CallbackServerContext* ctx, const v1beta1::PreferredAllocationRequest* req,
      v1beta1::PreferredAllocationResponse* resp) override;
  grpc::ServerUnaryReactor* Allocate(grpc::CallbackServerContext* ctx,
                                     const v1beta1::AllocateRequest* req,
                                     v1beta1::AllocateResponse* resp) override;
  grpc::ServerUnaryReactor* PreStartContainer(grpc::CallbackServerContext* ctx,
                                              const v1beta1::PreStartContainerRequest* req,
                                              v1beta1::PreStartContainerResponse* resp) override;

 private:
  modules::ModuleInstance* const instance_;
  StreamHub* const hub_;
  const v1beta1::DevicePluginOptions options_;
};

}  // namespace devplug::kubelet
