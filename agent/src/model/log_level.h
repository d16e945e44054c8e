// The agent's log levels: set by the configuration, applied by ops/log.h.
#pragma once

namespace devplug {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError };

}  // namespace devplug
