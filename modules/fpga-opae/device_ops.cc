// The installed module acts on the real driver (dfl.h: ModuleDeviceOps).
#include "dfl.h"

namespace devplug::fpga {

const DeviceOps& ModuleDeviceOps() { return RealDeviceOps(); }

}  // namespace devplug::fpga
