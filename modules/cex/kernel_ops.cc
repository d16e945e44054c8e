// The installed module writes to the kernel's zcrypt files.
#include "zcrypt.h"

namespace devplug::cex {

const ZcryptOps& ModuleOps() { return KernelOps(); }

}  // namespace devplug::cex
