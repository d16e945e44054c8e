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
  decltype(&::sd_notify_barrier) barrier = nullptr;  // systemd 246 and later
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
      lib.barrier = reinterpret_cast<decltype(&::sd_notify_barrier)>(dlsym(h, "sd_notify_barrier"));
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

bool HandMainPid(pid_t pid, std::chrono::milliseconds timeout) {
  const Lib& lib = Get();
  if (lib.notify == nullptr || std::getenv("NOTIFY_SOCKET") == nullptr) return false;
  if (lib.notify(0, ("MAINPID=" + std::to_string(pid)).c_str()) <= 0) return false;
  if (lib.barrier == nullptr) return false;
  const auto usec = std::chrono::duration_cast<std::chrono::microseconds>(timeout).count();
  return lib.barrier(0, static_cast<uint64_t>(usec)) >= 0;
}

std::optional<std::chrono::microseconds> WatchdogInterval() {
  const Lib& lib = Get();
  uint64_t usec = 0;
  if (lib.watchdog_enabled == nullptr || lib.watchdog_enabled(0, &usec) <= 0 || usec == 0)
    return std::nullopt;
  return std::chrono::microseconds(usec);
}

}  // namespace devplug::sd
