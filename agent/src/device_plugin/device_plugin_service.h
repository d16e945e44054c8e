// The v1beta1.DevicePlugin gRPC service of one resource (callback API).
//
// Reactions never block and never call module code: Allocate,
// GetPreferredAllocation and PreStartContainer are handed to the resource's
// DeviceSource (modules/device_source.h: its module instance), which answers
// the call from its worker or a lane. Each such call is
// finished exactly once: by the module's answer, by DEADLINE_EXCEEDED after
// call_timeout (a slow or hung module must not hang pod admission), or by
// UNAVAILABLE when the agent stops serving.
//
// Thread safety: thread-safe; one object per gRPC server (a service object
// cannot be registered with two servers), all sharing the resource's hub and
// device source, which must outlive the server.
#pragma once

#include <chrono>
#include <map>
#include <memory>

#include <grpcpp/grpcpp.h>

#include "cdi/resource_cdi.h"
#include "device_plugin/stream_hub.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "lifecycle/resource_releases.h"
#include "model/kubelet_limits.h"
#include "model/rpc.h"
#include "modules/device_source.h"
#include "util/mutex.h"
#include "util/timers.h"

namespace devplug::device_plugin {

// The options a resource advertises, derived from the module's hooks and
// the instance's choices in create(); used identically in RegisterRequest
// and GetDevicePluginOptions. PreStartContainer: a module's pre_start()
// (unless the instance opted out, ABI 1.5), or release tracking (devices
// reused before their release are released there).
v1beta1::DevicePluginOptions OptionsFor(const modules::DeviceSource& source);

// Fills one container's Allocate answer from a recipe.
void FillContainerResponse(const Recipe& recipe, v1beta1::ContainerAllocateResponse* out);

class PendingCall;

class DevicePluginService final : public v1beta1::DevicePlugin::CallbackService {
 public:
  // `releases` (optional) learns the IDs of every successful Allocate
  // (release tracking, pod lookups), on a gRPC or worker thread.
  DevicePluginService(modules::DeviceSource* source, StreamHub* hub, Timers* timers,
                      std::chrono::milliseconds call_timeout,
                      std::chrono::milliseconds prestart_timeout,
                      std::shared_ptr<lifecycle::ResourceReleases> releases = nullptr,
                      std::shared_ptr<RpcObserver> metrics = nullptr,
                      std::shared_ptr<cdi::ResourceCdi> cdi = nullptr);

  // A reload may change call_timeout; calls from now on use the new one.
  void set_call_timeout(std::chrono::milliseconds t) { call_timeout_ms_.store(t.count()); }
  // The same for PreStartContainer, which has a deadline of its own.
  void set_prestart_timeout(std::chrono::milliseconds t) { prestart_timeout_ms_.store(t.count()); }

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

  // Finishes every call still waiting for the module with UNAVAILABLE.
  void AbortPending();

 private:
  // A call to answer later, answered with DEADLINE_EXCEEDED after
  // call_timeout (prestart_timeout for PreStartContainer) unless answered
  // before; `ids` is how the log names it.
  std::shared_ptr<PendingCall> Track(grpc::ServerUnaryReactor* reactor, devplug::Rpc rpc,
                                     std::string ids);

  modules::DeviceSource* const source_;
  StreamHub* const hub_;
  Timers* const timers_;
  std::atomic<int64_t> call_timeout_ms_;
  std::atomic<int64_t> prestart_timeout_ms_;
  const v1beta1::DevicePluginOptions options_;
  const std::shared_ptr<lifecycle::ResourceReleases> releases_;
  const std::shared_ptr<RpcObserver> metrics_;
  const std::shared_ptr<cdi::ResourceCdi> cdi_;  // null: cdi is "off"
  Mutex mu_;
  std::map<uint64_t, std::weak_ptr<PendingCall>> pending_ DEVPLUG_GUARDED_BY(mu_);
  uint64_t next_call_ DEVPLUG_GUARDED_BY(mu_) = 0;
};

}  // namespace devplug::device_plugin
