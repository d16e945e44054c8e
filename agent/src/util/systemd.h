// Talking to systemd (sd_notify(3), sd_watchdog_enabled(3)) through
// libsystemd, loaded on first use and only when systemd runs us: without
// $NOTIFY_SOCKET (a container, a test, a shell) devplugd never maps it and
// the six libraries it pulls in (about 1 ms of every start).
//
// Thread safety: thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

namespace devplug::sd {

// Sends `state` ("READY=1", "STATUS=...") to the service manager; nothing
// when none listens.
void Notify(const std::string& state);

// Makes `pid` (a process of this service) its main process, and waits up
// to `timeout` until the manager has read that (sd_notify_barrier(3)), so
// that this process's exit afterwards is not taken for the service's end.
// False when systemd does not run us or did not confirm it in time.
bool HandMainPid(pid_t pid, std::chrono::milliseconds timeout);

// The interval systemd's watchdog expects pings at (WatchdogSec=), if it
// watches this process.
std::optional<std::chrono::microseconds> WatchdogInterval();

}  // namespace devplug::sd
