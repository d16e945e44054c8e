// One module instance serving one [[resource]]: the module's create() result
// and the calls into it. Its rooms: the worker (a Lane), the slow calls'
// lanes (DeviceLanes), the current list and its publication (Publisher),
// and the C host services (HostAdapter). The front ends see it as a
// DeviceSource (modules/device_source.h).
//
// Thread safety: every public method may be called from any thread. Calls
// into the module run on the instance's worker thread, one at a time, in the
// order they were requested; a module that declares
// DEVPLUG_CONCURRENT_SLOW_CALLS (ABI 1.7) has its pre_start() and
// on_release() run on threads of their own, the lanes, so that they never
// hold up Allocate, GetPreferredAllocation or scans: one lane, or with
// DEVPLUG_CONCURRENT_DEVICES (ABI 1.8) one per device set, so that one
// device's long release or programming never holds up another's PreStart
// (see DeviceLanes). Completion callbacks
// run on the thread that made the module call and must not block. Device
// lists are published under their own lock, from the worker's scans and
// from Republish() on the caller's thread, never through the module's
// queue.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "devplug/module.h"
#include "model/device.h"
#include "model/scan_cause.h"
#include "model/uevent.h"
#include "modules/device_lanes.h"
#include "modules/device_source.h"
#include "modules/hooks.h"
#include "modules/host_adapter.h"
#include "modules/lane.h"
#include "modules/loaded_module.h"
#include "modules/publisher.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug::modules {

class ModuleInstance final : public DeviceSource {
 public:
  struct Options {
    std::string host_root = "/";
    // Index of the [[resource]] table, for error messages.
    size_t index = 0;
    // create() plus the first scan must finish within this; otherwise the
    // instance is given up (its thread abandoned) and Create fails.
    std::chrono::milliseconds start_timeout{std::chrono::seconds(30)};
    // host->prestart_timeout_ms (ABI 1.4).
    std::chrono::milliseconds prestart_timeout{std::chrono::seconds(28)};
    // What the instance calls outside itself (modules/hooks.h). Null: not
    // there (no front end in a test; no release tracking by the agent;
    // pod_of() answers -EAGAIN; no metrics; watch_path() is -ENOSYS).
    std::shared_ptr<ListSink> lists;
    std::shared_ptr<ReleaseHooks> releases;
    std::shared_ptr<Withholds> withholds;
    std::shared_ptr<PodLookup> pods;
    std::shared_ptr<InstanceObserver> observer;
    std::shared_ptr<PathWatches> watches;
  };

  // Starts the worker and queues create() and the first list_devices() on
  // it; `created` runs once, on the worker, with the outcome: OK, or an
  // error that names the resource (INVALID_ARGUMENT with file, line and key
  // for configuration problems; FAILED_PRECONDITION for a failed create or
  // first scan). Use the instance only after an OK. A module that never
  // answers is the caller's to give up on: Stop() with a short deadline.
  static std::unique_ptr<ModuleInstance> Launch(std::shared_ptr<const LoadedModule> module,
                                                const config::ResourceConfig& resource,
                                                Options options,
                                                std::function<void(Status)> created);

  // Launch, waiting for the outcome up to options.start_timeout (past it,
  // UNAVAILABLE and the instance is given up).
  static StatusOr<std::unique_ptr<ModuleInstance>> Create(
      std::shared_ptr<const LoadedModule> module, const config::ResourceConfig& resource,
      Options options);

  // Stopping, in two halves so that many instances stop in parallel under
  // one deadline: RequestStop() queues destroy() and returns; WaitStopped()
  // waits for the worker to end. False if it is still stuck in a module call
  // at the deadline: the thread is then abandoned and the caller must leak
  // this object (release() its unique_ptr), since the thread may still use
  // it. Stop() is both.
  void RequestStop();
  [[nodiscard]] bool WaitStopped(std::chrono::steady_clock::time_point deadline);
  [[nodiscard]] bool Stop(std::chrono::milliseconds timeout);

