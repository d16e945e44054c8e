// Talking to systemd (sd_notify(3), sd_watchdog_enabled(3)) through
// libsystemd, loaded on first use and only when systemd runs us: without
// $NOTIFY_SOCKET (a container, a test, a shell) devplugd never maps it and
// the six libraries it pulls in (about 1 ms of every start).
//
// Thread safety: thread-safe.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace devplug::sd {

// Sends `state` ("READY=1", "STATUS=...") to the service manager; nothing
// when none listens.
void Notify(const std::string& state);

// The interval systemd's watchdog expects pings at (WatchdogSec=), if it
// watches this process.
std::optional<std::chrono::microseconds> WatchdogInterval();

}  // namespace devplug::sd
