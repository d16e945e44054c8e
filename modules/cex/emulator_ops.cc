// The module's test build (cex-fixture.so): the kernel's zcrypt behaviour
// acted out on the fixture tree (emulator.h).
#include "emulator.h"

namespace devplug::cex {

const ZcryptOps& ModuleOps() { return EmulatorOps(); }

}  // namespace devplug::cex
