// The front end of a resource, for the API it serves (`context.cfg.api`).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "front_end/front_end.h"
#include "util/status.h"

namespace devplug::front_end {

// `running`: the running configuration.
std::unique_ptr<FrontEnd> Make(const config::AgentConfig& running, Context context);

// The claims ("ns/name (uid)") this node's checkpoint of DRA resource
// `dra` still holds: an earlier devplugd prepared them, and the resource
// is served through the device plugin API now. None when the file is not
// there; an error when it cannot be read.
StatusOr<std::vector<std::string>> LeftClaims(const config::AgentConfig& running,
                                              const config::ResourceConfig& dra);

}  // namespace devplug::front_end
