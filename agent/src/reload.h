// A reload of the configuration (SIGHUP, or watch_config): what the new
// configuration changes, resource by resource, and the reload under way.
//
// Plan compares the running resources with the new configuration: a resource
// whose table is the same (wherever it is written) and whose module file was
// not replaced keeps running untouched; an added or changed one is staged:
// created and scanned beside the running ones, under the new configuration.
// Keys only a restart can change refuse the whole reload. Once every staged
// resource is created (Ready), Commit puts them in the running set in place
// of what they replace, or, when one failed (Errors), Abandon keeps the old
// configuration whole; docs/design.md, "Reload, status, metrics".
//
// Thread safety: not thread-safe; the agent's main thread owns it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "modules/loaded_module.h"
#include "ops/metrics.h"
#include "resource.h"
#include "resource_set.h"
#include "util/status.h"

namespace devplug {

class Reload {
 public:
  using Clock = std::chrono::steady_clock;
  using FileId = modules::LoadedModule::FileId;

  // A running resource, as a reload compares it with the new configuration.
  struct Current {
    config::ResourceConfig cfg;
    // Its module, once loaded: the file it came from, and whether it takes
    // PreStartContainer calls (pre_start or on_release).
    std::optional<FileId> module_file;
    bool takes_prestart = false;
  };
  struct Plan {
    // Positions in the new configuration's resources: added or changed.
    std::vector<size_t> stage;
    // Of those, the ones whose only change is their module file on disk.
    std::vector<std::string> replaced;
  };
  // `identify`: the file at a module's path now (LoadedModule::Identify).
  // Fails, naming file, line and key of each, when a key only a restart
  // can change was changed.
  static StatusOr<Plan> Make(
      const config::AgentConfig& now, const config::AgentConfig& next,
      const std::vector<Current>& running,
      const std::function<std::optional<FileId>(const std::string& path)>& identify);
  // The same resource, as far as serving it goes (where it is written in
  // the files does not matter).
  static bool SameResource(const config::ResourceConfig& a, const config::ResourceConfig& b);

  // A reload under way: the new configuration and its staged resources,
  // which are created by `deadline`.
  Reload(config::AgentConfig next, std::vector<std::unique_ptr<Resource>> staged,
         Clock::time_point deadline)
      : config_(std::move(next)), staged_(std::move(staged)), deadline_(deadline) {}

  const config::AgentConfig& config() const { return config_; }
  config::AgentConfig TakeConfig() { return std::move(config_); }
  std::vector<std::unique_ptr<Resource>>& staged() { return staged_; }
  Clock::time_point deadline() const { return deadline_; }
  Resource* Find(uint64_t id) const;

  // Every staged resource's create() has ended, or `now` is past the
  // deadline.
  bool Ready(Clock::time_point now) const;
  // Gives up the staged resources still starting; then the failures of
  // them all, one message each (none: the reload can commit).
  std::vector<std::string> Errors();

  // What a commit changed, by resource name.
  struct Outcome {
    std::vector<std::string> added, changed, removed, unchanged;
    // A resource that tracks releases came: a PodResources List is due now.
    bool list_now = false;
    // DRA sides moved to the device plugin API: drained (no slice; new
    // claims prepared only until the hand-off closes them), still
    // registered for their claims' unprepares; the agent keeps them until
    // none is left. Their successors are not registered yet: the agent
    // registers each once its hand-off ends.
    std::vector<std::unique_ptr<Resource>> draining;
  };
  // Serves the staged resources: `running` becomes `next`'s resources, in
  // its order. An unchanged one is not touched. A changed one takes over
  // its predecessor's release state, and registers once the kubelet has
  // seen the old stream end. A DRA one moved to the device plugin API
  // drains instead of going (Outcome::draining): its slices are deleted
  // before its successor registers, and the successor keeps the claimed
  // devices from the kubelet. What was replaced or removed is
  // retired (until `retire_by`). Call it with config() taken: the agent's running configuration is
  // `next` by then, since new servers and registrations read their values from it.
  Outcome Commit(const config::AgentConfig& next, ResourceSet& running, ops::Metrics& metrics,
                 Clock::time_point retire_by);
  // The reload failed: its staged resources are retired, nothing that
  // runs is touched.
  void Abandon(ResourceSet& running, ops::Metrics& metrics, Clock::time_point retire_by);

 private:
  config::AgentConfig config_;
  std::vector<std::unique_ptr<Resource>> staged_;
  Clock::time_point deadline_;
};

}  // namespace devplug
