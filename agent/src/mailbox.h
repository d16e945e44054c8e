// How other threads reach the agent's main loop: events posted to a
// Mailbox, and an eventfd that wakes the loop.
//
// Thread safety: Post from any thread; Drain and Close from the main loop.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kubelet/pod_resources.h"
#include "ops/control.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug {

// What another thread tells the main loop.
struct AgentEvent {
  enum Kind {
    kCreated,         // number: launch
    kRegisterDone,    // number: registration
    kStreamEnded,     // number: registration
    kProbed,          // number: registration (plugin watcher's GetInfo)
    kKubeletStatus,   // status: the plugin watcher's NotifyRegistrationStatus
    kTrackerChanged,  // an Allocate or a release moved a device
    kPodList,         // a PodResources List finished (resource unused)
    kReloadHolders,   // the List a reload waits for finished (resource unused)
    kControl,         // a control socket request (resource unused)
    kNodeLabel,       // label: the Node's api_label, as the watch saw it (resource unused)
    kReloadHandoff,   // the hand-off a move to DRA waits for ended (api_handoff.h): status,
                      // pods (its last List), number: the ms it took, resource: the pods
                      // it waited for
    kDrainHandoff,    // a draining DRA side's hand-off ended (resource: its id): status,
                      // number: the ms it took
  } kind;
  uint64_t resource;  // Resource::id
  uint64_t number;
  Status status;
  kubelet::PodSnapshotPtr pods;                         // kPodList, kReloadHolders, when it worked
  std::shared_ptr<ops::ControlCall> control = nullptr;  // kControl
  std::optional<std::string> label = std::nullopt;      // kNodeLabel (nullopt: no such label)
};

// Where other threads post events; an eventfd wakes the main loop. Shared
// with every callback, so one that runs after the agent is gone (a given-up
// module finishing create() at last) finds it closed.
class Mailbox {
 public:
  Mailbox();
  ~Mailbox();
  int fd() const { return fd_; }
  void Post(AgentEvent ev);
  std::vector<AgentEvent> Drain();
  void Close();

 private:
  int fd_ = -1;
  Mutex mu_;
  std::vector<AgentEvent> events_ DEVPLUG_GUARDED_BY(mu_);
  bool closed_ DEVPLUG_GUARDED_BY(mu_) = false;
};

}  // namespace devplug
