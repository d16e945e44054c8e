#include "kubelet/pod_lookup.h"

#include <cerrno>

namespace devplug::kubelet {

int PodLookup::PodOf(const std::string& id,
                     std::optional<std::chrono::steady_clock::time_point> not_before,
                     modules::PodHolder* holder) {
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> after = handed_out_->Last(id);
  if (not_before && (!after || *not_before > *after)) after = not_before;
  const auto asked_at = Clock::now();
  // Three tries: a List already in flight may have been sent too early.
  for (int round = 0; round < 3; ++round) {
    auto snapshot =
        pods_->Get(round == 0 ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(0));
    if (!snapshot.ok()) return -EAGAIN;
    const PodSnapshot& s = **snapshot;
    if (after && s.asked <= *after) continue;  // may predate the kubelet's record
    if (s.Ambiguous(resource_, id)) return -ENOTUNIQ;
    if (const Holder* h = s.Find(resource_, id)) {
      holder->pod_namespace = h->pod_namespace;
      holder->pod_name = h->pod_name;
      holder->container = h->container;
      return 0;
    }
    if (s.asked >= asked_at) return -ENOENT;  // a List of our own says nobody
  }
  return -EAGAIN;
}

int DraPodLookup::PodOf(const std::string& id,
                        std::optional<std::chrono::steady_clock::time_point> /*not_before*/,
                        modules::PodHolder* holder) {
  const std::optional<Claim> claim = claim_of_(id);
  if (!claim) return -ENOENT;  // no claim prepared on it here: nobody holds it
  holder->pod_namespace = claim->ns;
  holder->pod_name.clear();
  holder->pod_uid.clear();
  holder->container.clear();
  if (!pods_) return 0;
  auto snapshot = pods_->Get(std::chrono::milliseconds(1000));
  if (!snapshot.ok()) return 0;  // held all the same: the claim says so
  const PodSnapshot& s = **snapshot;
  const std::string key = DraHoldersKey(driver_, pool_);
  const Holder* h = s.Find(key, claim->device);
  if (h != nullptr && h->pod_namespace == claim->ns && !s.Ambiguous(key, claim->device)) {
    holder->pod_name = h->pod_name;
    holder->container = h->container;
  }
  return 0;
}

}  // namespace devplug::kubelet
