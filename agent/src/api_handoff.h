// The hand-offs of a move between the APIs on this node, so that no pod
// the scheduler sent through the old API fails: DevicePluginHandoff before
// a move to DRA, DraHandoff after a move to the device plugin API.
//
// DevicePluginHandoff, the last step of a move from the device plugin API
// to DRA, before the device plugin's socket goes: closes the scheduler's
// device plugin path for the names that move on this node, then waits for
// the pods it sent there already to be admitted, so that none is refused
// at admission.
//
// The scheduler takes a pod's `limits: {<name>: n}` through the device
// plugin while the Node's allocatable for the name is above 0, and through
// DRA (a DeviceClass's extendedResourceName) at 0. The kubelet posts that
// number once per node-status period (10 s by default) after the device
// plugin's endpoint goes: a pod it is sent meanwhile finds no device and
// fails admission (UnexpectedAdmissionError). So, on a thread of its own:
//   1. the Node's status.allocatable for each name is set to "0" (an update
//      of nodes/<node>/status, resourceVersion checked, conflicts retried):
//      the scheduler stops sending device plugin pods at its next event;
//   2. after `settle` (a scheduling cycle the update did not reach yet
//      binds within it), every pod bound to this node that asks a name
//      through the device plugin (not through a claim the scheduler made)
//      and is not finished must be listed by PodResources with a device of
//      it (the kubelet admitted it: Allocate ran). Until then it polls,
//      and sets the allocatable to "0" again if the kubelet's status
//      update put it back (it does while the device plugin still serves);
//   3. done, with the last PodResources List: who holds what, for the DRA
//      side to withhold.
// `max_wait` ends the wait with the pods still waited for named. A Node
// that cannot be written (no RBAC for nodes/status, refused by the
// admission policy) ends it at once: the move goes on as before, and
// the log says the window stays open. An error that passes (429, a 5xx,
// no answer, conflicts past the client's retries) is asked again at the
// next poll, and only once a write got through does the wait for the pods
// begin.
//
// DraHandoff, after a move from DRA to the device plugin API: the DRA
// side's slices are deleted at the commit, and the scheduler allocates no
// more from them, but a claim it allocated just before may reach the
// kubelet later; refused, its pod would never start. So the draining DRA
// side keeps preparing new claims, and the device plugin does not
// register, until, `settle` after the slices went, no pod bound to this
// node (not finished, not being deleted) has a claim allocated from this
// node's pool of the driver that is not prepared (its claims: the pod's
// resourceClaimStatuses and direct resourceClaimName references, and the
// claim the scheduler made for its extended resources; each one not
// prepared is read). Then `close` refuses new claims on the preparer's
// own threads, after every prepare already asked for (see
// dra::ClaimPreparer::CloseDrain), and it is done: what the DRA side
// holds is complete, and the device plugin may register with those
// devices Unhealthy. `max_wait` ends the wait as well, naming the claims.
//
// Thread safety: thread-safe; `done` runs once, on the hand-off's thread
// (not after the destructor began).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kube/client.h"
#include "kubelet/pod_resources.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug {

// Sets `node`'s status.allocatable of each of `names` that reads above 0
// to "0"; returns "name (was N)" for each one changed.
std::vector<std::string> ZeroAllocatable(nlohmann::json& node,
                                         const std::vector<std::string>& names);

// "ns/name" of each pod of `pods` (a PodList) that is not finished nor
// being deleted and whose containers (init containers too) ask one of
// `names` through the device plugin API: the name is in their limits or
// requests and the scheduler mapped no claim to it
// (status.extendedResourceClaimStatus).
std::set<std::string> AskingDevicePlugin(const nlohmann::json& pods,
                                         const std::vector<std::string>& names);

// "ns/name" of each pod that `snapshot` lists holding a device of one of
// `names`.
std::set<std::string> HoldingDevices(const PodSnapshot& snapshot,
                                     const std::vector<std::string>& names);

