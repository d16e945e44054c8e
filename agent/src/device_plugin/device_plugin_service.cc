#include "device_plugin/device_plugin_service.h"

#include <functional>
#include <memory>

#include <spdlog/spdlog.h>

#include "modules/module_call.h"

namespace devplug::device_plugin {

namespace {

grpc::Status ToGrpc(const Status& st) {
  if (st.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), st.message());
}

std::vector<std::string> ToVector(const google::protobuf::RepeatedPtrField<std::string>& f) {
  return {f.begin(), f.end()};
}

// "[a,b] [c]": the IDs of each container request, for the log.
template <typename Requests, typename Ids>
std::string IdsForLog(const Requests& requests, Ids ids) {
  std::string out;
  for (const auto& c : requests) {
    if (!out.empty()) out += ' ';
    out += '[';
    bool first = true;
    for (const std::string& id : ids(c)) {
      if (!first) out += ',';
      out += id;
      first = false;
    }
    out += ']';
  }
  return out;
}

// Counts a finished call and logs it at debug level.
void Record(const std::string& what, const std::string& ids, Rpc rpc,
            std::chrono::steady_clock::time_point start, const grpc::Status& st,
            RpcObserver* metrics) {
  const auto took = std::chrono::steady_clock::now() - start;
  if (metrics != nullptr) metrics->Rpc(rpc, static_cast<StatusCode>(st.error_code()), took);
  if (!spdlog::should_log(spdlog::level::debug)) return;
  spdlog::debug("{} {}: {} in {} us", what, ids,
                st.ok() ? std::string("OK")
                        : StrCat(StatusCodeName(static_cast<StatusCode>(st.error_code())), ": ",
                                 st.error_message()),
                std::chrono::duration_cast<std::chrono::microseconds>(took).count());
}

// An answer the kubelet would refuse (over its receive limit) fails here,
// with a reason, instead of on the kubelet's side.
Status CheckSize(const google::protobuf::Message& m, const std::string& resource, const char* rpc) {
  const size_t bytes = m.ByteSizeLong();
  if (bytes <= kubelet::kKubeletMaxMessageBytes) return OkStatus();
  return Status(StatusCode::kResourceExhausted,
                StrCat(resource, ": ", rpc, " response of ", bytes,
                       " bytes exceeds the kubelet's 4 MiB message limit"));
}

}  // namespace

// One unary call waiting for the module, decided once (modules/module_call.h):
// whoever completes it first (the module's answer, the timeout, an abort)
// fills the response and finishes; everyone later finds it done and touches
// nothing, since gRPC may free the response as soon as the call is
// finished. Each call is logged at debug level when it finishes: resource,
// RPC, IDs, duration, result.
class PendingCall {
 public:
  PendingCall(grpc::ServerUnaryReactor* reactor, std::string what, std::string ids, Rpc rpc,
              std::chrono::milliseconds timeout, std::shared_ptr<RpcObserver> metrics)
      : reactor_(reactor),
        what_(std::move(what)),
        ids_(std::move(ids)),
        rpc_(rpc),
        metrics_(std::move(metrics)),
        deadline_(timeout, timeout) {}

  // Finishes with `st`; `fill` writes the response first (only when st is
  // OK). False if the call was already finished.
  bool Complete(const grpc::Status& st, const std::function<void()>& fill = {}) {
    if (!deadline_.Decide()) return false;
    {
      MutexLock lock(mu_);
      if (timers_ != nullptr) timers_->Cancel(timer_id_);
    }
    if (st.ok() && fill) fill();
    reactor_->Finish(st);
    Record(what_, ids_, rpc_, deadline_.start(), st, metrics_.get());
    return true;
  }

  // Still waiting for an answer: the module's turn is worth taking (the
  // `wanted` guard: module code never starts after the deadline).
  bool waiting() const { return deadline_.wanted(); }

  void Arm(Timers* timers, const std::shared_ptr<PendingCall>& self) {
    MutexLock lock(mu_);
    timers_ = timers;
    ScheduleLocked(deadline_.Due(Timers::Clock::now()), self);
  }

  // Time the call spends waiting for a lane behind other devices' work does
  // not count against its deadline, but the deadline never passes `cap`
  // after the call came (the kubelet's own wait).
  void NotCounting(std::shared_ptr<const modules::LaneWait> wait, std::chrono::milliseconds cap) {
    deadline_.NotCounting(std::move(wait), cap);
  }

 private:
  void ScheduleLocked(Timers::Clock::time_point when, const std::shared_ptr<PendingCall>& self)
      DEVPLUG_REQUIRES(mu_) {
    timer_id_ = timers_->Schedule(when, [weak = std::weak_ptr<PendingCall>(self)] {
      auto call = weak.lock();
      if (!call || call->deadline_.decided()) return;
      const auto now = Timers::Clock::now();
      std::chrono::milliseconds waited{0};
      const auto due = call->deadline_.Due(now, &waited);
      if (due > now) {  // it waited behind other devices: not counted
        MutexLock lock(call->mu_);
        call->ScheduleLocked(due, call);
        return;
      }
      const std::string msg = call->deadline_.TimeoutMessage(call->what_, waited);
      if (call->Complete(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, msg)))
        spdlog::error("{}", msg);
    });
  }

  grpc::ServerUnaryReactor* const reactor_;
  const std::string what_;
  const std::string ids_;
  const Rpc rpc_;
  const std::shared_ptr<RpcObserver> metrics_;
  modules::CallDeadline deadline_;
  Mutex mu_;
  Timers* timers_ DEVPLUG_GUARDED_BY(mu_) = nullptr;
  uint64_t timer_id_ DEVPLUG_GUARDED_BY(mu_) = 0;
};

