// Drives an in-tree module through the real loader and ModuleInstance (the
// same ABI path devplugd uses), synchronously, for module unit tests.
#pragma once

#include <future>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config/config.h"
#include "modules/loaded_module.h"
#include "modules/module_instance.h"
#include "test_util.h"

namespace devplug::modules::harness {

// The config file every harness resource pretends to come from; the
// [[resource]] body starts on line 4.
inline constexpr char kFile[] = "module.toml";

// Opens the module file at `path` for one [[resource]] table, as the
// `index`-th table of the configuration.
inline StatusOr<std::unique_ptr<ModuleInstance>> OpenFile(const std::string& path,
                                                          const std::string& resource,
                                                          const std::string& host_root,
                                                          const std::string& body, size_t index = 0,
                                                          ModuleInstance::Options o = {}) {
  auto cfg = config::LoadString(
      "[[resource]]\nname = \"" + resource + "\"\nmodule = \"" + path + "\"\n" + body, kFile, {});
  if (!cfg.ok()) return cfg.status();
  auto m = LoadedModule::Load(path);
  if (!m.ok()) return m.status();
  const config::ResourceConfig& r = cfg->resources.at(0);
  if (Status st = (*m)->CheckKeys(r, 0); !st.ok()) return st;
  o.host_root = host_root;
  o.index = index;
  return ModuleInstance::Create(*m, r, std::move(o));
}

inline StatusOr<std::unique_ptr<ModuleInstance>> Open(const std::string& module,
                                                      const std::string& resource,
                                                      const std::string& host_root,
                                                      const std::string& body) {
  return OpenFile(devplug::testing::ModuleDir() + "/" + module + ".so", resource, host_root, body);
}

inline Status PreStart(ModuleInstance& inst, std::vector<std::string> ids) {
  std::promise<Status> p;
  inst.PreStart(std::move(ids), [&](Status st) { p.set_value(std::move(st)); });
  return p.get_future().get();
}

// on_release(ids): its return value and reason.
inline std::pair<int, std::string> Release(ModuleInstance& inst, std::vector<std::string> ids) {
  std::promise<std::pair<int, std::string>> p;
  inst.Release(std::move(ids), [&](int rc, const std::string& why) { p.set_value({rc, why}); });
  return p.get_future().get();
}

inline StatusOr<Recipe> Allocate(ModuleInstance& inst, std::vector<std::string> ids) {
  std::promise<StatusOr<Recipe>> p;
  inst.Allocate(std::move(ids), [&](StatusOr<Recipe> r) { p.set_value(std::move(r)); });
  return p.get_future().get();
}

inline StatusOr<std::vector<std::string>> Prefer(ModuleInstance& inst,
                                                 std::vector<std::string> available,
                                                 std::vector<std::string> must, int32_t size) {
  std::promise<StatusOr<std::vector<std::string>>> p;
  inst.PreferredAllocation(
      std::move(available), std::move(must), size,
      [&](StatusOr<std::vector<std::string>> r) { p.set_value(std::move(r)); });
  return p.get_future().get();
}

// Waits until the worker has run everything queued on it so far (a call
// that always runs there: PreStart may run on a lane of its own).
inline void Settle(ModuleInstance& inst) {
  std::promise<void> done;
  inst.PreferredAllocation({}, {}, 0,
                           [&](StatusOr<std::vector<std::string>>) { done.set_value(); });
  done.get_future().get();
}

// Runs a rescan and waits for it to finish.
inline void Rescan(ModuleInstance& inst) {
  const uint64_t before = inst.scans();
  inst.RequestRescan();
  Settle(inst);
  ASSERT_GT(inst.scans(), before);
}

inline const Device* Find(const DeviceList& list, const std::string& id) {
  for (const Device& d : list)
    if (d.id == id) return &d;
  return nullptr;
}

inline std::vector<std::string> Ids(const DeviceList& list, bool healthy_only = false) {
  std::vector<std::string> out;
  for (const Device& d : list)
    if (!healthy_only || d.healthy) out.push_back(d.id);
  return out;
}

}  // namespace devplug::modules::harness
