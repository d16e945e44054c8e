// An emulator of the kernel's zcrypt create/destroy and node masks, acting
// on a fixture tree under host_root as drivers/s390/crypto/zcrypt_api.c
// acts on sysfs and devtmpfs. It serves the module's test build
// (cex-fixture.so, never installed) and the unit tests; no s390x machine is
// needed.
//
//   create <name>:  the name is trimmed and cut to 31 characters ("" gives
//     zcrypt_<minor>); an existing node is EEXIST, 256 nodes are ENOSPC.
//     Makes sys/devices/virtual/zcrypt/<name>/ with apmask, aqmask, admask
//     and ioctlmask all zero, dev "<major>:<minor>" (lowest free minor) and
//     uevent; the link sys/class/zcrypt/<name>; and, as root, the character
//     device dev/<name> (0600).
//   destroy <name>: ENOENT when unknown; removes all three.
//   a mask write:   parsed as the kernel parses it (ApplyMaskWrite); EINVAL
//     leaves the mask as it was.
//
// The write to create or destroy is opened first, so a fixture whose
// create is a directory fails with EISDIR as a broken sysfs would. Files
// under <root>/zcrypt-emulator/ change what it does: "major" (the dynamic
// major, 250 when absent), "no-admask" (a kernel without control-domain
// filtering), "no-dev" (devtmpfs never makes the node). Every call leaves a
// line in <root>/zcrypt-ops.log: "create <name> <rc>", "destroy <name>
// <rc>", "mask <node>/<file> <text> <rc>".
#pragma once

#include "zcrypt.h"

namespace devplug::cex {

const ZcryptOps& EmulatorOps();

}  // namespace devplug::cex
