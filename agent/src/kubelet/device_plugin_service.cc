#include "kubelet/device_plugin_service.h"

#include <memory>

#include <spdlog/spdlog.h>


namespace devplug::kubelet {
namespace {

grpc::Status ToGrpc(const Status& st) {
  if (st.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message()));
}

std::vector<std::string> ToVector(const google::protobuf::RepeatedPtrField<std::string>& f) {
  return {f.begin(), f.end()};
}

// Answers the container requests of one Allocate call in order, one worker
// task each, then finishes the call.
class AllocateCall : public std::enable_shared_from_this<AllocateCall> {
 public:
  AllocateCall(modules::ModuleInstance* instance, grpc::ServerUnaryReactor* reactor,
               const v1beta1::AllocateRequest* req, v1beta1::AllocateResponse* resp)
      : instance_(instance), reactor_(reactor), req_(req), resp_(resp) {}

  void Next() {
    if (index_ == req_->container_requests_size()) {
      const size_t bytes = resp_->ByteSizeLong();
      if (bytes > kKubeletMaxMessageBytes) {
        reactor_->Finish(grpc::Status(
            grpc::StatusCode::RESOURCE_EXHAUSTED,
            StrCat(instance_->resource().name, ": Allocate response of ", bytes,
                         " bytes exceeds the kubelet's 4 MiB message limit")));
        return;
      }
      reactor_->Finish(grpc::Status::OK);
      return;
    }
    const auto& creq = req_->container_requests(index_++);
    instance_->Allocate(ToVector(creq.devices_ids()),
                        [self = shared_from_this()](StatusOr<modules::Recipe> recipe) {
                          if (!recipe.ok()) {
                            spdlog::warn("Allocate refused: {}", recipe.status().message());
                            self->reactor_->Finish(ToGrpc(recipe.status()));
                            return;
                          }
                          FillContainerResponse(*recipe, self->resp_->add_container_responses());
                          self->Next();
                        });
  }

 private:
  modules::ModuleInstance* const instance_;
  grpc::ServerUnaryReactor* const reactor_;
  const v1beta1::AllocateRequest* const req_;
  v1beta1::AllocateResponse* const resp_;
  int index_ = 0;
};

class PreferredCall : public std::enable_shared_from_this<PreferredCall> {
 public:
  PreferredCall(modules::ModuleInstance* instance, grpc::ServerUnaryReactor* reactor,
                const v1beta1::PreferredAllocationRequest* req,
                v1beta1::PreferredAllocationResponse* resp)
      : instance_(instance), reactor_(reactor), req_(req), resp_(resp) {}

  void Next() {
    if (index_ == req_->container_requests_size()) {
      reactor_->Finish(grpc::Status::OK);
      return;
    }
    const auto& creq = req_->container_requests(index_++);
    instance_->PreferredAllocation(
        ToVector(creq.available_deviceids()), ToVector(creq.must_include_deviceids()),
        creq.allocation_size(),
        [self = shared_from_this()](StatusOr<std::vector<std::string>> ids) {
          if (!ids.ok()) {
            self->reactor_->Finish(ToGrpc(ids.status()));
            return;
          }
          auto* out = self->resp_->add_container_responses();
          for (std::string& id : *ids) out->add_deviceids(std::move(id));
          self->Next();
        });
  }

 private:
  modules::ModuleInstance* const instance_;
  grpc::ServerUnaryReactor* const reactor_;
  const v1beta1::PreferredAllocationRequest* const req_;
  v1beta1::PreferredAllocationResponse* const resp_;
  int index_ = 0;
};

}  // namespace

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

grpc::ServerUnaryReactor* DevicePluginService::GetPreferredAllocation(
    grpc::CallbackServerContext* ctx, const v1beta1::PreferredAllocationRequest* req,
    v1beta1::PreferredAllocationResponse* resp) {
  auto* r = ctx->DefaultReactor();
  if (!options_.get_preferred_allocation_available()) {
    r->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                           "this resource does not offer GetPreferredAllocation"));
    return r;
  }
  std::make_shared<PreferredCall>(instance_, r, req, resp)->Next();
  return r;
}

grpc::ServerUnaryReactor* DevicePluginService::Allocate(grpc::CallbackServerContext* ctx,
                                                        const v1beta1::AllocateRequest* req,
                                                        v1beta1::AllocateResponse* resp) {
  auto* r = ctx->DefaultReactor();
  if (req->container_requests_size() == 0) {
    r->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                           "Allocate request has no container requests"));
    return r;
  }
  std::make_shared<AllocateCall>(instance_, r, req, resp)->Next();
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
  instance_->PreStart(ToVector(req->devices_ids()),
                      [r](Status st) { r->Finish(ToGrpc(st)); });
  return r;
}

}  // namespace devplug::kubelet
