// One resource's devices by CDI name: its spec file, rewritten from each
// new device list before that list reaches the kubelet, and what Allocate
// adds to its answer (names in cdi_devices, a cdi.k8s.io/ annotation, or
// both; with cdi_only, in place of the classic answer the spec carries).
//
// A reload's staged resource renders but writes nothing until the reload
// commits (Activate), so a refused reload leaves every spec as it was.
//
// Thread safety: thread-safe. Publish runs on the module's worker, Answer
// on gRPC threads, Activate and the rest on the agent's main thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cdi/spec.h"
#include "deviceplugin/v1beta1/api.pb.h"
#include "model/cdi_mode.h"
#include "model/device.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug::cdi {

class ResourceCdi {
 public:
  struct Options {
    std::string resource;
    CdiMode mode = CdiMode::kOff;
    std::string dir;        // the spec folder, as the runtime sees it
    std::string host_root;  // where that folder and the device nodes are for us
    bool only = false;      // cdi_only
    bool active = true;     // false: a reload's staged resource
  };
  // Fails where the resource's name has no CDI kind (the configuration
  // refuses such a resource first).
  static StatusOr<std::shared_ptr<ResourceCdi>> Make(Options options);

  // A new device list, before the kubelet gets it: the spec is rewritten
  // when its content changed (and removed when no device is left). A
  // failed write is logged once per distinct error; Allocate then names
  // no device the file on disk may lack.
  void Publish(const DeviceList& list);
  // Writes what the last Publish rendered (a staged resource's reload
  // committed).
  void Activate();

  // Adds the CDI names of one container's devices (`ids`) to its answer, as
  // the mode says. `recipe` is the module's answer; `default_recipe`:
  // whether that is the devices' default recipes, which the resource's
  // spec holds. Otherwise (a module's allocate() hook answered) the answer
  // goes into an allocation spec of its own, written here, before the
  // kubelet has the answer; an earlier allocation spec that names one of
  // these IDs is removed (its pod no longer holds them). With cdi_only the
  // classic answer is left out where the names carry all of it.
  void Answer(const std::vector<std::string>& ids, const Recipe& recipe, bool default_recipe,
              v1beta1::ContainerAllocateResponse* resp);
  // The IDs' pods are gone, as a PodResources List sent at `listed` said:
  // the allocation specs naming them are removed, save those written after
  // that List was sent (the ID was handed out again meanwhile).
  void Released(const std::vector<std::string>& ids, std::chrono::steady_clock::time_point listed);

  const Kind& kind() const { return kind_; }
  const std::string& dir() const { return options_.dir; }
  // Where devplugd writes it: dir() under host_root.
  std::string Dir() const;
  std::string file_name() const { return SpecFileName(kind_); }
  CdiMode mode() const { return options_.mode; }

  // For status: how many devices the file on disk names, and the last
  // write error ("" when the file is current).
  size_t named() const;
  std::string problem() const;
  // How many allocation specs are on disk.
  size_t allocations() const;

 private:
  struct Allocation {
    std::vector<std::string> ids;
    std::chrono::steady_clock::time_point written;  // min(): by an earlier devplugd
  };
  ResourceCdi(Options options, Kind kind) : options_(std::move(options)), kind_(std::move(kind)) {}
  void WriteLocked() DEVPLUG_REQUIRES(mu_);
  // Allocation specs: the index on disk read once, when the resource
  // becomes active; entries dropped with their files.
  void LoadAllocationsLocked() DEVPLUG_REQUIRES(mu_);
  void DropAllocationsLocked(
      const std::function<bool(const std::string& name, const Allocation&)>& which,
      const std::string& why) DEVPLUG_REQUIRES(mu_);
  Status WriteIndexLocked() DEVPLUG_REQUIRES(mu_);

  const Options options_;
  const Kind kind_;
  mutable Mutex mu_;
  bool active_ DEVPLUG_GUARDED_BY(mu_) = true;
  Rendered pending_ DEVPLUG_GUARDED_BY(mu_);     // the last Publish's
  std::string written_ DEVPLUG_GUARDED_BY(mu_);  // what the file on disk holds ("": none)
  bool written_once_ DEVPLUG_GUARDED_BY(mu_) = false;
  std::set<std::string> on_disk_ DEVPLUG_GUARDED_BY(mu_);  // the IDs it names
  std::string problem_ DEVPLUG_GUARDED_BY(mu_);
  std::set<std::string> skip_told_ DEVPLUG_GUARDED_BY(mu_);  // IDs already logged as left out
  bool allocations_loaded_ DEVPLUG_GUARDED_BY(mu_) = false;
  // Allocation specs on disk, by device name.
  std::map<std::string, Allocation> allocations_ DEVPLUG_GUARDED_BY(mu_);
};

// The host view of a device node: follows symlinks under host_root.
std::optional<NodeInfo> LookUpNode(const std::string& host_root, const std::string& host_path);

// Removes devplugd's files in each of `dirs` (under host_root) that no
// kind of `keep` (folder, kind) owns: at start and after a reload, specs of
// resources that are gone or turned CDI off. Never touches another
// writer's files.
void RemoveStale(const std::string& host_root, const std::set<std::string>& dirs,
                 const std::vector<std::pair<std::string, Kind>>& keep);

}  // namespace devplug::cdi
