// The front end of a resource, for the API it serves (`context.cfg.api`).
#pragma once

#include <memory>

#include "config/config.h"
#include "front_end/front_end.h"

namespace devplug::front_end {

// `running`: the running configuration.
std::unique_ptr<FrontEnd> Make(const config::AgentConfig& running, Context context);

}  // namespace devplug::front_end