  // "resource ...: module ... did not finish create() and its first scan
  // within N ms; giving it up".
  std::string GiveUpMessage() const;

  // Stops (waiting as long as it takes) unless Stop() already ran.
  ~ModuleInstance();

  ModuleInstance(const ModuleInstance&) = delete;
  ModuleInstance& operator=(const ModuleInstance&) = delete;

  const config::ResourceConfig& resource() const { return resource_; }
  const LoadedModule& module() const { return *module_; }

  // DeviceSource.
  const std::string& resource_name() const override { return resource_.name; }
  // The latest device list; never null (empty before the first scan).
  DeviceListPtr devices() const override { return publisher_.devices(); }
  bool module_allocates() const override { return module_->has_allocate(); }
  bool has_preferred_allocation() const override { return module_->has_preferred_allocation(); }
  bool needs_pre_start() const override { return runs_pre_start() || tracks_releases(); }

  // Asks for a new list_devices() soon; calls are coalesced. Never blocks.
  void RequestRescan(ScanCause cause = ScanCause::kResync);

  // Hands udev events (already matched to the module's subsystems) to the
  // worker: each goes to on_udev_event() when the module has it, and the
  // device list is rescanned when a hook says so (or for every event without
  // the hook). Event-driven rescans are rate-limited: the first runs at once,
  // further ones at most every kMinEventScanInterval, so a storm of events
  // costs a bounded number of scans and still ends in the right state.
  void OnUdevEvents(std::vector<udev::Event> events);
  static constexpr std::chrono::milliseconds kMinEventScanInterval{5};
  // A watched path changed (host->watch_path): a rescan under the same rate
  // limit as events, counted as cause "path".
  void OnPathChanged();

  // The kubelet's calls. Those that need the module wait in the worker's
  // queue: at most kMaxQueuedCalls of them (beyond, `done` gets UNAVAILABLE
  // at once, so a hung module cannot grow the queue without bound), and one
  // whose `wanted` says false by the time its turn comes (it was answered
  // with DEADLINE_EXCEEDED meanwhile) is skipped without calling the module
  // or `done`.
  static constexpr int kMaxQueuedCalls = 64;

  // Allocate for one container. Unknown or unhealthy IDs fail with
  // INVALID_ARGUMENT; otherwise the module's allocate() (on the worker) or
  // the devices' default recipes build the answer. Without an allocate()
  // hook no module code runs, and `done` runs at once on the calling thread.
  void Allocate(std::vector<std::string> ids, std::function<void(StatusOr<Recipe>)> done,
                std::function<bool()> wanted = {}) override;
  void PreferredAllocation(std::vector<std::string> available,
                           std::vector<std::string> must_include, int32_t size,
                           std::function<void(StatusOr<std::vector<std::string>>)> done,
                           std::function<bool()> wanted = {}) override;
  // PreStartContainer: first the release of any device that must be given
  // back before this container starts (release tracking; -EAGAIN is asked
  // again every 100 ms while the call is wanted), then the module's
  // pre_start().
  // Returns how long the call has waited for a lane behind other devices'
  // work so far (its deadline should not count that); null when it runs on
  // the worker.
  std::shared_ptr<const LaneWait> PreStart(std::vector<std::string> ids,
                                           std::function<void(Status)> done,
                                           std::function<bool()> wanted = {}) override;

  // True when the module has on_release() and this instance did not opt out
  // of release tracking in create() (host->track_releases(h, 0)).
  bool tracks_releases() const override;
  // The module has pre_start() and this instance did not opt out in
  // create() (host->use_pre_start(h, 0)).
  bool runs_pre_start() const override;
  // on_release(ids) on its device's lane (the worker without lanes);
  // `done` gets its result and reason there, after options.releases
  // saw it.
  void Release(std::vector<std::string> ids,
               std::function<void(int rc, const std::string& why)> done = {}) override;
  // Publishes the last scan again through options.releases (when what
  // the agent holds back changed), on the calling thread, without calling
  // the module and without waiting for its queue.
  void Republish() override;
  // pre_start() and on_release() run on lanes of their own (ABI 1.7), up
  // to slow_lanes() at once on disjoint devices (ABI 1.8; 1 before).
  bool slow_lane() const { return module_->slow_call_lanes() > 0; }
  size_t slow_lanes() const { return module_->slow_call_lanes(); }

