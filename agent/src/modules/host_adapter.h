// The agent's side of the module ABI's host services: it owns the
// struct devplug_host a module instance gets at create() and answers its C
// callbacks (logging, change notices, error reasons, typed read-only access
// to the instance's own [[resource]] table, pod_of, watch_path, the opt-outs
// a module makes in create()). Nothing throws across into C.
//
// What a callback writes during one module call (set_error()'s reason, the
// pod_of() answer the module reads, when the PreStartContainer of a
// pre_start() began) lives in a per-thread CallContext: the worker has one,
// each lane thread its own.
//
// Thread safety: the callbacks may come from any thread the module calls
// from, and from the module's own threads (log, devices_changed). The
// configuration is immutable; the opt-outs are atomics; config errors are
// written during create() only, on the worker.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "devplug/module.h"
#include "modules/hooks.h"
#include "modules/loaded_module.h"

namespace devplug::modules {

class HostAdapter {
 public:
  struct Options {
    std::string host_root = "/";
    size_t index = 0;  // of the [[resource]] table, for messages
    std::chrono::milliseconds prestart_timeout{0};
    std::shared_ptr<PodLookup> pods;        // null: pod_of() is -EAGAIN
    std::shared_ptr<PathWatches> watches;   // null: watch_path() is -ENOSYS
    std::function<void()> devices_changed;  // the module's devices_changed()
  };

  // What host services write during one module call on one thread.
  struct CallContext {
    const HostAdapter* owner = nullptr;  // whose calls this thread makes
    std::string error;                   // set_error()
    PodHolder pod_answer;                // what pod_of() points into
    // Inside pre_start(): when its PreStartContainer began.
    std::optional<std::chrono::steady_clock::time_point> prestart_began;
  };

  HostAdapter(const LoadedModule& module, const config::ResourceConfig& resource, Options options);
  HostAdapter(const HostAdapter&) = delete;
  HostAdapter& operator=(const HostAdapter&) = delete;

  const devplug_host* host() const { return &host_; }

  // The calling thread's context: the lane thread's own after BindLane(),
  // otherwise the worker's.
  CallContext& Call();
  // On a new lane thread: its calls get a context of their own.
  void BindLane();
  // Before a module call: its reason is cleared.
  void BeginCall() { Call().error.clear(); }
  // The module's reason for `rc` (set_error()), or strerror.
  std::string Why(int rc);

  // config_error() reports, in the order given (create() only).
  const std::vector<std::string>& config_errors() const { return config_errors_; }
  // The instance did not opt out (host->track_releases, host->use_pre_start).
  bool track_releases() const { return track_releases_.load(); }
  bool use_pre_start() const { return use_pre_start_.load(); }
  // Ends the instance's path watches (after destroy(), or a failed create()).
  void EndWatches();

 private:
  static HostAdapter* Self(const devplug_host* h);
  const config::ConfigNode* FindConfig(const char* path, int* error) const;

  static void Log(const devplug_host* h, int32_t level, const char* msg);
  static void DevicesChanged(const devplug_host* h);
  static void SetError(const devplug_host* h, const char* msg);
  static void ConfigError(const devplug_host* h, const char* key, const char* msg);
  static int String(const devplug_host* h, const char* key, const char** ret);
  static int Int(const devplug_host* h, const char* key, int64_t* ret);
  static int Bool(const devplug_host* h, const char* key, int32_t* ret);
  static int IntArray(const devplug_host* h, const char* key, const int64_t** ret, size_t* ret_n);
  static int StringArray(const devplug_host* h, const char* key, const char* const** ret,
                         size_t* ret_n);
  static int PodOf(const devplug_host* h, const char* id, devplug_pod* ret);
  static int TrackReleases(const devplug_host* h, int32_t on);
  static int UsePreStart(const devplug_host* h, int32_t on);
  static int ConfigValue(const devplug_host* h, const char* path, devplug_config_value* ret);
  static int ConfigMember(const devplug_host* h, const char* path, size_t index,
                          const char** ret_name);
  static int WatchPath(const devplug_host* h, const char* path);

  const LoadedModule& module_;
  const config::ResourceConfig& resource_;
  const Options options_;
  devplug_host host_{};
  // C views of string arrays in the module's keys.
  std::map<std::string, std::vector<const char*>, std::less<>> string_arrays_;
  std::vector<std::string> config_errors_;
  std::atomic<bool> track_releases_{true};
  std::atomic<bool> use_pre_start_{true};

  CallContext worker_call_;
  static thread_local CallContext* current_call_;
  // A lane thread's own context (each lane thread serves one instance).
  static thread_local CallContext lane_call_;
};

}  // namespace devplug::modules
