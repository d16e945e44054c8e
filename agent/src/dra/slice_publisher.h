// One DRA resource's ResourceSlices: each list the module instance
// publishes becomes the slices of one pool (the node's name), at most 128
// devices each, written to the API server on the publisher's own thread
// ("dra:slices").
//
// - An Unhealthy device stays in its slice with a taint (resource_slice.h)
//   whose timeAdded is kept while it stays Unhealthy, across republishing
//   and restarts; 64 devices per slice then, as the API requires.
// - Only slices whose content changed are written. The pool's generation
//   is raised when its set of slices changes or a device moves from one
//   slice to another (so that the scheduler never takes a pool half
//   rewritten, with a device in two slices, for whole); a device that
//   comes, goes or changes within its slice keeps it.
// - A field the API server dropped from what was written (one it does not
//   know: an older Kubernetes, a feature gate off) is logged once, and
//   listed by dropped_fields().
// - The first sync lists what is there (spec.nodeName and spec.driver) and
//   replaces or deletes it, so slices an earlier devplugd left are taken
//   over. A pool left whole (one generation, every slice there, no device
//   twice) keeps its generation, and its slices that already hold what we
//   would write are not written: a restarted fleet costs the API server
//   one LIST per resource and node. A pool left half written gets a newer
//   generation. A slice whose resourceVersion is still the one our write
//   got is not written again.
// - The kubelet deletes every slice of its node when it starts:
//   KubeletRegistered (at each confirmed registration) and a periodic
//   re-list write back what is missing or changed.
// - Awaiting the registration (await_registration: a kubelet runs on the
//   node), the first write waits for KubeletRegistered: the kubelet
//   refuses to prepare a claim for a driver it has not registered yet, so
//   a pod the scheduler sent on a slice written before would fail
//   (FailedPrepareDynamicResources) and wait for the kubelet's retry.
// - A failed sync is retried with backoff (retry, doubled up to 30 s);
//   sync_error() says why for `devplugctl status`.
// - RequestStop with delete_slices deletes this node's slices of the
//   driver (the agent exits: nothing serves them any more), bounded by
//   stop_timeout.
// - Superseded (a newer devplugd serves the driver beside this one), it
//   writes nothing: two writers of one pool would raise its generation in
//   turn.
// - Held (hold_for: a reload moved the resource from the device plugin API
//   to DRA), the first write waits until the Node's allocatable for that
//   extended resource reads 0, so that the scheduler never sees both APIs
//   offer the name on this node (it takes the device plugin's path while
//   allocatable is above 0): the kubelet drops it when the device plugin's
//   endpoint goes and posts it within its node-status period. While it
//   reads above 0, the publisher sets it to 0 itself: the hand-off did so
//   before the move, but a status post the kubelet made while the device
//   plugin still served can land after it and bring the number back. Where
//   the Node's status cannot be written, it waits for the kubelet's post. A
//   Node that cannot be read, or hold_max, ends the wait (said in the log).
// - Withheld devices (SetWithheld: pods hold them through the device plugin
//   API, from before a move to DRA) are left out of the slices until they
//   are withheld no more. With await_withheld (a DRA resource at the
//   agent's start), nothing is written before the first SetWithheld.
//
// Thread safety: thread-safe. Publish runs on the module's worker, the rest
// from the agent's main thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kube/client.h"
#include "model/device.h"
#include "modules/hooks.h"
#include "modules/lane.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug::dra {

