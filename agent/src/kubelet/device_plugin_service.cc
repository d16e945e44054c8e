#include "kubelet/device_plugin_service.h"

#include <functional>
#include <memory>

#include <spdlog/spdlog.h>

namespace devplug::kubelet {

namespace {

grpc::Status ToGrpc(const Status& st) {
  if (st.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), st.message());
}

std::vector<std::string> ToVector(const google::protobuf::RepeatedPtrField<std::string>& f) {
  return {f.begin(), f.end()};
}

}  // namespace

// One unary call waiting for the module. Whoever completes it first (the
// module's answer, the timeout, an abort) fills the response and finishes;
// everyone later finds it done and touches nothing, since gRPC may free the
// response as soon as the call is finished.
class PendingCall {
 public:
  PendingCall(grpc::ServerUnaryReactor* reactor, std::string what)
      : reactor_(reactor), what_(std::move(what)) {}

  // Finishes with `st`; `fill` writes the response first (only when st is
  // OK). False if the call was already finished.
  bool Complete(const grpc::Status& st, const std::function<void()>& fill = {}) {
    std::lock_guard lock(mu_);
    if (done_) return false;
    done_ = true;
    if (timers_ != nullptr) timers_->Cancel(timer_id_);
    if (st.ok() && fill) fill();
    reactor_->Finish(st);
    return true;
  }

  void Arm(Timers* timers, std::chrono::milliseconds timeout,
           const std::shared_ptr<PendingCall>& self) {
    std::lock_guard lock(mu_);
    timers_ = timers;
    timer_id_ = timers->Schedule(
        Timers::Clock::now() + timeout, [weak = std::weak_ptr<PendingCall>(self), timeout] {
          auto call = weak.lock();
          if (!call) return;
          const std::string msg = call->what_ + ": the module did not answer within " +
                                  std::to_string(timeout.count()) + " ms";
          if (call->Complete(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, msg)))
            spdlog::error("{}", msg);
        });
  }

 private:
  std::mutex mu_;
  grpc::ServerUnaryReactor* const reactor_;
  const std::string what_;
  bool done_ = false;          // guarded by mu_
  Timers* timers_ = nullptr;   // guarded by mu_
  uint64_t timer_id_ = 0;      // guarded by mu_
};

v1beta1::DevicePluginOptions OptionsFor(const modules::LoadedModule& module) {
  v1beta1::DevicePluginOptions o;
  o.set_pre_start_required(module.has_pre_start());
  o.set_get_preferred_allocation_available(module.has_preferred_allocation());
  return o;
}

void FillContainerResponse(const modules::Recipe& recipe, v1beta1::ContainerAllocateResponse* out) {
  for (const auto& n : recipe.device_nodes) {
    auto* d = out->add_devices();
    d->set_host_path(n.host_path);
    d->set_container_path(n.container_path);
    d->set_permissions(n.permissions);
  }
  for (const auto& m : recipe.mounts) {
    auto* o = out->add_mounts();
    o->set_host_path(m.host_path);
    o->set_container_path(m.container_path);
    o->set_read_only(m.read_only);
  }
  for (const auto& [k, v] : recipe.envs) (*out->mutable_envs())[k] = v;
  for (const auto& [k, v] : recipe.annotations) (*out->mutable_annotations())[k] = v;
  for (const auto& c : recipe.cdi_devices) out->add_cdi_devices()->set_name(c);
}

DevicePluginService::DevicePluginService(modules::ModuleInstance* instance, StreamHub* hub,
                                         Timers* timers, std::chrono::milliseconds call_timeout)
    : instance_(instance),
      hub_(hub),
      timers_(timers),
      call_timeout_(call_timeout),
      options_(OptionsFor(instance->module())) {}

std::shared_ptr<PendingCall> DevicePluginService::Track(grpc::ServerUnaryReactor* reactor,
                                                        const char* rpc) {
  auto call = std::make_shared<PendingCall>(reactor, instance_->resource().name + ": " + rpc);
  call->Arm(timers_, call_timeout_, call);
  std::lock_guard lock(mu_);
  if (pending_.size() >= 64) std::erase_if(pending_, [](const auto& e) { return e.second.expired(); });
  pending_.emplace(next_call_++, call);
  return call;
}

