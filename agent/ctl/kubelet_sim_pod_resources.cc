// The simulator's PodResources v1 half (kubelet_sim.h): List and
// GetAllocatableResources over the pods tests bind, behind the kubelet's
// token bucket.
#include <algorithm>

#include "kubelet_sim.h"

namespace devplug::sim {

class PodResourcesService final : public v1::PodResourcesLister::Service {
 public:
  explicit PodResourcesService(KubeletSim* sim) : sim_(sim) {}
  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* out) override {
    return sim_->HandleList(out);
  }
  grpc::Status GetAllocatableResources(grpc::ServerContext*, const v1::AllocatableResourcesRequest*,
                                       v1::AllocatableResourcesResponse* out) override {
    return sim_->HandleAllocatable(out);
  }

 private:
  KubeletSim* const sim_;
};

std::unique_ptr<grpc::Service> KubeletSim::MakePodResourcesService() {
  return std::make_unique<PodResourcesService>(this);
}

bool KubeletSim::TakeToken() {
  // The kubelet's bucket: `qps` tokens a second, at most `burst` saved.
  const auto now = std::chrono::steady_clock::now();
  if (tokens_at_ == std::chrono::steady_clock::time_point{})
    tokens_ = options_.pod_resources_burst;
  else
    tokens_ =
        std::min<double>(options_.pod_resources_burst,
                         tokens_ + options_.pod_resources_qps *
                                       std::chrono::duration<double>(now - tokens_at_).count());
  tokens_at_ = now;
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

grpc::Status KubeletSim::HandleList(v1::ListPodResourcesResponse* out) {
  std::lock_guard lock(mu_);
  if (!TakeToken()) {
    ++pod_refused_;
    return {grpc::StatusCode::RESOURCE_EXHAUSTED, "rejected by rate limit"};
  }
  ++pod_lists_;
  for (const auto& [key, pod] : pods_) {
    auto* p = out->add_pod_resources();
    p->set_namespace_(key.first);
    p->set_name(key.second);
    for (const auto& [container, resources] : pod.containers) {
      auto* c = p->add_containers();
      c->set_name(container);
      for (const auto& [resource, ids] : resources) {
        auto numa = [&, &resource = resource](const std::string& id) -> std::vector<int64_t> {
          auto r = resources_.find(resource);
          if (r == resources_.end()) return {};
          for (const auto& d : r->second.devices)
            if (d.id() == id) {
              std::vector<int64_t> nodes;
              for (const auto& n : d.topology().nodes()) nodes.push_back(n.id());
              return nodes;
            }
          return {};
        };
        // One entry per (device, NUMA node), as the kubelet writes them.
        for (const std::string& id : ids) {
          std::vector<int64_t> nodes = numa(id);
          if (nodes.empty()) nodes.push_back(-1);
          for (int64_t n : nodes) {
            auto* d = c->add_devices();
            d->set_resource_name(resource);
            d->add_device_ids(id);
            if (n >= 0) d->mutable_topology()->add_nodes()->set_id(n);
          }
        }
      }
    }
  }
  return grpc::Status::OK;
}

grpc::Status KubeletSim::HandleAllocatable(v1::AllocatableResourcesResponse* out) {
  std::lock_guard lock(mu_);
  if (!TakeToken()) {
    ++pod_refused_;
    return {grpc::StatusCode::RESOURCE_EXHAUSTED, "rejected by rate limit"};
  }
  for (const auto& [name, r] : resources_) {
    for (const auto& d : r.devices) {
      if (d.health() != "Healthy") continue;
      auto* e = out->add_devices();
      e->set_resource_name(name);
      e->add_device_ids(d.id());
      for (const auto& n : d.topology().nodes()) e->mutable_topology()->add_nodes()->set_id(n.id());
    }
  }
  return grpc::Status::OK;
}

void KubeletSim::BindPod(const std::string& pod_namespace, const std::string& pod_name,
                         const std::string& container, const std::string& resource,
                         const std::vector<std::string>& ids) {
  std::lock_guard lock(mu_);
  auto& held = pods_[{pod_namespace, pod_name}].containers[container][resource];
  held.insert(held.end(), ids.begin(), ids.end());
}

void KubeletSim::DeletePod(const std::string& pod_namespace, const std::string& pod_name) {
  std::lock_guard lock(mu_);
  pods_.erase({pod_namespace, pod_name});
}

uint64_t KubeletSim::pod_resources_lists() const {
  std::lock_guard lock(mu_);
  return pod_lists_;
}

uint64_t KubeletSim::pod_resources_refused() const {
  std::lock_guard lock(mu_);
  return pod_refused_;
}

}  // namespace devplug::sim
