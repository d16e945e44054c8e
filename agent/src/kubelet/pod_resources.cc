#include "kubelet/pod_resources.h"

#include <unistd.h>

#include <algorithm>
#include <future>

namespace devplug::kubelet {

PodSnapshot ToSnapshot(const v1::ListPodResourcesResponse& response,
                       std::chrono::steady_clock::time_point asked,
                       std::chrono::steady_clock::time_point taken) {
  PodSnapshot s;
  s.asked = asked;
  s.taken = taken;
  for (const v1::PodResources& pod : response.pod_resources()) {
    for (const v1::ContainerResources& c : pod.containers()) {
      for (const v1::ContainerDevices& d : c.devices()) {
        auto& ids = s.holders[d.resource_name()];
        for (const std::string& id : d.device_ids()) {
          auto [it, fresh] = ids.try_emplace(id, Holder{pod.namespace_(), pod.name(), c.name()});
          // Two containers of one pod (an init container's devices reused)
          // name one pod; two pods do not.
          if (!fresh &&
              (it->second.pod_namespace != pod.namespace_() || it->second.pod_name != pod.name()))
            s.ambiguous[d.resource_name()].insert(id);
        }
      }
      // Devices of DRA claims (kubelet 1.34+), by driver and pool. A shared
      // claim lists its devices under each of its pods: ambiguous for "by
      // whom", right for "is it held".
      for (const v1::DynamicResource& claim : c.dynamic_resources()) {
        for (const v1::ClaimResource& r : claim.claim_resources()) {
          const std::string key = DraHoldersKey(r.driver_name(), r.pool_name());
          auto [it, fresh] = s.holders[key].try_emplace(
              r.device_name(), Holder{pod.namespace_(), pod.name(), c.name()});
          if (!fresh &&
              (it->second.pod_namespace != pod.namespace_() || it->second.pod_name != pod.name()))
            s.ambiguous[key].insert(r.device_name());
        }
      }
    }
  }
  return s;
}

namespace {
struct ListCall {
  std::shared_ptr<grpc::Channel> channel;  // outlives a socket change meanwhile
  std::chrono::steady_clock::time_point asked;
  grpc::ClientContext ctx;
  v1::ListPodResourcesRequest request;
  v1::ListPodResourcesResponse response;
};
}  // namespace

PodResourcesClient::PodResourcesClient(Options options) : options_(std::move(options)) {}

PodResourcesClient::~PodResourcesClient() {
  MutexLock lock(mu_);
  while (in_flight_) idle_cv_.wait(mu_);
}

std::string PodResourcesClient::socket() const {
  MutexLock lock(mu_);
  return options_.socket;
}

void PodResourcesClient::set_socket(const std::string& socket) {
  MutexLock lock(mu_);
  if (socket == options_.socket) return;
  options_.socket = socket;
  channel_.reset();  // a List in flight keeps its own reference
  stub_.reset();
  latest_.reset();
  failure_ = OkStatus();
}

uint64_t PodResourcesClient::lists() const {
  MutexLock lock(mu_);
  return lists_;
}

void PodResourcesClient::Fetch(std::chrono::milliseconds fresh, Done done) {
  MutexLock lock(mu_);
  const auto now = Clock::now();
  if (latest_ && now - latest_->taken <= fresh) {
    PodSnapshotPtr s = latest_;
    lock.Unlock();
    done(std::move(s));
    return;
  }
  if (in_flight_) {
    waiting_.push_back(std::move(done));
    return;
  }
  if (!failure_.ok() && now < retry_at_) {
    const Status f = failure_;
    const auto again = std::chrono::ceil<std::chrono::seconds>(retry_at_ - now);
    lock.Unlock();
    done(Status(f.code(), StrCat(f.message(), " (asking again in ", again.count(), " s)")));
    return;
  }
  if (access(options_.socket.c_str(), F_OK) != 0) {
    const std::string socket = options_.socket;
    lock.Unlock();
    done(NotFoundError(StrCat("no PodResources socket at ", socket, " (is the kubelet running?)")));
    return;
  }
  waiting_.push_back(std::move(done));
  StartListLocked();
}

StatusOr<PodSnapshotPtr> PodResourcesClient::Get(std::chrono::milliseconds fresh) {
  auto answer = std::make_shared<std::promise<StatusOr<PodSnapshotPtr>>>();
  auto future = answer->get_future();
  Fetch(fresh, [answer](StatusOr<PodSnapshotPtr> s) { answer->set_value(std::move(s)); });
  return future.get();
}

void PodResourcesClient::StartListLocked() {
  if (!channel_) {
    grpc::ChannelArguments args;
    // Big nodes list many pods; the kubelet does not cap its answer.
    args.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // A Unix socket costs nothing to dial again: after the kubelet was
    // away (a restart, or devplugd starting first), the channel is back
    // within 100 ms to 1 s of its return, not after gRPC's default backoff
    // (1 s, growing to 2 min), during which every List and pod_of() would
    // fail at once.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    channel_ = grpc::CreateCustomChannel("unix:" + options_.socket,
                                         grpc::InsecureChannelCredentials(), args);
    stub_ = v1::PodResourcesLister::NewStub(channel_);
  }
  in_flight_ = true;
  ++lists_;
  auto call = std::make_shared<ListCall>();
  call->channel = channel_;
  call->ctx.set_deadline(std::chrono::system_clock::now() + options_.deadline);
  call->asked = Clock::now();
  stub_->async()->List(&call->ctx, &call->request, &call->response, [this, call](grpc::Status st) {
    OnListDone(st, call->response, call->asked);
  });
}

void PodResourcesClient::OnListDone(const grpc::Status& st,
                                    const v1::ListPodResourcesResponse& response,
                                    Clock::time_point asked) {
  std::vector<Done> waiters;
  StatusOr<PodSnapshotPtr> result = Status(StatusCode::kInternal, "unset");
  {
    MutexLock lock(mu_);
    const auto now = Clock::now();
    waiters.swap(waiting_);
    if (st.ok()) {
      latest_ = std::make_shared<const PodSnapshot>(ToSnapshot(response, asked, now));
      failure_ = OkStatus();
      backoff_ = {};
      result = latest_;
    } else {
      // Never taken for "nothing is held": the callers keep their state.
      failure_ = Status(static_cast<StatusCode>(st.error_code()),
                        StrCat("PodResources List failed (",
                               StatusCodeName(static_cast<StatusCode>(st.error_code())), ": ",
                               st.error_message(), ")"));
      backoff_ = std::clamp(backoff_ * 2, options_.min_backoff, options_.max_backoff);
      retry_at_ = now + backoff_;
      result = failure_;
      // A kubelet that restarted serves a new socket at the same path.
      channel_.reset();
      stub_.reset();
    }
    in_flight_ = false;
    idle_cv_.notify_all();
  }
  for (Done& w : waiters) w(result);
}

}  // namespace devplug::kubelet