class SlicePublisher final : public modules::ListSink {
 public:
  struct Options {
    std::string resource;  // for messages
    std::string driver;    // the DRA driver name
    std::string node;      // spec.nodeName, and the pool's name
    // The API server; null: nothing is published.
    std::shared_ptr<kube::Client> client;
    // After a failed sync, the next try waits this long, doubled up to 30 s.
    std::chrono::milliseconds retry{500};
    // The exit's delete of this node's slices waits no longer than this.
    std::chrono::milliseconds stop_timeout{500};
    // How often the slices are listed again after a good sync, so that one
    // deleted or changed behind devplugd's back is written again; shifted
    // by up to ±20% per node and driver, so that agents started together
    // do not list in step. 0: never (a registration still re-lists).
    std::chrono::milliseconds relist{300'000};
    // The effect of an Unhealthy device's taint (resource_slice.h).
    std::string taint_effect = "NoSchedule";
    // The extended resource whose allocatable on the Node must read 0
    // before the first write ("": no wait); looked at every hold_poll, for
    // at most hold_max.
    std::string hold_for;
    std::chrono::milliseconds hold_poll{1000};
    std::chrono::milliseconds hold_max{60'000};
    // The first write waits for SetWithheld: who holds devices through the
    // device plugin API is asked first.
    bool await_withheld = false;
    // The first write waits for KubeletRegistered.
    bool await_registration = false;
  };

  explicit SlicePublisher(Options options);
  ~SlicePublisher() override;
  SlicePublisher(const SlicePublisher&) = delete;
  SlicePublisher& operator=(const SlicePublisher&) = delete;

  // Starts the thread.
  void Start();

  // ListSink: every list is served (a slice holds any number of devices).
  std::string Accept(const DeviceList&) override { return ""; }
  void Publish(const DeviceListPtr& list) override;
  // A reload changed the taint's effect: the slices are written again.
  void SetTaintEffect(const std::string& effect);
  // The module devices (IDs) left out of the slices from now on; the
  // slices are written again when that changes.
  void SetWithheld(std::set<std::string> ids);
  std::set<std::string> withheld() const;
  // The kubelet confirmed the driver's registration: the first write
  // waits no more, and this node's slices of the driver are listed again
  // and what is missing or not as published is written (the kubelet
  // deletes them when it starts).
  void KubeletRegistered();
  // A newer devplugd serves this driver beside this one (a rolling
  // update): it owns the pool, and this one writes nothing while it does.
  // Off again (the newer one went first: a rollback), this one lists the
  // pool and writes what differs.
  void SetSuperseded(bool superseded);

  // Queues the end (with `delete_slices`, the delete of this node's slices
  // first); WaitStopped waits for it (false: the thread still ran at the
  // deadline and is left to itself; the publisher must then be leaked).
  void RequestStop(bool delete_slices);
  [[nodiscard]] bool WaitStopped(std::chrono::steady_clock::time_point deadline);

  // Syncs done (every slice as wanted), and the last sync error ("": none).
  uint64_t syncs() const;
  std::string sync_error() const;
  int64_t generation() const;
  // Fields of our slices the API server dropped ("spec.devices[].capacity").
  std::vector<std::string> dropped_fields() const;

 private:
  using Json = nlohmann::json;
  void SyncOnLane();
  // When the next periodic re-list is due, from now.
  std::chrono::steady_clock::time_point NextRelist() const;
  Status Sync(const DeviceList& list);
  // The slices for `list` at the pool's generation, raised first when the
  // slices, or a device's slice, would differ from those written.
  std::vector<Json> Layout(const DeviceList& list);
  // Held (Options::hold_for): reads the Node; true once the wait is over,
  // else the next look is queued.
  bool HoldOver();
  // Logs (once each) the fields of `sent` that `stored` lacks.
  void CheckDropped(const std::string& name, const Json& sent, const Json& stored);

  const Options options_;
  modules::Lane lane_;

  mutable Mutex mu_;
  DeviceListPtr list_ DEVPLUG_GUARDED_BY(mu_);  // the last published
  // The pool's generation: raised by Sync (see above), and past the
  // generation of the slices found on the server at the first list.
  int64_t generation_ DEVPLUG_GUARDED_BY(mu_) = 1;
  std::set<std::string> dropped_ DEVPLUG_GUARDED_BY(mu_);
  std::string taint_effect_ DEVPLUG_GUARDED_BY(mu_);
  std::set<std::string> withheld_ DEVPLUG_GUARDED_BY(mu_);
  bool awaiting_withheld_ DEVPLUG_GUARDED_BY(mu_);  // Options::await_withheld, until SetWithheld
  // Options::await_registration, until KubeletRegistered.
  bool awaiting_registration_ DEVPLUG_GUARDED_BY(mu_);
  bool sync_queued_ DEVPLUG_GUARDED_BY(mu_) = false;
  bool relist_ DEVPLUG_GUARDED_BY(mu_) = false;  // list before the next sync
  bool stopping_ DEVPLUG_GUARDED_BY(mu_) = false;
  bool superseded_ DEVPLUG_GUARDED_BY(mu_) = false;
  uint64_t syncs_ DEVPLUG_GUARDED_BY(mu_) = 0;
  std::string sync_error_ DEVPLUG_GUARDED_BY(mu_);

  // "dra:slices" only: the slices on the server, by name, with their
  // resourceVersion; listed_ false: list them again before the next write.
  bool listed_ = false;
  bool ever_listed_ = false;
  std::map<std::string, std::string> versions_;
  std::map<std::string, Json> written_;  // their spec, as last written
  // When each device now Unhealthy was first seen so (its taint's
  // timeAdded, kept while it stays Unhealthy), by DRA name.
  std::map<std::string, std::string> tainted_since_;
  std::chrono::milliseconds backoff_{0};
  bool held_ = false;  // Options::hold_for, until HoldOver
  std::optional<std::chrono::steady_clock::time_point> held_since_;
  bool zero_refused_ = false;  // the Node's status cannot be written: wait for the kubelet
  // Spreads the retry waits (Jittered): seeded per process, node and driver.
  std::minstd_rand jitter_;
};

}  // namespace devplug::dra
