// Helpers of the benchmarks that drive one module in process, through the
// real loader and ModuleInstance (link devplug_core).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <future>
#include <memory>
#include <string>

#include "bench_stats.h"
#include "config/config.h"
#include "modules/loaded_module.h"
#include "modules/module_instance.h"

namespace devplug::bench {

// An instance of DEVPLUG_BENCH_MODULE_DIR/<module>.so for one [[resource]]
// body (name, module and keys) on a fixture host_root; nullptr on failure.
inline std::unique_ptr<modules::ModuleInstance> OpenModule(const std::string& module,
                                                           const std::string& resource_toml,
                                                           const std::string& host_root) {
  auto cfg = config::LoadString("[[resource]]\n" + resource_toml, "bench.toml", {});
  auto m =
      modules::LoadedModule::Load(std::string(DEVPLUG_BENCH_MODULE_DIR) + "/" + module + ".so");
  if (!cfg.ok() || !m.ok()) return nullptr;
  modules::ModuleInstance::Options o;
  o.host_root = host_root;
  auto inst = modules::ModuleInstance::Create(*m, cfg->resources.at(0), std::move(o));
  return inst.ok() ? std::move(inst).value() : nullptr;
}

// One rescan, timed over the whole round trip through the worker, in ms.
inline double TimedRescan(modules::ModuleInstance& inst) {
  const auto t0 = std::chrono::steady_clock::now();
  inst.RequestRescan();
  std::promise<void> done;
  inst.PreStart({}, [&](Status) { done.set_value(); });  // queued after the rescan
  done.get_future().get();
  return Ms(std::chrono::steady_clock::now() - t0);
}

// Fixtures go to tmpfs when there is one and TMPDIR does not say otherwise:
// sysfs and devtmpfs are memory file systems too, and a disk file system's
// directory costs (ext4 inode allocation, htree readdir) would measure the
// disk, not us.
inline void PreferTmpfsForFixtures() {
  if (getenv("TMPDIR") == nullptr && access("/dev/shm", W_OK) == 0) setenv("TMPDIR", "/dev/shm", 1);
}

}  // namespace devplug::bench
