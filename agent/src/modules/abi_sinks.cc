#include "modules/abi_sinks.h"

#include <algorithm>
#include <cstring>

#include "model/kubelet_limits.h"
#include "util/status.h"
#include "util/utf8.h"

namespace devplug::modules {

using kubelet::kMaxDeviceIdLength;

// Device IDs travel in protobuf string fields (which must be UTF-8: a peer
// that validates drops the whole stream otherwise), into the kubelet's
// checkpoint, and joined with ',' into env values such as
// NVIDIA_VISIBLE_DEVICES or PCI_RESOURCE_<NAME>.
const char* BadDeviceId(std::string_view id) {
  if (id.empty()) return "an empty ID";
  if (id.size() > kMaxDeviceIdLength) return "an ID longer than 63 characters";
  for (const char ch : id) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return "a control character";
    if (c == ',') return "a ',' (it separates IDs in env values)";
  }
  return IsValidUtf8(id) ? nullptr : "malformed UTF-8";
}

int DeviceSink::AddDevice(devplug_device_sink* s, const char* id, int32_t health, int32_t numa,
                          devplug_recipe** ret_recipe) {
  if (s == nullptr) return -EINVAL;
  auto* self = static_cast<DeviceSink*>(s->agent_data);
  try {
    int rc = 0;
    if (Empty(id)) {
      self->problems.push_back("a device with an empty ID");
      rc = -EINVAL;
    } else if (std::strlen(id) > kMaxDeviceIdLength) {
      self->problems.push_back(
          StrCat("device ID \"", id, "\" is longer than ", kMaxDeviceIdLength, " characters"));
      rc = -EINVAL;
    } else if (const char* bad = BadDeviceId(id)) {
      self->problems.push_back(StrCat("a device ID with ", bad));
      rc = -EINVAL;
    } else if (health != DEVPLUG_HEALTHY && health != DEVPLUG_UNHEALTHY) {
      self->problems.push_back(StrCat("device \"", id, "\" has health value ", health));
      rc = -EINVAL;
    } else if (self->ids.contains(id)) {
      self->problems.push_back(StrCat("duplicate device ID \"", id, "\""));
      rc = -EEXIST;
    }
    // The recipe pointer handed out is valid until the next add_device(), as
    // the ABI says, so one RecipeSink serves every device: aimed at the new
    // device, or at a scratch recipe when the device is dropped.
    Recipe* target = &self->scratch;
    if (rc == 0) {
      self->ids.emplace(id);
      Device& d = self->list.emplace_back();
      d.id = id;
      d.healthy = health == DEVPLUG_HEALTHY;
      d.numa_node = numa < 0 ? -1 : numa;
      target = &d.recipe;
    } else {
      self->scratch = {};
    }
    self->last_added = rc == 0;
    if (self->recipe)
      self->recipe->target = target;
    else
      self->recipe = std::make_unique<RecipeSink>(target);
    if (ret_recipe) *ret_recipe = &self->recipe->c;
    return rc;
  } catch (...) {
    return -ENOMEM;
  }
}

int DeviceSink::SetHealthReason(devplug_device_sink* s, const char* reason) {
  if (s == nullptr || reason == nullptr) return -EINVAL;
  auto* self = static_cast<DeviceSink*>(s->agent_data);
  if (!self->last_added || self->list.empty()) return -ENOENT;
  try {
    std::string r(reason, strnlen(reason, kMaxHealthReasonBytes));
    // A cut in the middle of a character, or bytes that are no text: the
    // reason goes into logs, status JSON and protobuf strings.
    while (!r.empty() && !IsValidUtf8(r)) r.pop_back();
    for (char& c : r)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    self->list.back().health_reason = std::move(r);
    return 0;
  } catch (...) {
    return -ENOMEM;
  }
}

int DeviceSink::SetNumaNodes(devplug_device_sink* s, const int32_t* nodes, size_t n) {
  if (s == nullptr || (nodes == nullptr && n > 0)) return -EINVAL;
  auto* self = static_cast<DeviceSink*>(s->agent_data);
  if (!self->last_added || self->list.empty()) return -ENOENT;
  Device& d = self->list.back();
  try {
    std::vector<int32_t> all(nodes, nodes + n);
    for (int32_t node : all) {
      if (node < 0 || node > kMaxNumaNode) {
        self->problems.push_back(
            StrCat("device \"", d.id, "\": NUMA node ", node, " is out of range"));
        return -EINVAL;
      }
    }
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    d.numa_node = all.empty() ? -1 : all.front();
    if (all.size() < 2) all.clear();  // one node: numa_node says it all
    d.numa_nodes = std::move(all);
    return 0;
  } catch (...) {
    return -ENOMEM;
  }
}

}  // namespace devplug::modules
