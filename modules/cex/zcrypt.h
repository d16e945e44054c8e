// zcrypt's multi-node support (drivers/s390/crypto/zcrypt_api.c): a device
// node made by writing its name to /sys/class/zcrypt/create, that lets its
// opener reach only the adapters, domains, control domains and ioctls its
// four masks hold (apmask, aqmask, admask, ioctlmask under
// /sys/devices/virtual/zcrypt/<name>/). Every mask starts empty.
//
// Thread safety: plain functions; ZcryptOps implementations are stateless.
#pragma once

#include <bitset>
#include <string>
#include <string_view>
#include <vector>

#include "apbus.h"
#include "devplug/common/fs.h"

namespace devplug::cex {

// 256 bits, bit 0 the most significant bit of the first hex digit, as the
// kernel shows and parses them (set_bit_inv).
using Mask = std::bitset<256>;

// The kernel's ap_parse_mask_str(): "+n,-m,+a-b" (numbers decimal, hex or
// octal) changes `mask`; anything else replaces it with a hex value ("0x"
// optional, missing digits are 0, one trailing newline). False (and `mask`
// unchanged) where the kernel answers EINVAL.
bool ApplyMaskWrite(std::string_view text, Mask& mask);
// How the kernel shows a mask: "0x" and 64 hex digits.
std::string FormatMask(const Mask& mask);

// A name longer than this is cut by the kernel (ZCDN_MAX_NAME 32, with
// the terminating NUL).
inline constexpr size_t kMaxNodeName = 31;
// ZCRYPT_MAX_MINOR_NODES: nodes per host, for every user together.
inline constexpr int kMaxNodes = 256;

// The node devplug makes for share `share` of `apqn`:
// "devplug-cex-03.0006-0". Nodes of other names (zcryptctl's "zcrypt_0",
// another plugin's) are never touched.
inline constexpr std::string_view kNodePrefix = "devplug-cex-";
std::string NodeName(const Apqn& apqn, int share);
// The inverse; false for a name that is not one of ours.
bool ParseNodeName(std::string_view name, Apqn* apqn, int* share);

// The writes that change the kernel's state, apart so that tests can act
// on a fixture tree as the kernel does (modules/cex/emulator.cc). Each
// returns 0 or a negative errno, as the write(2) would.
struct ZcryptOps {
  virtual ~ZcryptOps() = default;
  virtual int Create(const common::HostRoot& root, const std::string& name) const = 0;
  virtual int Destroy(const common::HostRoot& root, const std::string& name) const = 0;
  // `path` has host_root applied.
  virtual int WriteMask(const std::string& path, const std::string& text) const = 0;
};

// The kernel's: writes to /sys/class/zcrypt/{create,destroy} and the
// node's mask files.
const ZcryptOps& KernelOps();
// What the module is built with: KernelOps(), or the emulator in the test
// build (cex-fixture.so).
const ZcryptOps& ModuleOps();

// Writes `text` to `path` in one write(2): 0 or -errno.
int WriteFile(const std::string& path, const std::string& text);

// Host paths.
inline constexpr const char* kZcryptClass = "/sys/class/zcrypt";
inline constexpr const char* kZcryptNodes = "/sys/devices/virtual/zcrypt";

}  // namespace devplug::cex
