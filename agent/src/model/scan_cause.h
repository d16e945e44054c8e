// Why a module instance scans its devices: counted by the metrics, told by
// the module runtime.
#pragma once

#include <cstddef>

namespace devplug {

enum class ScanCause : size_t { kStart, kEvent, kResync, kModule, kPath, kCount };

}  // namespace devplug
