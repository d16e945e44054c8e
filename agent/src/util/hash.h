// A 32-bit FNV-1a hash: the same value on every build and machine, for
// names derived from other names (a CDI spec's file name, a DRA device
// name), never for anything a peer must trust.
#pragma once

#include <cstdint>
#include <string_view>

namespace devplug {

inline uint32_t Fnv1a32(std::string_view text) {
  uint32_t h = 2166136261u;
  for (unsigned char c : text) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

}  // namespace devplug
