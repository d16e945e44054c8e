// One DRA resource's claims on this node: NodePrepareResources and
// NodeUnprepareResources over the resource's DeviceSource (the front ends'
// seam, modules/device_source.h), with the checkpoint and each claim's CDI
// spec.
//
// - Prepare: the claim is read from the API server first ("dra:claims",
//   its UID and this node's allocation results checked), then, one claim
//   at a time in the order the kubelet sent them ("dra:calls"): one
//   allocate() per request for all of its devices, pre_start() where the
//   module has one, a CDI spec for the claim (a CDI device per request)
//   and the checkpoint. A claim already prepared answers the same again.
// - Unprepare: on_release() (the scrub), the spec removed, the claim
//   forgotten.
// - Claim status: after a prepare, the claim's status.devices says, for
//   each device this driver gave it, that it is Ready, and what the module
//   set up (`data`); after an unprepare, its entries go. Written on
//   "dra:claims", after the kubelet has its answer: a slow API server never
//   delays a pod's start, and a failed write is logged, not the claim's
//   failure.
// - Every module call has a deadline (modules/module_call.h) and never
//   runs after it; a call waits no longer than the kubelet's own deadline
//   for its answer (`until`).
// - What a prepare set up before it failed is released (on_release()).
//   A release that outlives the call that began it (the kubelet gave up
//   waiting) is remembered per claim: the kubelet's retry waits for that
//   one and answers from it, never starts another; a retried prepare of
//   the claim, or of its devices, waits until it is done. on_release()
//   runs once per set-up.
// - Device metadata (dra/device_metadata.h): a file per request, mounted
//   through the request's CDI device, removed at unprepare.
// - A reboot empties /var/run/cdi: Make writes again the specs and
//   metadata files of the checkpoint's claims.
// - Two devplugd serve the node during a rolling update, with one state
//   folder: each call, and Make, takes its turn on `<checkpoint>.lock`
//   and reads the checkpoint again when the other one wrote it, so either
//   one unprepares what the other prepared, and neither acts on a claim
//   the other is busy with.
//
// Thread safety: thread-safe; the kubelet's calls arrive on gRPC threads,
// the rest from the agent's main thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dra/checkpoint.h"
#include "dra/claim_results.h"
#include "dra/pending_release.h"
#include "kube/client.h"
#include "model/cdi_names.h"
#include "model/rpc.h"
#include "modules/device_source.h"
#include "modules/lane.h"
#include "util/file_lock.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug::dra {

// One claim's answer: its devices, or why it failed.
struct PrepareResult {
  std::vector<PreparedDevice> devices;
  std::string error;  // "": prepared
};

