#include "kubelet/registration_service.h"

namespace devplug::kubelet {

pluginregistration::PluginInfo RegistrationService::DevicePluginInfo(
    const std::string& resource_name) {
  pluginregistration::PluginInfo info;
  info.set_type(kDevicePluginType);
  info.set_name(resource_name);
  // "": the DevicePlugin service is on this same socket.
  info.set_endpoint("");
  info.add_supported_versions("v1beta1");
  return info;
}

grpc::ServerUnaryReactor* RegistrationService::GetInfo(grpc::CallbackServerContext* ctx,
                                                       const pluginregistration::InfoRequest*,
                                                       pluginregistration::PluginInfo* resp) {
  *resp = info_;
  if (cb_.probed) cb_.probed();
  auto* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerUnaryReactor* RegistrationService::NotifyRegistrationStatus(
    grpc::CallbackServerContext* ctx, const pluginregistration::RegistrationStatus* req,
    pluginregistration::RegistrationStatusResponse*) {
  if (cb_.status)
    cb_.status(req->plugin_registered()
                   ? OkStatus()
                   : Status(StatusCode::kUnknown,
                            req->error().empty() ? "(no reason given)" : req->error()));
  auto* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

}  // namespace devplug::kubelet
