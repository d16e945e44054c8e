#include "modules/abi_sinks.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

#include "devplug/common/pci_address.h"
#include "model/dra_names.h"
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

int DeviceSink::AddAttribute(const char* name, DeviceAttribute::Type type, const char* text,
                             int64_t number) {
  if (!last_added || list.empty()) return -ENOENT;
  Device& d = list.back();
  try {
    auto refuse = [&](int rc, const std::string& why) {
      attribute_problems.push_back(StrCat("device \"", d.id, "\": attribute \"",
                                          PrintableUtf8(name == nullptr ? "" : name, 64), "\" ",
                                          why));
      return rc;
    };
    if (name == nullptr) return refuse(-EINVAL, "has no name");
    if (type == DeviceAttribute::Type::kBool && number != 0 && number != 1)
      return refuse(-EINVAL, StrCat("has the bool value ", number, " (0 or 1)"));
    if (type == DeviceAttribute::Type::kCapacity && number < 0)
      return refuse(-EINVAL, "has a capacity above INT64_MAX");
    if (std::string why = dra::CheckAttributeName(name); !why.empty())
      return refuse(-EINVAL, StrCat("is no attribute name: it ", why));
    if (dra::IsAgentAttribute(name)) return refuse(-EINVAL, "is one devplugd sets itself");
    for (const DeviceAttribute& x : d.attributes)
      if (x.name == name) return refuse(-EEXIST, "is set twice");
    if (d.attributes.size() + kAgentAttributes >= dra::kMaxAttributesPerDevice)
      return refuse(-E2BIG, StrCat("is one too many: a device holds ",
                                   dra::kMaxAttributesPerDevice - kAgentAttributes,
                                   " attributes and capacities of its module"));
    DeviceAttribute a{name, type, text == nullptr ? "" : text, number};
    if (a.type == DeviceAttribute::Type::kString) {
      if (a.text.size() > dra::kMaxAttributeValueLength)
        return refuse(-EINVAL, StrCat("has a value of ", a.text.size(), " bytes; at most ",
                                      dra::kMaxAttributeValueLength));
      if (!IsValidUtf8(a.text)) return refuse(-EINVAL, "has a value that is no UTF-8");
    }
    if (a.type == DeviceAttribute::Type::kVersion)
      if (std::string why = dra::CheckVersion(a.text); !why.empty())
        return refuse(-EINVAL,
                      StrCat("has a version \"", PrintableUtf8(a.text, 64), "\" that ", why));
    d.attributes.push_back(std::move(a));
    return 0;
  } catch (...) {
    return -ENOMEM;
  }
}

std::string DeviceSink::PcieRootOf(const std::string& address) {
  namespace fs = std::filesystem;
  if (host_root.empty()) return "";
  std::error_code ec;
  if (!sys_devices_read_) {
    sys_devices_read_ = true;
    sys_devices_ = fs::canonical(fs::path(host_root) / "sys/devices", ec).string();
    if (ec) sys_devices_.clear();
  }
  if (sys_devices_.empty()) return "";
  // /sys/bus/pci/devices/<address> -> ../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0
  const std::string path =
      fs::canonical(fs::path(host_root) / "sys/bus/pci/devices" / address, ec).string();
  if (ec || path.size() <= sys_devices_.size() + 1 ||
      path.compare(0, sys_devices_.size(), sys_devices_) != 0 || path[sys_devices_.size()] != '/')
    return "";
  const size_t start = sys_devices_.size() + 1;
  const std::string root = path.substr(start, path.find('/', start) - start);
  return dra::IsPcieRoot(root) ? root : "";
}

int DeviceSink::SetPciAddress(devplug_device_sink* s, const char* address) {
  if (s == nullptr) return -EINVAL;
  auto* self = static_cast<DeviceSink*>(s->agent_data);
  if (!self->last_added || self->list.empty()) return -ENOENT;
  Device& d = self->list.back();
  try {
    const std::optional<std::string> bdf =
        address == nullptr ? std::nullopt : common::NormalizePciAddress(address);
    if (!bdf) {
      self->attribute_problems.push_back(StrCat("device \"", d.id, "\": \"",
                                                PrintableUtf8(address ? address : "", 64),
                                                "\" is no PCI address"));
      return -EINVAL;
    }
    d.pci_address = *bdf;
    d.pcie_root = self->PcieRootOf(*bdf);
    return 0;
  } catch (...) {
    return -ENOMEM;
  }
}

