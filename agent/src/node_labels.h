// api = "node-label" (config/config.h): a resource whose API this node's
// label [agent] api_label chooses. The Node is read once per load (at
// start and at every reload), with the API server credentials DRA uses,
// and watched between loads (NodeLabelWatch): a changed label starts a
// reload, which moves the resource between the APIs as an edit of its
// `api` would.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "config/config.h"
#include "kube/client.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug {

// The labels of cfg.node_name's Node.
StatusOr<std::map<std::string, std::string>> ReadNodeLabels(const config::AgentConfig& cfg);

// Loads with `load`; when a resource takes its API from the label, reads
// the Node and loads again with its labels. A Node that cannot be read:
// with `must_read` (a reload) the load fails, so what runs stays; without
// it (a start) those resources serve the device plugin API, and the note
// says why.
using Loader = std::function<StatusOr<config::AgentConfig>(const config::LoadOptions&)>;
StatusOr<config::AgentConfig> LoadWithNodeLabels(const Loader& load, config::LoadOptions options,
                                                 bool must_read);

// Watches one Node's label on a thread of its own: one list of that Node
// alone (fieldSelector=metadata.name), then a watch of it from the list's
// resourceVersion, resumed from the last version it saw, each lasting
// `watch_timeout` to twice that (so that a fleet's watches do not end in
// step). A 410 (the version is too old) starts again from a list. Errors are retried after a capped
// exponential backoff with jitter, at least a 429's Retry-After.
//
// `seen` hears the label's value (nullopt: the Node has no such label)
// after the list and after every change of the Node, whether the label
// changed or not: whoever listens compares it with what runs, so a move
// refused once is tried again at the Node's next change. A deleted Node is
// not heard of (it has no label to tell).
//
// Thread safety: thread-safe; `seen` runs on the watch's thread.
class NodeLabelWatch {
 public:
  struct Options {
    kube::Credentials credentials;
    std::string node;
    std::string label;
    std::chrono::milliseconds call_timeout{10'000};
    std::chrono::seconds watch_timeout{300};
    std::chrono::milliseconds backoff_first{1'000};
    std::chrono::milliseconds backoff_max{300'000};
    bool operator==(const Options&) const = default;
  };
  using Seen = std::function<void(const std::optional<std::string>& value)>;
  NodeLabelWatch(Options options, Seen seen);
  // Stops it: a watch ends at once; a list in flight ends within
  // call_timeout.
  ~NodeLabelWatch();
  NodeLabelWatch(const NodeLabelWatch&) = delete;
  NodeLabelWatch& operator=(const NodeLabelWatch&) = delete;

  const Options& options() const { return options_; }
  // Asks it to stop without waiting (the destructor waits).
  void Cancel();

 private:
  void Run();
  // Sleeps `d` unless cancelled first (false then).
  bool Sleep(std::chrono::milliseconds d) DEVPLUG_EXCLUDES(mu_);

  const Options options_;
  const Seen seen_;
  kube::WatchCancel cancel_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool stop_ DEVPLUG_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The watch `cfg` asks for (a resource with api = "node-label"), or
// nullopt: none is needed, or no credentials (`why` says).
std::optional<NodeLabelWatch::Options> NodeLabelWatchOptions(const config::AgentConfig& cfg,
                                                             std::string* why);

}  // namespace devplug
