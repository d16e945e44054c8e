// The plugin watcher's Registration service (pluginregistration v1), served
// beside DevicePlugin (or DRAPlugin) on a resource's socket in
// plugins_registry.
//
// The kubelet is the client: GetInfo when it sees the socket, then, after
// it has dialed the DevicePlugin service on the same socket (the endpoint
// is "") and opened ListAndWatch, NotifyRegistrationStatus with how that
// went. Both arrive on gRPC's threads and are handed on at once.
//
// Thread safety: gRPC calls it from any thread; the callbacks must be
// thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "pluginregistration/v1/api.grpc.pb.h"
#include "util/status.h"

namespace devplug::kubelet {

// The plugin type the kubelet's device manager handles.
inline constexpr char kDevicePluginType[] = "DevicePlugin";

class RegistrationService final : public pluginregistration::Registration::CallbackService {
 public:
  struct Callbacks {
    // GetInfo: a new probe. Arms the hub for the stream that follows and
    // hands the probe on; returns nothing the kubelet sees.
    std::function<void()> probed;
    // NotifyRegistrationStatus: OK, or UNKNOWN with the kubelet's error.
    std::function<void(Status)> status;
  };
  // A device plugin: type "DevicePlugin", the resource's name, endpoint ""
  // (this same socket), version "v1beta1".
  RegistrationService(const std::string& resource_name, Callbacks callbacks)
      : RegistrationService(DevicePluginInfo(resource_name), std::move(callbacks)) {}
  // Any plugin type (a DRA driver: "DRAPlugin", the driver's name, this
  // socket's path, its versions).
  RegistrationService(pluginregistration::PluginInfo info, Callbacks callbacks)
      : info_(std::move(info)), cb_(std::move(callbacks)) {}
  static pluginregistration::PluginInfo DevicePluginInfo(const std::string& resource_name);

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx,
                                    const pluginregistration::InfoRequest* req,
                                    pluginregistration::PluginInfo* resp) override;
  grpc::ServerUnaryReactor* NotifyRegistrationStatus(
      grpc::CallbackServerContext* ctx, const pluginregistration::RegistrationStatus* req,
      pluginregistration::RegistrationStatusResponse* resp) override;

 private:
  const pluginregistration::PluginInfo info_;
  const Callbacks cb_;
};

}  // namespace devplug::kubelet