int DeviceSink::SetAttributeString(devplug_device_sink* s, const char* name, const char* value) {
  if (s == nullptr || value == nullptr) return -EINVAL;
  return static_cast<DeviceSink*>(s->agent_data)
      ->AddAttribute(name, DeviceAttribute::Type::kString, value, 0);
}

int DeviceSink::SetAttributeInt(devplug_device_sink* s, const char* name, int64_t value) {
  if (s == nullptr) return -EINVAL;
  return static_cast<DeviceSink*>(s->agent_data)
      ->AddAttribute(name, DeviceAttribute::Type::kInt, nullptr, value);
}

int DeviceSink::SetAttributeBool(devplug_device_sink* s, const char* name, int32_t value) {
  if (s == nullptr) return -EINVAL;
  return static_cast<DeviceSink*>(s->agent_data)
      ->AddAttribute(name, DeviceAttribute::Type::kBool, nullptr, value);
}

int DeviceSink::SetAttributeVersion(devplug_device_sink* s, const char* name, const char* value) {
  if (s == nullptr || value == nullptr) return -EINVAL;
  return static_cast<DeviceSink*>(s->agent_data)
      ->AddAttribute(name, DeviceAttribute::Type::kVersion, value, 0);
}

int DeviceSink::SetCapacity(devplug_device_sink* s, const char* name, uint64_t value) {
  if (s == nullptr) return -EINVAL;
  // Above INT64_MAX: -1, which AddAttribute refuses.
  const int64_t n = value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                        ? -1
                        : static_cast<int64_t>(value);
  return static_cast<DeviceSink*>(s->agent_data)
      ->AddAttribute(name, DeviceAttribute::Type::kCapacity, nullptr, n);
}

namespace {

// Whether `text` may go into an API field as it is: UTF-8 with no control
// character, at most `max` bytes.
bool PlainText(std::string_view text, size_t max) {
  return text.size() <= max && IsValidUtf8(text) &&
         std::none_of(text.begin(), text.end(),
                      [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

}  // namespace

int RecipeSink::SetNetwork(devplug_recipe* r, const char* device_id, const char* interface_name,
                           const char* hardware_address) {
  if (r == nullptr || Empty(device_id) || (Empty(interface_name) && Empty(hardware_address)))
    return -EINVAL;
  const std::string_view name = interface_name == nullptr ? "" : interface_name;
  const std::string_view address = hardware_address == nullptr ? "" : hardware_address;
  if (BadDeviceId(device_id) != nullptr || !PlainText(name, kMaxInterfaceNameBytes) ||
      !PlainText(address, kMaxHardwareAddressBytes))
    return -EINVAL;
  return Guarded(r, [&](Recipe& x) {
    x.SetNetwork({device_id, std::string(name), std::string(address)});
  });
}

int DeviceSink::SetShareOf(devplug_device_sink* s, const char* device) {
  if (s == nullptr) return -EINVAL;
  auto* self = static_cast<DeviceSink*>(s->agent_data);
  if (!self->last_added || self->list.empty()) return -ENOENT;
  Device& d = self->list.back();
  try {
    const std::string_view name = device == nullptr ? "" : device;
    std::string why;
    if (name.empty())
      why = "is empty";
    else if (name.size() > kMaxShareOfBytes)
      why = StrCat("has ", name.size(), " bytes; at most ", kMaxShareOfBytes);
    else if (!IsValidUtf8(name))
      why = "is no UTF-8";
    else if (std::any_of(name.begin(), name.end(),
                         [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }))
      why = "has a control character";
    if (!why.empty()) {
      self->attribute_problems.push_back(StrCat("device \"", d.id,
                                                "\": the device it is a share of (\"",
                                                PrintableUtf8(name, 64), "\") ", why));
      return -EINVAL;
    }
    d.share_of = std::string(name);
    return 0;
  } catch (...) {
    return -ENOMEM;
  }
}

}  // namespace devplug::modules