void DevicePluginService::AbortPending() {
  std::map<uint64_t, std::weak_ptr<PendingCall>> pending;
  {
    std::lock_guard lock(mu_);
    pending.swap(pending_);
  }
  for (auto& [id, weak] : pending)
    if (auto call = weak.lock())
      call->Complete(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the device plugin is stopping"));
}

grpc::ServerUnaryReactor* DevicePluginService::GetDevicePluginOptions(
    grpc::CallbackServerContext* ctx, const v1beta1::Empty*, v1beta1::DevicePluginOptions* resp) {
  *resp = options_;
  auto* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse>* DevicePluginService::ListAndWatch(
    grpc::CallbackServerContext*, const v1beta1::Empty*) {
  return hub_->OpenStream();
}

namespace {

// Answers an Allocate's container requests in order on the module's worker,
// collecting into its own state; only the winner of Complete() writes the
// response.
class AllocateCall : public std::enable_shared_from_this<AllocateCall> {
 public:
  AllocateCall(std::shared_ptr<PendingCall> call, modules::ModuleInstance* instance,
               const v1beta1::AllocateRequest& req, v1beta1::AllocateResponse* resp)
      : call_(std::move(call)), instance_(instance), resp_(resp) {
    for (const auto& c : req.container_requests()) requests_.push_back(ToVector(c.devices_ids()));
  }

  void Next() {
    if (built_.container_responses_size() == static_cast<int>(requests_.size())) {
      const size_t bytes = built_.ByteSizeLong();
      if (bytes > kKubeletMaxMessageBytes) {
        call_->Complete(grpc::Status(
            grpc::StatusCode::RESOURCE_EXHAUSTED,
            StrCat(instance_->resource().name, ": Allocate response of ", bytes,
                   " bytes exceeds the kubelet's 4 MiB message limit")));
        return;
      }
      call_->Complete(grpc::Status::OK, [this] { resp_->Swap(&built_); });
      return;
    }
    instance_->Allocate(requests_[built_.container_responses_size()],
                        [self = shared_from_this()](StatusOr<modules::Recipe> recipe) {
                          if (!recipe.ok()) {
                            spdlog::warn("Allocate refused: {}", recipe.status().message());
                            self->call_->Complete(ToGrpc(recipe.status()));
                            return;
                          }
                          FillContainerResponse(*recipe, self->built_.add_container_responses());
                          self->Next();
                        });
  }

 private:
  const std::shared_ptr<PendingCall> call_;
  modules::ModuleInstance* const instance_;
  v1beta1::AllocateResponse* const resp_;  // only inside a winning Complete()
  std::vector<std::vector<std::string>> requests_;
  v1beta1::AllocateResponse built_;
};

class PreferredCall : public std::enable_shared_from_this<PreferredCall> {
 public:
  PreferredCall(std::shared_ptr<PendingCall> call, modules::ModuleInstance* instance,
                const v1beta1::PreferredAllocationRequest& req,
                v1beta1::PreferredAllocationResponse* resp)
      : call_(std::move(call)), instance_(instance), resp_(resp) {
    for (const auto& c : req.container_requests())
      requests_.push_back({ToVector(c.available_deviceids()), ToVector(c.must_include_deviceids()),
                           c.allocation_size()});
  }

  void Next() {
    const int i = built_.container_responses_size();
    if (i == static_cast<int>(requests_.size())) {
      call_->Complete(grpc::Status::OK, [this] { resp_->Swap(&built_); });
      return;
    }
    instance_->PreferredAllocation(
        requests_[i].available, requests_[i].must_include, requests_[i].size,
        [self = shared_from_this()](StatusOr<std::vector<std::string>> ids) {
          if (!ids.ok()) {
            self->call_->Complete(ToGrpc(ids.status()));
            return;
          }
          auto* out = self->built_.add_container_responses();
          for (std::string& id : *ids) out->add_deviceids(std::move(id));
          self->Next();
        });
  }

 private:
  struct Request {
    std::vector<std::string> available, must_include;
    int32_t size;
  };
  const std::shared_ptr<PendingCall> call_;
  modules::ModuleInstance* const instance_;
  v1beta1::PreferredAllocationResponse* const resp_;  // only inside a winning Complete()
  std::vector<Request> requests_;
  v1beta1::PreferredAllocationResponse built_;
};

}  // namespace

grpc::ServerUnaryReactor* DevicePluginService::Allocate(grpc::CallbackServerContext* ctx,
                                                        const v1beta1::AllocateRequest* req,
                                                        v1beta1::AllocateResponse* resp) {
  auto* r = ctx->DefaultReactor();
  if (req->container_requests_size() == 0) {
    r->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                           "Allocate request has no container requests"));
    return r;
  }
  std::make_shared<AllocateCall>(Track(r, "Allocate"), instance_, *req, resp)->Next();
  return r;
}

grpc::ServerUnaryReactor* DevicePluginService::GetPreferredAllocation(
    grpc::CallbackServerContext* ctx, const v1beta1::PreferredAllocationRequest* req,
    v1beta1::PreferredAllocationResponse* resp) {
  auto* r = ctx->DefaultReactor();
  if (!options_.get_preferred_allocation_available()) {
    r->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                           "this resource does not offer GetPreferredAllocation"));
    return r;
  }
  std::make_shared<PreferredCall>(Track(r, "GetPreferredAllocation"), instance_, *req, resp)
      ->Next();
  return r;
}

grpc::ServerUnaryReactor* DevicePluginService::PreStartContainer(
    grpc::CallbackServerContext* ctx, const v1beta1::PreStartContainerRequest* req,
    v1beta1::PreStartContainerResponse*) {
  auto* r = ctx->DefaultReactor();
  if (!options_.pre_start_required()) {
    r->Finish(grpc::Status::OK);
    return r;
  }
  auto call = Track(r, "PreStartContainer");
  instance_->PreStart(ToVector(req->devices_ids()),
                      [call](Status st) { call->Complete(ToGrpc(st)); });
  return r;
}

}  // namespace devplug::kubelet
