// Who holds which device: the vocabulary the PodResources client, the release
// trackers and pod_of share. Plain data, no dependencies.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>

namespace devplug {

// A container holding a device, as PodResources lists it.
struct Holder {
  std::string pod_namespace, pod_name, container;
  bool operator==(const Holder&) const = default;
};

// Device ID -> its holder, for one resource.
using Holders = std::map<std::string, Holder, std::less<>>;

// One List's answer: resource name -> device ID -> holder. A device listed
// once per NUMA node appears once. A device listed under two pods (a kubelet
// before 1.34 keeps a finished pod's devices listed until the pod is
// deleted; v1 List says nothing of a pod's phase) is in `ambiguous`: its
// holder is the first pod listed, which is right for "is it held" and may
// be wrong for "by whom".
struct PodSnapshot {
  std::chrono::steady_clock::time_point asked;  // the List was sent
  std::chrono::steady_clock::time_point taken;  // its answer came
  std::map<std::string, Holders, std::less<>> holders;
  std::map<std::string, std::set<std::string, std::less<>>, std::less<>> ambiguous;
  // The holder of `id` of `resource`, or nullptr.
  const Holder* Find(std::string_view resource, std::string_view id) const {
    auto r = holders.find(resource);
    if (r == holders.end()) return nullptr;
    auto d = r->second.find(id);
    return d == r->second.end() ? nullptr : &d->second;
  }
  bool Ambiguous(std::string_view resource, std::string_view id) const {
    auto r = ambiguous.find(resource);
    return r != ambiguous.end() && r->second.count(id) > 0;
  }
};
using PodSnapshotPtr = std::shared_ptr<const PodSnapshot>;

// Where a snapshot lists the devices that DRA claims give containers
// (PodResources' dynamic_resources): under this key, by DRA device name. An
// extended resource name has no ':', so the two never meet.
inline std::string DraHoldersKey(std::string_view driver, std::string_view pool) {
  std::string key = "dra:";
  key.append(driver).append("/").append(pool);
  return key;
}

}  // namespace devplug
