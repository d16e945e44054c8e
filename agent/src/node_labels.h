// api = "node-label" (config/config.h): a resource whose API this node's
// label [agent] api_label chooses. The Node is read once per load (at
// start and at every reload), with the API server credentials DRA uses; a
// label changed later takes effect at the next reload, which moves the
// resource between the APIs as an edit of its `api` would.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "config/config.h"
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

}  // namespace devplug
