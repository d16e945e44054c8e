#include "util/systemd.h"

#include <dlfcn.h>
#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <mutex>

#include <spdlog/spdlog.h>

namespace devplug::sd {
namespace {

struct Lib {
  decltype(&::sd_notify) notify = nullptr;
  decltype(&::sd_watchdog_enabled) watchdog_enabled = nullptr;
};

// libsystemd's entry points, or nulls when systemd does not run us (or the
// library cannot be loaded: said once).
const Lib& Get() {
  static Lib lib;
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("NOTIFY_SOCKET") == nullptr && std::getenv("WATCHDOG_USEC") == nullptr) return;
    void* h = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) {
      lib.notify = reinterpret_cast<decltype(&::sd_notify)>(dlsym(h, "sd_notify"));
      lib.watchdog_enabled =
          reinterpret_cast<decltype(&::sd_watchdog_enabled)>(dlsym(h, "sd_watchdog_enabled"));
    }
    if (lib.notify == nullptr || lib.watchdog_enabled == nullptr) {
      const char* why = dlerror();
      spdlog::warn(
          "systemd runs devplugd, but libsystemd.so.0 cannot be used ({}): no "
          "readiness, status or watchdog notifications",
          why != nullptr ? why : "symbols missing");
      lib = Lib();
    }
  });
  return lib;
}

}  // namespace

void Notify(const std::string& state) {
  if (const Lib& lib = Get(); lib.notify != nullptr) lib.notify(0, state.c_str());
}

std::optional<std::chrono::microseconds> WatchdogInterval() {
  const Lib& lib = Get();
  uint64_t usec = 0;
  if (lib.watchdog_enabled == nullptr || lib.watchdog_enabled(0, &usec) <= 0 || usec == 0)
    return std::nullopt;
  return std::chrono::microseconds(usec);
}

}  // namespace devplug::sd