class ClaimPreparer {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::string resource;  // for messages
    std::string driver;    // the DRA driver name
    std::string node;      // this node: the pool's name
    std::string cdi_dir;   // the spec folder, as the runtime sees it
    std::string host_root;
    std::string checkpoint;  // the prepared claims' file
    // Each allocate() (and pre_start()) answers within this, or the claim
    // fails.
    std::chrono::milliseconds call_timeout{10'000};
    std::chrono::milliseconds prestart_timeout{28'000};
    // The API server; null: prepare fails.
    std::shared_ptr<kube::Client> client;
    // The module has on_release(): an unprepare while no instance runs
    // fails and keeps the claim, rather than forget a release.
    bool module_releases = false;
    // Told of every call: OK when every claim in it succeeded, else UNKNOWN
    // (the kubelet reads each claim's error); null: nobody counts.
    std::shared_ptr<RpcObserver> observer;
    // Draining (SetDraining), after each unprepare call that forgot a
    // claim, once the kubelet has its answer ("dra:calls": it must only
    // post).
    std::function<void()> claims_changed;
  };

  // Loads the checkpoint (DATA_LOSS names a damaged one) and writes again
  // the CDI specs of its claims that are missing; Start starts the threads.
  static StatusOr<std::unique_ptr<ClaimPreparer>> Make(Options options);
  ~ClaimPreparer();
  ClaimPreparer(const ClaimPreparer&) = delete;
  ClaimPreparer& operator=(const ClaimPreparer&) = delete;
  void Start();

  // Where the kubelet's calls go (null: no instance runs now).
  void SetSource(modules::DeviceSource* source);
  // `source` stops: the calls no longer go to it (a successor's stays).
  // Once this returns no thread of the preparer calls into it: it may be
  // freed.
  void ClearSource(const modules::DeviceSource* source);

  // The kubelet's calls; `done` runs once, on "dra:calls", with an answer
  // per claim UID, by `until` (the kubelet's deadline) unless a module's
  // thread is stuck in a call without one.
  void Prepare(std::vector<ClaimRef> claims, Clock::time_point until,
               std::function<void(std::map<std::string, PrepareResult>)> done);
  void Unprepare(std::vector<ClaimRef> claims, Clock::time_point until,
                 std::function<void(std::map<std::string, std::string>)> done);

  // Queues the end (calls already queued still run); WaitStopped waits for
  // it (false: a thread still ran at the deadline; the preparer must then
  // be leaked).
  void RequestStop();
  [[nodiscard]] bool WaitStopped(Clock::time_point deadline);
  // The resource moved to the device plugin API and stays only for the
  // claims prepared before (no slice offers its devices any more): each
  // unprepare that forgets a claim is told (Options::claims_changed); a
  // prepared claim is answered again, and unprepared as always. `closed`:
  // a claim not prepared yet is refused from now on; otherwise it is
  // prepared until CloseDrain (a claim allocated from the last slice
  // before the move may reach the kubelet after it).
  void SetDraining(bool closed = true);
  // While draining: refuses claims not prepared yet, once every prepare
  // asked for before this call has ended (it runs after them, on the
  // preparer's threads), and then runs `done` there. Not run if the
  // preparer stops first.
  void CloseDrain(std::function<void()> done);

  // Which claim holds each module device on this node: one prepared, or
  // being prepared (from before its first module call until its answer),
  // and not being released. Shared with pod_of() of the resource's module
  // (which must not hold the preparer itself); thread-safe.
  struct Holder {
    ClaimRef claim;
    std::string device;  // the DRA device it is (one share of)
  };
  class Holders {
   public:
    std::optional<Holder> Of(const std::string& id) const;
    void Set(std::map<std::string, Holder> by_id);

   private:
    mutable Mutex mu_;
    std::map<std::string, Holder> by_id_ DEVPLUG_GUARDED_BY(mu_);
  };
  std::shared_ptr<const Holders> holders() const { return holders_; }

  // ---- status and tests ----
  const Options& options() const { return options_; }
  // Where the claims' CDI specs are written: cdi_dir under host_root.
  std::string Dir() const;
  std::vector<PreparedClaim> prepared() const;
  // Claims with a release still running that a call began and gave up on.
  std::vector<std::string> releasing() const;

 private:
  // What "dra:claims" read for a prepare: the claim's results and the
  // pod's name for it (a template's claim), or why not.
  struct ClaimRead {
    std::vector<ClaimResult> results;
    std::string pod_claim_name;
  };
  using Read = StatusOr<ClaimRead>;

  ClaimPreparer(Options options, Checkpoint checkpoint, cdi::Kind kind);
  // ALREADY_EXISTS, with `unless_prepared`, for a claim the checkpoint
  // holds (no GET).
  Read ReadClaim(const ClaimRef& claim, bool unless_prepared) const;
  PrepareResult PrepareOne(const ClaimRef& claim, Read read, Clock::time_point until);
  std::string UnprepareOne(const ClaimRef& claim, Clock::time_point until);
  // The checkpoint's turn taken (or not) by `turn`: "" when it is this
  // thread's and the checkpoint is read again if another devplugd wrote
  // it, else why every claim of the call fails.
  std::string TurnError(const FileLockHold& turn);
  // Reads the checkpoint again when its file is not the one last read or
  // written here; "" or why it cannot be read.
  std::string RefreshLocked() DEVPLUG_REQUIRES(mu_);
  // A release of `claim` a call gave up on: waited for until `until`.
  // "" when none was pending or it ended well (*released then says whether
  // one did), else why the claim must wait.
  std::string AwaitPending(const ClaimRef& claim, Clock::time_point until, bool* released);
  // Releases `ids` for `claim` (its prepare failed after the module set
  // them up), remembered as pending.
  void ReleaseSetUp(modules::DeviceSource* source, const ClaimRef& claim,
                    const std::vector<std::string>& ids);
  modules::DeviceSource* source() const;
  // Writes `devices`' entries in the claim's status.devices, replacing
  // this driver's (none: removes them); on "dra:claims".
  void PostStatus(const ClaimRef& claim, std::vector<PreparedDevice> devices);
  // Runs `call` (a call into `src` that does not block) unless `src` is no
  // longer the source: ClearSource waits for such calls to end, so that the
  // runtime may free a source once it is cleared. False: not run.
  bool Use(modules::DeviceSource* src, const std::function<void()>& call);
  // The prepared claim other than `except` that holds module device `id`
  // (null: none). Valid on "dra:calls" until that thread changes the
  // checkpoint.
  const PreparedClaim* HolderOf(const std::string& id, const std::string& except) const;
  // Writes holders_ anew from preparing_, pending_ and the checkpoint.
  void UpdateHoldersLocked() DEVPLUG_REQUIRES(mu_);
  // Options::claims_changed, while draining.
  void NotifyDraining();

  const Options options_;
  const cdi::Kind kind_;
  modules::Lane reads_;
  modules::Lane calls_;
  const std::shared_ptr<Holders> holders_ = std::make_shared<Holders>();

  // `<checkpoint>.lock`: whose turn it is, this devplugd's or another's
  // serving the node beside it; taken around each call ("dra:calls" only,
  // and Make before the threads start). Not open: no turns taken.
  FileLock shared_;

  mutable Mutex mu_;
  modules::DeviceSource* source_ DEVPLUG_GUARDED_BY(mu_) = nullptr;
  // Calls into each source under way (Use).
  std::map<const modules::DeviceSource*, int> users_ DEVPLUG_GUARDED_BY(mu_);
  std::condition_variable_any users_cv_;
  Checkpoint checkpoint_ DEVPLUG_GUARDED_BY(mu_);
  // Module device ID -> the claim PrepareOne is setting it up for.
  std::map<std::string, Holder> preparing_ DEVPLUG_GUARDED_BY(mu_);
  // Claim UID -> a release a call gave up waiting for; not a holder of
  // those devices meanwhile (a module's release asks pod_of() whether
  // anyone still holds a device: macvtap keeps a held link).
  std::map<std::string, std::shared_ptr<PendingRelease>> pending_ DEVPLUG_GUARDED_BY(mu_);
  // Claims released whose checkpoint could not be saved: the retry
  // forgets them without a second on_release().
  std::set<std::string> released_ DEVPLUG_GUARDED_BY(mu_);
  bool stopping_ DEVPLUG_GUARDED_BY(mu_) = false;
  bool draining_ DEVPLUG_GUARDED_BY(mu_) = false;  // SetDraining
  bool closed_ DEVPLUG_GUARDED_BY(mu_) = false;    // SetDraining(true), CloseDrain
  bool abandoned_ = false;  // WaitStopped left a thread running (owner thread only)
};

}  // namespace devplug::dra
