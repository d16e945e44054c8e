// libFuzzer target: the nvidia module's MIG text handling. mig_profile comes
// from the operator's configuration and the capability access files from
// the driver's procfs. Properties: every name MigProfileName builds passes
// IsMigProfileName (so a profile seen on the node can always be configured),
// and ParseCapabilityMinor only answers for a DeviceFileMinor line.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "mig.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  (void)devplug::nvidia::IsMigProfileName(in);
  if (devplug::nvidia::ParseCapabilityMinor(in) &&
      in.find("DeviceFileMinor:") == std::string_view::npos)
    std::abort();
  if (size >= 24) {
    unsigned g, c;
    unsigned long long mib, total;
    std::memcpy(&g, data, 4);
    std::memcpy(&c, data + 4, 4);
    std::memcpy(&mib, data + 8, 8);
    std::memcpy(&total, data + 16, 8);
    // Slices and memory as real GPUs have them (at most 8 slices, 1 TiB).
    g %= 9;
    c %= 9;
    mib %= 1ULL << 20;
    total %= 1ULL << 40;
    const std::string name = devplug::nvidia::MigProfileName(g, c, mib, total);
    if (!name.empty() && !devplug::nvidia::IsMigProfileName(name)) std::abort();
  }
  return 0;
}
