#include "dra/front_end.h"

#include <atomic>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "kube/kubeconfig.h"
#include "util/leak.h"
#include "util/sanitizers.h"

namespace devplug::dra {

// The instance's ListSink: its lists go to the driver once the resource
// serves (a reload's staged resource publishes no slice). Weak: only front
// ends own the driver (a driver with none left is stopped), and a list
// published after that goes nowhere.
class FrontEnd::GatedSink final : public modules::ListSink {
 public:
  GatedSink(const std::shared_ptr<Driver>& driver, bool active)
      : driver_(driver), active_(active) {}
  std::string Accept(const DeviceList&) override { return ""; }
  void Publish(const DeviceListPtr& list) override {
    if (!active_.load()) return;
    if (std::shared_ptr<Driver> d = driver_.lock()) d->Publish(list);
  }
  void set_active(bool active) { active_ = active; }

 private:
  const std::weak_ptr<Driver> driver_;
  std::atomic<bool> active_;
};

StatusOr<std::unique_ptr<FrontEnd>> FrontEnd::Make(const config::AgentConfig& cfg,
                                                   const config::ResourceConfig& r,
                                                   bool module_releases,
                                                   std::shared_ptr<RpcObserver> observer,
                                                   const FrontEnd* predecessor) {
  if (predecessor && predecessor->driver_ && predecessor->driver_->options().driver == r.driver)
    return std::unique_ptr<FrontEnd>(new FrontEnd(predecessor->driver_));
  kube::Credentials given;
  given.server = cfg.api_server;
  given.ca_file = cfg.api_ca_file;
  given.token_file = cfg.api_token_file;
  given.client_cert = cfg.api_client_cert;
  given.client_key = cfg.api_client_key;
  auto creds = kube::ChooseCredentials(cfg.api_kubeconfig, std::move(given));
  if (!creds.ok())
    return Status(
        creds.status().code(),
        StrCat("resource \"", r.name, "\": DRA needs the API server: ", creds.status().message(),
               cfg.api_kubeconfig.empty() && cfg.api_server.empty()
                   ? " (outside a pod, set agent.api_kubeconfig, or agent.api_server "
                     "and its credentials)"
                   : ""));
  std::error_code ec;
  std::filesystem::create_directories(cfg.dra_state_dir, ec);
  if (ec)
    return UnavailableError(
        StrCat("resource \"", r.name, "\": DRA: ", cfg.dra_state_dir, ": ", ec.message()));
  kube::Client::Options client;
  client.credentials = std::move(*creds);
  client.timeout = cfg.call_timeout;
  auto driver = Driver::Make({.resource = r.name,
                              .driver = r.driver,
                              .node = cfg.node_name,
                              .cdi_dir = r.cdi_dir,
                              .host_root = cfg.host_root,
                              .checkpoint = StrCat(cfg.dra_state_dir, "/", r.driver, ".json"),
                              .call_timeout = cfg.call_timeout,
                              .prestart_timeout = cfg.prestart_timeout,
                              .client = std::make_shared<kube::Client>(std::move(client)),
                              .module_releases = module_releases,
                              .observer = std::move(observer)});
  if (!driver.ok())
    return Status(driver.status().code(),
                  StrCat("resource \"", r.name, "\": DRA: ", driver.status().message()));
  spdlog::info("resource \"{}\": DRA driver {} on node {}", r.name, r.driver, cfg.node_name);
  return std::unique_ptr<FrontEnd>(new FrontEnd(std::shared_ptr<Driver>(std::move(*driver))));
}

FrontEnd::~FrontEnd() = default;

std::shared_ptr<modules::ListSink> FrontEnd::Sink(bool serving) {
  sink_ = std::make_shared<GatedSink>(driver_, serving);
  return sink_;
}

void FrontEnd::Serve(modules::DeviceSource* source, bool publish) {
  driver_->SetInstance(source);
  if (!publish) return;
  if (sink_) sink_->set_active(true);
  driver_->Publish(source->devices());
}

void FrontEnd::Clear(const modules::DeviceSource* source) {
  if (driver_) driver_->ClearInstance(source);
}

void FrontEnd::Register(grpc::ServerBuilder& builder) {
  v1_ = std::make_unique<DraServiceV1>(driver_.get());
  v1beta1_ = std::make_unique<DraServiceV1beta1>(driver_.get());
  builder.RegisterService(v1_.get());
  builder.RegisterService(v1beta1_.get());
}

pluginregistration::PluginInfo FrontEnd::Info(const std::string& socket_path) const {
  pluginregistration::PluginInfo info;
  info.set_type(kDraPluginType);
  info.set_name(driver_->options().driver);
  info.set_endpoint(socket_path);
  for (const char* v : kDraVersions) info.add_supported_versions(v);
  return info;
}

void FrontEnd::AbortPending() {
  // Calls still queued behind a slow module go on in the driver; the
  // kubelet gets UNAVAILABLE now and asks again (review D9: a reload
  // waited for them).
  if (v1_) v1_->AbortPending();
  if (v1beta1_) v1beta1_->AbortPending();
}

void FrontEnd::DropServices([[maybe_unused]] bool exiting) {
#if !defined(DEVPLUG_ASAN) && !defined(DEVPLUG_TSAN)
  if (exiting) {
    // The server is kept until the process ends (Resource::StopServing),
    // and so are its services.
    (void)v1_.release();
    (void)v1beta1_.release();
    return;
  }
#endif
  v1_.reset();
  v1beta1_.reset();
}

void FrontEnd::Stop(const modules::DeviceSource* instance) {
  if (sink_) sink_->set_active(false);
  if (!Alone()) return;  // none, or a reload's successor took it over
  // The instance stays the driver's until its threads have stopped: a call
  // still queued there releases through it (review D2).
  const bool stopped = driver_->Stop(/*delete_slices=*/true);
  if (instance) driver_->ClearInstance(instance);
  if (!stopped) LeakOnPurpose(driver_);  // a thread still runs in it
  driver_.reset();
}

void FrontEnd::RequestStop() {
  if (sink_) sink_->set_active(false);
  if (!driver_) return;
  if (Alone()) driver_->RequestStop(/*delete_slices=*/true);
}

bool FrontEnd::WaitStopped(Clock::time_point deadline) {
  if (!Alone()) return true;  // none, or a successor's too
  const bool stopped = driver_->WaitStopped(deadline);
#if !defined(DEVPLUG_ASAN) && !defined(DEVPLUG_TSAN)
  // The DRA services outlive the exit (the server was released, not shut
  // down): a call still arriving finds a stopped driver, never a freed one.
  LeakOnPurpose(driver_);
#else
  if (!stopped) LeakOnPurpose(driver_);  // a thread still runs in it
#endif
  driver_.reset();
  return stopped;
}

}  // namespace devplug::dra
