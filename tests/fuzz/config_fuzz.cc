// libFuzzer target: the configuration loader. Any input ends in a config or
// an error that names a location; nothing crashes, throws or hangs, and an
// accepted config holds only valid names and sockets.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  devplug::config::LoadOptions options;
  options.default_module_dir = "/usr/lib/devplug/modules";
  auto cfg = devplug::config::LoadString(text, "fuzz.toml", options);
  if (!cfg.ok()) {
    if (cfg.status().message().rfind("fuzz.toml", 0) != 0) std::abort();  // no location
    return 0;
  }
  for (const auto& r : cfg->resources) {
    if (!devplug::config::CheckResourceName(r.name).empty()) std::abort();
    if (!devplug::config::CheckSocketName(r.socket, cfg->plugin_dir).empty()) std::abort();
  }
  return 0;
}
