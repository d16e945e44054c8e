// The agent-owned C structs a module writes into during a call
// (devplug_recipe, devplug_device_sink, devplug_id_sink), each backed by C++
// containers, and the checks every device ID a module reports must pass.
// Every entry point catches what it throws: no exception crosses into C.
//
// Thread safety: one sink per call, used on the calling (worker) thread.
#pragma once

#include <cerrno>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "devplug/module.h"
#include "model/device.h"

namespace devplug::modules {

inline bool Empty(const char* s) { return s == nullptr || s[0] == '\0'; }

// Why a device ID cannot be sent to the kubelet (too long, control
// characters, malformed UTF-8, the ',' that joins IDs in env values), or
// nullptr when it can.
const char* BadDeviceId(std::string_view id);

// ---- devplug_recipe backed by a Recipe --------------------------------------

struct RecipeSink {
  devplug_recipe c{};
  Recipe* target = nullptr;

  explicit RecipeSink(Recipe* r) : target(r) {
    c.struct_size = sizeof(c);
    c.agent_data = this;
    c.add_device_node = &AddDeviceNode;
    c.add_mount = &AddMount;
    c.add_env = &AddEnv;
    c.add_annotation = &AddAnnotation;
    c.add_cdi_device = &AddCdi;
    c.set_network = &SetNetwork;
  }
  // Runs `add` on the target recipe; no exception crosses into C.
  template <typename F>
  static int Guarded(devplug_recipe* r, F&& add) {
    try {
      add(*static_cast<RecipeSink*>(r->agent_data)->target);
    } catch (...) {
      return -ENOMEM;
    }
    return 0;
  }

  static int AddDeviceNode(devplug_recipe* r, const char* host, const char* container,
                           const char* perms) {
    if (r == nullptr || Empty(host)) return -EINVAL;
    return Guarded(r, [&](Recipe& x) {
      x.device_nodes.push_back(
          {host, Empty(container) ? host : container, Empty(perms) ? "rw" : perms});
    });
  }
  static int AddMount(devplug_recipe* r, const char* host, const char* container, int32_t ro) {
    if (r == nullptr || Empty(host) || Empty(container)) return -EINVAL;
    return Guarded(r, [&](Recipe& x) { x.mounts.push_back({host, container, ro != 0}); });
  }
  static int AddEnv(devplug_recipe* r, const char* key, const char* value) {
    if (r == nullptr || Empty(key) || value == nullptr) return -EINVAL;
    return Guarded(r, [&](Recipe& x) { x.envs.emplace_back(key, value); });
  }
  static int AddAnnotation(devplug_recipe* r, const char* key, const char* value) {
    if (r == nullptr || Empty(key) || value == nullptr) return -EINVAL;
    return Guarded(r, [&](Recipe& x) { x.annotations.emplace_back(key, value); });
  }
  static int AddCdi(devplug_recipe* r, const char* name) {
    if (r == nullptr || Empty(name)) return -EINVAL;
    return Guarded(r, [&](Recipe& x) { x.cdi_devices.emplace_back(name); });
  }
  // ABI 1.11. The limits are the API server's for NetworkDeviceData.
  static constexpr size_t kMaxInterfaceNameBytes = 256;
  static constexpr size_t kMaxHardwareAddressBytes = 128;
  static int SetNetwork(devplug_recipe* r, const char* device_id, const char* interface_name,
                        const char* hardware_address);
};

// ---- devplug_device_sink collecting a DeviceList ----------------------------

struct DeviceSink {
  devplug_device_sink c{};
  DeviceList list;
  std::set<std::string, std::less<>> ids;
  std::vector<std::string> problems;
  Recipe scratch;  // target of rejected devices' recipes
  std::unique_ptr<RecipeSink> recipe;
  bool last_added = false;  // the last add_device() was accepted (list.back())
  // Attributes refused (ABI 1.9): the device goes on without them.
  std::vector<std::string> attribute_problems;
  // Where sysfs lies, to find a PCI function's root complex ("/" or a
  // fixture tree); "" reads none.
  std::string host_root;

  explicit DeviceSink(std::string root = {}) : host_root(std::move(root)) {
    c.struct_size = sizeof(c);
    c.agent_data = this;
    c.add_device = &AddDevice;
    c.set_health_reason = &SetHealthReason;
    c.set_numa_nodes = &SetNumaNodes;
    c.set_pci_address = &SetPciAddress;
    c.set_attribute_string = &SetAttributeString;
    c.set_attribute_int = &SetAttributeInt;
    c.set_attribute_bool = &SetAttributeBool;
    c.set_attribute_version = &SetAttributeVersion;
    c.set_capacity = &SetCapacity;
    c.set_share_of = &SetShareOf;
  }

  // The sink's add_device: checks the ID and health, then appends the
  // device (or records why not and hands out a scratch recipe).
  static int AddDevice(devplug_device_sink* s, const char* id, int32_t health, int32_t numa,
                       devplug_recipe** ret_recipe);
  // The reason of the device added last (ABI 1.2); cut to
  // kMaxHealthReasonBytes on a UTF-8 boundary, control characters replaced.
  static int SetHealthReason(devplug_device_sink* s, const char* reason);
  static constexpr size_t kMaxHealthReasonBytes = 127;
  // Every NUMA node of the device added last (ABI 1.6).
  static int SetNumaNodes(devplug_device_sink* s, const int32_t* nodes, size_t n);
  static constexpr int32_t kMaxNumaNode = 1023;
  // What DRA publishes of the device added last (ABI 1.9).
  static int SetPciAddress(devplug_device_sink* s, const char* address);
  static int SetAttributeString(devplug_device_sink* s, const char* name, const char* value);
  static int SetAttributeInt(devplug_device_sink* s, const char* name, int64_t value);
  static int SetAttributeBool(devplug_device_sink* s, const char* name, int32_t value);
  static int SetAttributeVersion(devplug_device_sink* s, const char* name, const char* value);
  static int SetCapacity(devplug_device_sink* s, const char* name, uint64_t value);
  // The device the device added last is one share of (ABI 1.10).
  static int SetShareOf(devplug_device_sink* s, const char* device);
  static constexpr size_t kMaxShareOfBytes = 127;
  // Of the 32 attributes and capacities a device may have, those the agent
  // keeps for its own (id, numaNode, pciBusID, pcieRoot).
  static constexpr size_t kAgentAttributes = 4;

 private:
  // Checks and appends one attribute of the device added last.
  int AddAttribute(const char* name, DeviceAttribute::Type type, const char* text, int64_t number);
  // The root complex of PCI function `address` under host_root, "" when
  // sysfs does not say.
  std::string PcieRootOf(const std::string& address);
  std::string sys_devices_;  // host_root's /sys/devices, resolved once
  bool sys_devices_read_ = false;
};

struct IdSink {
  devplug_id_sink c{};
  std::vector<std::string> ids;
  IdSink() {
    c.struct_size = sizeof(c);
    c.agent_data = this;
    c.add_id = &AddId;
  }
  static int AddId(devplug_id_sink* s, const char* id) {
    if (s == nullptr || id == nullptr) return -EINVAL;
    try {
      static_cast<IdSink*>(s->agent_data)->ids.emplace_back(id);
    } catch (...) {
      return -ENOMEM;
    }
    return 0;
  }
};

inline std::vector<const char*> CStrings(const std::vector<std::string>& v) {
  std::vector<const char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(s.c_str());
  out.push_back(nullptr);
  return out;
}

}  // namespace devplug::modules
