// Where hotplug events come from: set by the configuration, used by the
// udev monitor.
#pragma once

namespace devplug {

// kUdev: events after udevd ran its rules; kKernel: the raw kernel events;
// kAuto: udev when udevd runs, else the kernel.
enum class UdevSource { kAuto, kUdev, kKernel };

}  // namespace devplug
