// DRA's front end of one resource (api = "dra"): what a Resource holds in
// place of the device plugin service. It owns, or shares with a reload's
// successor, the resource's dra::Driver; hands the module instance its
// ListSink (the slices, active only while the resource serves); serves the
// DRAPlugin services on the resource's socket and says what the plugin
// watcher's Registration announces; and stops the driver when no resource
// serves it any more.
//
// Thread safety: not thread-safe; the agent's main thread owns it, as it
// owns its Resource. The driver and the services it makes are thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "config/config.h"
#include "dra/dra_service.h"
#include "dra/driver.h"
#include "model/rpc.h"
#include "modules/device_source.h"
#include "modules/hooks.h"
#include "pluginregistration/v1/api.pb.h"
#include "util/status.h"

namespace devplug::dra {

class FrontEnd {
 public:
  using Clock = std::chrono::steady_clock;

  // The front end of resource `r` under the running configuration `cfg`:
  // `predecessor`'s driver when a reload re-creates a resource of the same
  // driver (one driver owns its checkpoint: a second one would read it, and
  // write specs again, while the first still prepares and unprepares), else
  // a new driver with its API server client.
  static StatusOr<std::unique_ptr<FrontEnd>> Make(const config::AgentConfig& cfg,
                                                  const config::ResourceConfig& r,
                                                  bool module_releases,
                                                  std::shared_ptr<RpcObserver> observer,
                                                  const FrontEnd* predecessor);
  ~FrontEnd();
  FrontEnd(const FrontEnd&) = delete;
  FrontEnd& operator=(const FrontEnd&) = delete;

  // A new instance's ListSink (made at each launch): its lists reach the
  // driver once `serving`.
  std::shared_ptr<modules::ListSink> Sink(bool serving);
  // The instance the kubelet's calls go to (it runs and the resource
  // serves); with `publish`, its current list becomes the slices at once (a
  // reload's commit).
  void Serve(modules::DeviceSource* source, bool publish);
  // `source` stops: calls no longer reach it once this returns.
  void Clear(const modules::DeviceSource* source);

  // The DRAPlugin services, on `builder`'s server.
  void Register(grpc::ServerBuilder& builder);
  // What the Registration service announces: the kubelet dials the
  // DRAPlugin service at this same socket.
  pluginregistration::PluginInfo Info(const std::string& socket_path) const;
  // The server stops: calls still waiting for the driver are answered
  // UNAVAILABLE; then the services go (`exiting`: they are kept until the
  // process ends, as the server is).
  void AbortPending();
  void DropServices(bool exiting);

  // The kubelet confirmed a registration: the slices it wiped are written
  // again.
  void Resync() {
    if (driver_) driver_->Resync();
  }

  // Stops the driver unless a reload's successor shares it (its last task
  // deletes this node's slices); `instance` is cleared once its threads
  // have stopped (a call still queued releases through it). The front end
  // then has no driver, unless the successor shares it.
  void Stop(const modules::DeviceSource* instance);
  // At exit, in two steps under one deadline for every resource.
  void RequestStop();
  bool WaitStopped(Clock::time_point deadline);

  // Null once stopped.
  const Driver* driver() const { return driver_.get(); }

 private:
  class GatedSink;
  explicit FrontEnd(std::shared_ptr<Driver> driver) : driver_(std::move(driver)) {}
  // No other front end shares the driver.
  bool Alone() const { return driver_ && driver_.use_count() == 1; }

  std::shared_ptr<Driver> driver_;
  std::shared_ptr<GatedSink> sink_;
  std::unique_ptr<DraServiceV1> v1_;
  std::unique_ptr<DraServiceV1beta1> v1beta1_;
};

}  // namespace devplug::dra
