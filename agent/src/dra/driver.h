// One DRA resource's driver: what a module's devices become under Dynamic
// Resource Allocation (resource.k8s.io/v1).
//
// - Its ListSink: each list the module instance publishes becomes the
//   ResourceSlices of one pool (the node's name), written to the API
//   server on the driver's own thread ("dra:slices"), the pool generation
//   bumped with each change. The first sync lists what is there (spec.nodeName
//   and spec.driver) and replaces or deletes it, so slices an earlier
//   devplugd left are taken over; Stop deletes them all.
// - NodePrepareResources: for each claim, read it from the API server,
//   check its UID, take this driver's allocation results (pool = this node),
//   run the module's allocate() per device and pre_start() where it has
//   one, write a CDI spec for the claim (one CDI device per allocated
//   device) and return the CDI names. A claim already prepared answers the
//   same again. NodeUnprepareResources runs on_release() (the scrub),
//   removes the spec and forgets the claim. Prepared claims are kept in a
//   checkpoint: a restart remembers them and writes again the specs a
//   reboot removed from tmpfs.
//
// Prepare and Unprepare calls run one at a time on "dra:calls", in order.
//
// Thread safety: thread-safe. Publish runs on the module's worker, the
// kubelet's calls arrive on gRPC threads, the rest from the agent's main
// thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dra/checkpoint.h"
#include "dra/claim_results.h"
#include "kube/client.h"
#include "model/cdi_names.h"
#include "model/device.h"
#include "model/rpc.h"
#include "modules/hooks.h"
#include "modules/lane.h"
#include "modules/module_instance.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug::dra {

// A claim as the kubelet names it.

// One claim's answer: its devices, or why it failed.
struct PrepareResult {
  std::vector<PreparedDevice> devices;
  std::string error;  // "": prepared
};

