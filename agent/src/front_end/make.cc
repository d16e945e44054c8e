#include "front_end/make.h"

#include <utility>

#include "device_plugin/front_end.h"
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

}  // namespace devplug::front_end
