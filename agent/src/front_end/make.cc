#include "front_end/make.h"

#include <utility>

#include "device_plugin/front_end.h"
#include "dra/checkpoint.h"
#include "dra/front_end.h"

namespace devplug::front_end {

std::unique_ptr<FrontEnd> Make(const config::AgentConfig& running, Context context) {
  switch (context.cfg.api) {
    case ServingApi::kDra:
      return std::make_unique<dra::FrontEnd>(std::move(context));
    case ServingApi::kDevicePlugin:
      break;
  }
  return std::make_unique<device_plugin::FrontEnd>(running, std::move(context));
}

StatusOr<std::vector<std::string>> LeftClaims(const config::AgentConfig& running,
                                              const config::ResourceConfig& dra) {
  auto checkpoint =
      dra::Checkpoint::Load(dra::FrontEnd::CheckpointPath(running, dra), running.node_name);
  if (!checkpoint.ok()) return checkpoint.status();
  std::vector<std::string> out;
  for (const auto& [uid, c] : checkpoint->claims())
    out.push_back(StrCat(c.ns, "/", c.name, " (", uid, ")"));
  return out;
}

}  // namespace devplug::front_end