class Driver final : public modules::ListSink {
 public:
  struct Options {
    std::string resource;  // for messages
    std::string driver;    // the DRA driver name
    std::string node;      // this node: spec.nodeName, and the pool's name
    std::string cdi_dir;   // the spec folder, as the runtime sees it
    std::string host_root;
    std::string checkpoint;  // the prepared claims' file
    std::chrono::milliseconds call_timeout{10'000};
    std::chrono::milliseconds prestart_timeout{28'000};
    // The API server; null: no slices are published, and prepare fails.
    std::shared_ptr<kube::Client> client;
    // After a failed sync, the next try waits this long, doubled up to 30 s.
    std::chrono::milliseconds retry{500};
    // The module has on_release(): an unprepare while no instance runs
    // fails and keeps the claim, rather than forget a release.
    bool module_releases = false;
    // The exit's delete of this node's slices waits no longer than this.
    std::chrono::milliseconds stop_timeout{800};
    // How often the slices are listed again after a good sync, so that one
    // deleted or changed behind devplugd's back is written again; shifted
    // by up to ±20% per node and driver, so that agents started together
    // do not list in step. 0: never (a registration still re-lists).
    std::chrono::milliseconds relist{300'000};
    // Told of every call: OK when every claim in it succeeded, else UNKNOWN
    // (the kubelet reads each claim's error); null: nobody counts.
    std::function<void(Rpc, StatusCode, std::chrono::nanoseconds)> observe;
  };

  // Loads the checkpoint (DATA_LOSS names a damaged one) and writes again
  // the CDI specs of its claims that are missing; starts the threads.
  static StatusOr<std::unique_ptr<Driver>> Make(Options options);
  ~Driver() override;
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // The module instance the kubelet's calls go to (null: none runs now).
  void SetInstance(modules::ModuleInstance* instance);
  // `instance` stops: the calls no longer go to it (a successor's stays).
  void ClearInstance(const modules::ModuleInstance* instance);

  // ListSink: every list is served (a slice holds any number of devices).
  std::string Accept(const DeviceList&) override { return ""; }
  void Publish(const DeviceListPtr& list) override;

  // Lists this node's slices of the driver again and writes what is missing
  // or not as published: the kubelet deletes every slice of its node when
  // it starts, before it probes the plugins again (call it when a
  // registration is confirmed).
  void Resync();

  // The kubelet's calls; `done` runs once, on "dra:calls", with an answer
  // per claim UID.
  void Prepare(std::vector<ClaimRef> claims,
               std::function<void(std::map<std::string, PrepareResult>)> done);
  void Unprepare(std::vector<ClaimRef> claims,
                 std::function<void(std::map<std::string, std::string>)> done);

  // Ends both threads; with `delete_slices`, deletes this node's slices of
  // this driver first (the agent exits: nothing serves them any more),
  // within stop_timeout. False when a call still ran at the deadline
  // (call_timeout): its thread is abandoned, and the driver must then be
  // leaked, not destroyed.
  [[nodiscard]] bool Stop(bool delete_slices);
  // The same in two steps, so that many drivers stop at once under one
  // deadline: RequestStop queues the end (calls already queued still run),
  // WaitStopped waits for it (false as above; it stays false).
  void RequestStop(bool delete_slices);
  [[nodiscard]] bool WaitStopped(std::chrono::steady_clock::time_point deadline);

  // Which claim holds each module device on this node: one prepared, or
  // being prepared (from before its first module call until its answer).
  // Shared with pod_of() of the resource's module (which must not hold the
  // driver itself); thread-safe.
  class Holders {
   public:
    std::optional<ClaimRef> Of(const std::string& id) const;
    void Set(std::map<std::string, ClaimRef> by_id);

   private:
    mutable Mutex mu_;
    std::map<std::string, ClaimRef> by_id_ DEVPLUG_GUARDED_BY(mu_);
  };
  std::shared_ptr<const Holders> holders() const { return holders_; }
  std::optional<ClaimRef> ClaimOf(const std::string& id) const { return holders_->Of(id); }

  // ---- status and tests ----
  const Options& options() const { return options_; }
  // Where the claims' CDI specs are written: cdi_dir under host_root.
  std::string Dir() const;
  std::vector<PreparedClaim> prepared() const;
  // Syncs done (every slice as wanted), and the last sync error ("": none).
  uint64_t syncs() const;
  std::string sync_error() const;
  int64_t generation() const;

 private:
  explicit Driver(Options options, Checkpoint checkpoint, cdi::Kind kind);
  void SyncOnLane();
  // When the next periodic re-list is due, from now.
  std::chrono::steady_clock::time_point NextRelist() const;
  Status Sync(const DeviceList& list, int64_t generation);
  PrepareResult PrepareOne(const ClaimRef& claim);
  std::string UnprepareOne(const ClaimRef& claim);
  // The claim's allocation results for this driver, as (request, device).
  StatusOr<std::vector<std::pair<std::string, std::string>>> Results(const ClaimRef& claim);
  modules::ModuleInstance* instance() const;
  // The prepared claim other than `except` that holds module device `id`
  // (null: none). The pointer is valid on "dra:calls" until that thread
  // changes the checkpoint.
  const PreparedClaim* HolderOf(const std::string& id, const std::string& except) const;
  // A prepare failed after the module set up `ids`: on_release() them now
  // (where the module tracks releases), waited for up to prestart_timeout.
  void ReleaseSetUp(modules::ModuleInstance* inst, const ClaimRef& claim,
                    const std::vector<std::string>& ids);

  const Options options_;
  const cdi::Kind kind_;
  modules::Lane slices_;
  modules::Lane calls_;

  mutable Mutex mu_;
  modules::ModuleInstance* instance_ DEVPLUG_GUARDED_BY(mu_) = nullptr;
  DeviceListPtr list_ DEVPLUG_GUARDED_BY(mu_);      // the last published
  int64_t generation_ DEVPLUG_GUARDED_BY(mu_) = 0;  // lists published
  // Added to generation_: past the generation of slices found on the server.
  int64_t generation_base_ DEVPLUG_GUARDED_BY(mu_) = 0;
  bool sync_queued_ DEVPLUG_GUARDED_BY(mu_) = false;
  bool relist_ DEVPLUG_GUARDED_BY(mu_) = false;  // Resync asked: list before the next sync
  // Module device ID -> the claim PrepareOne is setting it up for.
  std::map<std::string, ClaimRef> preparing_ DEVPLUG_GUARDED_BY(mu_);
  // Claims whose devices on_release() is releasing: no longer their holders
  // (a module's release asks pod_of() whether anyone still holds a device;
  // macvtap keeps a held link).
  std::set<std::string> releasing_ DEVPLUG_GUARDED_BY(mu_);
  const std::shared_ptr<Holders> holders_ = std::make_shared<Holders>();
  // Writes holders_ anew from preparing_ and the checkpoint.
  void UpdateHoldersLocked() DEVPLUG_REQUIRES(mu_);
  bool stopping_ DEVPLUG_GUARDED_BY(mu_) = false;
  uint64_t syncs_ DEVPLUG_GUARDED_BY(mu_) = 0;
  std::string sync_error_ DEVPLUG_GUARDED_BY(mu_);
  Checkpoint checkpoint_ DEVPLUG_GUARDED_BY(mu_);

  // "dra:slices" only: the slices on the server, by name, with their
  // resourceVersion; listed_ false: list them again before the next write.
  bool listed_ = false;
  bool ever_listed_ = false;
  std::map<std::string, std::string> versions_;
  std::map<std::string, nlohmann::json> written_;  // their spec, as last written
  std::chrono::milliseconds backoff_{0};
  bool abandoned_ = false;  // WaitStopped left a thread running (owner thread only)
};

}  // namespace devplug::dra
