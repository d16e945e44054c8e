// Process-wide logging setup: spdlog to stderr. Under systemd (JOURNAL_STREAM
// set) lines carry a "<N>" syslog priority prefix and no timestamp, since
// journald adds its own.
#pragma once

#include "model/log_level.h"

namespace devplug {

void SetupLogging(const char* program);
void SetLogLevel(LogLevel level);

}  // namespace devplug
