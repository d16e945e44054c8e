// Durations in module configuration, written as the agent's own keys are:
// a number with a unit, or several ("500ms", "20s", "5m", "1h", "1m30s"),
// or "0".
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <variant>

namespace devplug::common {

// The duration, or a message saying what is wrong with `text` ("\"5x\":
// unknown unit ..."; "\"2h\" is over the maximum of 1h").
std::variant<std::chrono::milliseconds, std::string> ParseDuration(std::string_view text,
                                                                   std::chrono::milliseconds max);

// "1.5s", "20s", "250ms", "5m", "1h".
std::string FormatDuration(std::chrono::milliseconds d);

}  // namespace devplug::common