  // Number of completed list_devices() calls (for tests and benchmarks).
  uint64_t scans() const { return scans_.load(); }

 private:
  ModuleInstance(std::shared_ptr<const LoadedModule> module, config::ResourceConfig resource,
                 Options options);

  void Post(std::function<void()> task) { worker_.Post(std::move(task)); }
  // On the lane of `devices`, or on the worker when the module has none
  // (then no LaneWait).
  std::shared_ptr<const LaneWait> PostSlow(std::vector<std::string> devices,
                                           std::function<void()> task);
  Status CreateOnWorker();
  // Queues a kubelet call (see kMaxQueuedCalls: one budget for the worker
  // and the lanes together) on the worker, or with `lane` on the lane of
  // those devices (then *wait, when given, tells how long it waits for a
  // lane). False if it was refused.
  bool PostCall(std::function<void()> run, std::function<bool()> wanted,
                const std::function<void(Status)>& refuse, std::vector<std::string>* lane = nullptr,
                std::shared_ptr<const LaneWait>* wait = nullptr);
  // list_devices() and, when the list changed, publication. Fails with the
  // module's reason when the scan itself failed.
  Status ScanOnWorker(ScanCause cause);
  // on_release(ids): 0, -EAGAIN or -errno (reason in *why); logged and
  // reported to options.releases and the observer.
  int RunRelease(const std::vector<std::string>& ids, std::string* why, bool before_start);
  void ProcessEventsOnWorker();
  // An event-driven scan now, or at the end of the rate-limit window.
  void EventScanOnWorker(ScanCause cause);
  // The worker woke at the end of a rate-limit window.
  void DeferredScanOnWorker();
  Status ModuleError(std::string_view call, int rc);
  // destroy() and what follows it (the end of its path watches).
  void DestroyModuleInstance(devplug_instance* inst);

  const std::shared_ptr<const LoadedModule> module_;
  const config::ResourceConfig resource_;
  const Options options_;
  HostAdapter host_;     // the devplug_host the module holds
  Publisher publisher_;  // the current list

  // Set by create() on the worker, cleared by destroy() there once the
  // lanes have ended; read by the lanes in between.
  devplug_instance* inst_ = nullptr;

  std::atomic<bool> rescan_queued_{false};
  std::atomic<bool> path_scan_queued_{false};
  std::atomic<int> queued_calls_{0};  // kubelet calls waiting on the worker or a lane

  Mutex events_mu_;
  std::vector<udev::Event> pending_events_ DEVPLUG_GUARDED_BY(events_mu_);
  bool events_queued_ DEVPLUG_GUARDED_BY(events_mu_) = false;
  // Worker thread only: rate limit of event-driven scans.
  std::chrono::steady_clock::time_point last_event_scan_{};
  ScanCause deferred_cause_ = ScanCause::kEvent;  // what deferred the pending scan
  std::atomic<uint64_t> scans_{0};

  Lane worker_;  // "dp:<module>"
  // The slow calls' lanes (ABI 1.7, per device since 1.8); null without.
  std::unique_ptr<DeviceLanes> lanes_;
};

// WaitStopped(deadline) after RequestStop(), for an instance its owner may
// have to give up: one still inside a module call at the deadline is let go
// (`instance` released and leaked: its thread may still use it). True if it
// stopped; true for null.
bool StopOrAbandon(std::unique_ptr<ModuleInstance>& instance,
                   std::chrono::steady_clock::time_point deadline);

}  // namespace devplug::modules