// "ns/name" of every claim of the unfinished pods of `pods` (a PodList)
// that is not in `prepared` ("ns/name").
std::set<std::string> UnpreparedClaims(const nlohmann::json& pods,
                                       const std::set<std::string>& prepared);

// Whether `claim` (a ResourceClaim) is allocated a device of `driver` from
// pool `pool`.
bool AllocatedFrom(const nlohmann::json& claim, const std::string& driver, const std::string& pool);

// What both hand-offs share: a thread of their own, which Stop (each
// destructor's first step) ends at once from its next sleep and joins
// (a call in flight ends within its call_timeout), and how they end.
class HandoffThread {
 public:
  using Clock = std::chrono::steady_clock;
  HandoffThread(const HandoffThread&) = delete;
  HandoffThread& operator=(const HandoffThread&) = delete;

  struct Ended {
    Status status;
    std::chrono::milliseconds took{0};
  };

 protected:
  HandoffThread() = default;
  ~HandoffThread() = default;
  void Begin(std::function<void()> run);
  void Stop() DEVPLUG_EXCLUDES(mu_);
  // Sleeps `d` unless stopped first (false then).
  bool Sleep(std::chrono::milliseconds d) DEVPLUG_EXCLUDES(mu_);
  bool Stopped() DEVPLUG_EXCLUDES(mu_);
  // `r` ended with `st`, `start` ago.
  template <typename R>
  static R Finish(R r, Status st, Clock::time_point start) {
    r.status = std::move(st);
    r.took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    return r;
  }

 private:
  Mutex mu_;
  std::condition_variable_any cv_;
  bool stop_ DEVPLUG_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class DevicePluginHandoff final : private HandoffThread {
 public:
  struct Options {
    kube::Credentials credentials;
    std::string node;
    std::vector<std::string> names;  // the extended resources that move
    std::chrono::milliseconds call_timeout{10'000};
    std::chrono::milliseconds settle{1'000};
    std::chrono::milliseconds poll{200};
    std::chrono::milliseconds max_wait{30'000};
  };
  // status OK: every pod the device plugin was sent is admitted. Otherwise
  // why not (the Node could not be written, max_wait passed).
  struct Result : Ended {
    // The last PodResources List (null when none answered).
    kubelet::PodSnapshotPtr pods;
    int admitted_waited = 0;  // pods it waited for that the kubelet admitted
  };
  using Done = std::function<void(Result)>;

  DevicePluginHandoff(Options options, std::shared_ptr<kubelet::PodResourcesClient> pods,
                      Done done);
  ~DevicePluginHandoff();  // cancels, and waits for a call in flight (call_timeout)

  const Options& options() const { return options_; }

 private:
  Result Hand();

  const Options options_;
  const std::shared_ptr<kubelet::PodResourcesClient> pods_;
  const Done done_;
};

class DraHandoff final : private HandoffThread {
 public:
  struct Options {
    kube::Credentials credentials;
    std::string node;      // and the pool's name
    std::string driver;    // the DRA driver that drains
    std::string resource;  // for the log
    std::chrono::milliseconds call_timeout{10'000};
    std::chrono::milliseconds settle{1'000};
    std::chrono::milliseconds poll{200};
    std::chrono::milliseconds max_wait{30'000};
  };
  // status OK, or why it stopped waiting (the preparer closed anyway).
  struct Result : Ended {
    int prepared_waited = 0;  // claims it waited for that were prepared
  };
  using Done = std::function<void(Result)>;
  // "ns/name" of the claims the draining side holds; thread-safe.
  using Prepared = std::function<std::set<std::string>()>;
  // Refuses new claims, then runs its argument (on another thread).
  using Close = std::function<void(std::function<void()>)>;

  DraHandoff(Options options, Prepared prepared, Close close, Done done);
  ~DraHandoff();  // cancels, and waits for a call in flight (call_timeout)

  const Options& options() const { return options_; }

 private:
  void Run();
  Result Wait();

  const Options options_;
  const Prepared prepared_;
  const Close close_;
  const Done done_;
};

}  // namespace devplug
