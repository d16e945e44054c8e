// The simulator's side of DRAResourceHealth: after a DRA driver that
// offers it registers, one stream to its newest version, as the kubelet
// opens it, read until it ends; each device's health in its DraDriverView.
#include <algorithm>

#include "dra_health/v1/api.grpc.pb.h"
#include "dra_health/v1alpha1/api.grpc.pb.h"
#include "kubelet_sim.h"

namespace devplug::sim {
namespace {

template <typename Health>
const char* HealthName(Health h) {
  switch (static_cast<int>(h)) {
    case 1:
      return "Healthy";
    case 2:
      return "Unhealthy";
    default:
      return "Unknown";
  }
}

}  // namespace

template <typename Stub, typename Request, typename Response>
void KubeletSim::ReadDraHealth(const std::string& driver, Stub& stub, grpc::ClientContext* ctx) {
  auto reader = stub.NodeWatchResources(ctx, Request());
  Response msg;
  while (reader->Read(&msg)) {
    std::vector<std::string> changes;
    {
      std::lock_guard lock(mu_);
      DraDriverView& d = dra_drivers_[driver];
      d.health_messages++;
      for (const auto& dev : msg.devices()) {
        std::pair<std::string, std::string> now{HealthName(dev.health()), dev.message()};
        auto& was = d.health[dev.device().device_name()];
        if (was != now)
          changes.push_back(StrCat(dev.device().device_name(), " ", now.first,
                                   now.second.empty() ? "" : StrCat(" (", now.second, ")")));
        was = now;
      }
      cv_.notify_all();
    }
    for (const std::string& c : changes) Event(StrCat("kubelet: DRA driver ", driver, ": ", c));
  }
  const grpc::Status st = reader->Finish();
  Event(StrCat("kubelet: DRA driver ", driver, ": health stream ended",
               st.ok() ? "" : StrCat(": ", st.error_message())));
}

void KubeletSim::WatchDraHealth(const std::string& driver, const std::string& service,
                                std::shared_ptr<grpc::Channel> channel) {
  StopDraHealth(driver);
  auto watch = std::make_unique<HealthWatch>();
  grpc::ClientContext* ctx = &watch->ctx;
  watch->thread = std::thread([this, driver, service, channel, ctx] {
    if (service == "v1.DRAResourceHealth") {
      auto stub = ::v1::DRAResourceHealth::NewStub(channel);
      ReadDraHealth<::v1::DRAResourceHealth::Stub, ::v1::NodeWatchResourcesRequest,
                    ::v1::NodeWatchResourcesResponse>(driver, *stub, ctx);
    } else {
      auto stub = ::v1alpha1::DRAResourceHealth::NewStub(channel);
      ReadDraHealth<::v1alpha1::DRAResourceHealth::Stub, ::v1alpha1::NodeWatchResourcesRequest,
                    ::v1alpha1::NodeWatchResourcesResponse>(driver, *stub, ctx);
    }
  });
  std::lock_guard lock(mu_);
  health_watches_[driver] = std::move(watch);
}

void KubeletSim::StopDraHealth(const std::string& driver) {
  std::unique_ptr<HealthWatch> watch;
  {
    std::lock_guard lock(mu_);
    auto it = health_watches_.find(driver);
    if (it == health_watches_.end()) return;
    watch = std::move(it->second);
    health_watches_.erase(it);
  }
  watch->ctx.TryCancel();
  if (watch->thread.joinable()) watch->thread.join();
}

}  // namespace devplug::sim