v1beta1::DevicePluginOptions OptionsFor(const modules::DeviceSource& source) {
  v1beta1::DevicePluginOptions o;
  // PreStartContainer: the module's pre_start() (unless this instance opted
  // out), or a release that may have to run before the container starts.
  o.set_pre_start_required(source.needs_pre_start());
  o.set_get_preferred_allocation_available(source.has_preferred_allocation());
  return o;
}

void FillContainerResponse(const Recipe& recipe, v1beta1::ContainerAllocateResponse* out) {
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

DevicePluginService::DevicePluginService(modules::DeviceSource* source, StreamHub* hub,
                                         Timers* timers, std::chrono::milliseconds call_timeout,
                                         std::chrono::milliseconds prestart_timeout,
                                         std::shared_ptr<lifecycle::ResourceReleases> releases,
                                         std::shared_ptr<RpcObserver> metrics,
                                         std::shared_ptr<cdi::ResourceCdi> cdi)
    : source_(source),
      hub_(hub),
      timers_(timers),
      call_timeout_ms_(call_timeout.count()),
      prestart_timeout_ms_(prestart_timeout.count()),
      options_(OptionsFor(*source)),
      releases_(std::move(releases)),
      metrics_(std::move(metrics)),
      cdi_(std::move(cdi)) {}

std::shared_ptr<PendingCall> DevicePluginService::Track(grpc::ServerUnaryReactor* reactor, Rpc rpc,
                                                        std::string ids) {
  const int64_t ms =
      rpc == Rpc::kPreStartContainer ? prestart_timeout_ms_.load() : call_timeout_ms_.load();
  auto call =
      std::make_shared<PendingCall>(reactor, StrCat(source_->resource_name(), ": ", RpcName(rpc)),
                                    std::move(ids), rpc, std::chrono::milliseconds(ms), metrics_);
  call->Arm(timers_, call);
  MutexLock lock(mu_);
  if (pending_.size() >= 64)
    std::erase_if(pending_, [](const auto& e) { return e.second.expired(); });
  pending_.emplace(next_call_++, call);
  return call;
}

void DevicePluginService::AbortPending() {
  std::map<uint64_t, std::weak_ptr<PendingCall>> pending;
  {
    MutexLock lock(mu_);
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
  if (metrics_) metrics_->Rpc(Rpc::kGetDevicePluginOptions, StatusCode::kOk, {});
  return r;
}

grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse>* DevicePluginService::ListAndWatch(
    grpc::CallbackServerContext*, const v1beta1::Empty*) {
  if (metrics_) metrics_->Rpc(Rpc::kListAndWatch, StatusCode::kOk, {});
  return hub_->OpenStream();
}

namespace {

// Answers an Allocate's container requests in order on the module's worker,
// collecting into its own state; only the winner of Complete() writes the
// response.
class AllocateCall : public std::enable_shared_from_this<AllocateCall> {
 public:
  AllocateCall(std::shared_ptr<PendingCall> call, modules::DeviceSource* source,
               const v1beta1::AllocateRequest& req, v1beta1::AllocateResponse* resp,
               std::shared_ptr<lifecycle::ResourceReleases> releases,
               std::shared_ptr<cdi::ResourceCdi> cdi)
      : call_(std::move(call)),
        source_(source),
        resp_(resp),
        releases_(std::move(releases)),
        cdi_(std::move(cdi)),
        resource_(source->resource_name()),
        module_allocates_(source->module_allocates()) {
    for (const auto& c : req.container_requests()) requests_.push_back(ToVector(c.devices_ids()));
  }

  // The call ends here, however it ended. The module's allocate() may have
  // set up devices of containers it answered (macvtap makes a link) while
  // the call as a whole failed: a later container was refused, or the
  // kubelet's deadline passed (what was still queued is then skipped, and
  // this is where the last reference goes). No pod will hold those devices,
  // so they are reported as handed out: release tracking releases them
  // once unseen_timeout has passed with no pod listing them.
  ~AllocateCall() {
    // (The instance may be gone by now: only what was copied is used.)
    if (answered_ || answered_ids_.empty() || !releases_ || !module_allocates_) return;
    spdlog::info(
        "{}: Allocate did not succeed after the module set up {}; releasing them once "
        "no pod holds them",
        resource_, StrJoin(answered_ids_, ","));
    releases_->Allocated(answered_ids_);
  }

  void Next() {
    if (built_.container_responses_size() == static_cast<int>(requests_.size())) {
      if (Status st = CheckSize(built_, source_->resource_name(), "Allocate"); !st.ok()) {
        call_->Complete(ToGrpc(st));
        return;
      }
      if (call_->Complete(grpc::Status::OK, [this] { resp_->Swap(&built_); })) {
        answered_ = true;
        if (releases_) {
          std::vector<std::string> ids;
          for (const auto& r : requests_) ids.insert(ids.end(), r.begin(), r.end());
          releases_->Allocated(ids);
        }
      }
      return;
    }
    source_->Allocate(
        requests_[built_.container_responses_size()],
        [self = shared_from_this()](StatusOr<Recipe> recipe) {
          if (!recipe.ok()) {
            spdlog::warn("Allocate refused: {}", recipe.status().message());
            self->call_->Complete(ToGrpc(recipe.status()));
            return;
          }
          const auto& ids = self->requests_[self->built_.container_responses_size()];
          self->answered_ids_.insert(self->answered_ids_.end(), ids.begin(), ids.end());
          auto* out = self->built_.add_container_responses();
          FillContainerResponse(*recipe, out);
          if (self->cdi_) {
            // The devices' default recipes are what the resource's spec
            // holds; a module's own answer (its allocate()) gets a spec of
            // its own, written before the kubelet sees this answer.
            const bool is_default = !self->module_allocates_ ||
                                    *recipe == DefaultRecipe(*self->source_->devices(), ids);
            self->cdi_->Answer(ids, *recipe, is_default, out);
          }
          self->Next();
        },
        [call = call_] { return call->waiting(); });
  }

 private:
  const std::shared_ptr<PendingCall> call_;
  modules::DeviceSource* const source_;
  v1beta1::AllocateResponse* const resp_;  // only inside a winning Complete()
  // A copy: the call may finish after its service is gone.
  const std::shared_ptr<lifecycle::ResourceReleases> releases_;
  const std::shared_ptr<cdi::ResourceCdi> cdi_;
  std::vector<std::vector<std::string>> requests_;
  v1beta1::AllocateResponse built_;
  const std::string resource_;
  const bool module_allocates_;
  std::vector<std::string> answered_ids_;  // of the containers the module answered
  bool answered_ = false;                  // the kubelet got our OK
};

class PreferredCall : public std::enable_shared_from_this<PreferredCall> {
 public:
  PreferredCall(std::shared_ptr<PendingCall> call, modules::DeviceSource* source,
                const v1beta1::PreferredAllocationRequest& req,
                v1beta1::PreferredAllocationResponse* resp)
      : call_(std::move(call)), source_(source), resp_(resp) {
    for (const auto& c : req.container_requests())
      requests_.push_back({ToVector(c.available_deviceids()), ToVector(c.must_include_deviceids()),
                           c.allocation_size()});
  }

  void Next() {
    const int i = built_.container_responses_size();
    if (i == static_cast<int>(requests_.size())) {
      if (Status st = CheckSize(built_, source_->resource_name(), "GetPreferredAllocation");
          !st.ok()) {
        call_->Complete(ToGrpc(st));
        return;
      }
      call_->Complete(grpc::Status::OK, [this] { resp_->Swap(&built_); });
      return;
    }
    source_->PreferredAllocation(
        requests_[i].available, requests_[i].must_include, requests_[i].size,
        [self = shared_from_this()](StatusOr<std::vector<std::string>> ids) {
          if (!ids.ok()) {
            self->call_->Complete(ToGrpc(ids.status()));
            return;
          }
          auto* out = self->built_.add_container_responses();
          for (std::string& id : *ids) out->add_deviceids(std::move(id));
          self->Next();
        },
        [call = call_] { return call->waiting(); });
  }

 private:
  struct Request {
    std::vector<std::string> available, must_include;
    int32_t size;
  };
  const std::shared_ptr<PendingCall> call_;
  modules::DeviceSource* const source_;
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
  auto call = Track(
      r, Rpc::kAllocate,
      IdsForLog(
          req->container_requests(), [](const auto& c) -> const auto& { return c.devices_ids(); }));
  std::make_shared<AllocateCall>(std::move(call), source_, *req, resp, releases_, cdi_)->Next();
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
  auto call = Track(r, Rpc::kGetPreferredAllocation,
                    IdsForLog(
                        req->container_requests(),
                        [](const auto& c) -> const auto& { return c.available_deviceids(); }));
  std::make_shared<PreferredCall>(std::move(call), source_, *req, resp)->Next();
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
  std::vector<std::string> ids = ToVector(req->devices_ids());
  auto call = Track(r, Rpc::kPreStartContainer,
                    IdsForLog(
                        std::vector<std::vector<std::string>>{ids},
                        [](const auto& c) -> const auto& { return c; }));
  auto lane_wait = source_->PreStart(
      std::move(ids), [call](Status st) { call->Complete(ToGrpc(st)); },
      [call] { return call->waiting(); });
  if (lane_wait) call->NotCounting(std::move(lane_wait), kubelet::kKubeletPreStartWait);
  return r;
}

}  // namespace devplug::device_plugin
