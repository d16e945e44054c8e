// The s390 AP bus as sysfs shows it: crypto cards (/sys/devices/ap/cardXX)
// and their queues (cardXX/XX.YYYY), one per (adapter, domain) pair, the
// APQN. Names are the kernel's: lower-case hex, "card%02x" and "%02x.%04x"
// (drivers/s390/crypto/ap_card.c, ap_queue.c).
//
// Thread safety: plain functions and values.
#pragma once

#include <compare>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "devplug/common/fs.h"

namespace devplug::cex {

// Adapters and domains are 0..255 (AP_DEVICES, AP_DOMAINS).
inline constexpr int kMaxAdapter = 255;
inline constexpr int kMaxDomain = 255;

struct Apqn {
  int adapter = 0;
  int domain = 0;
  auto operator<=>(const Apqn&) const = default;
  std::string Name() const;  // "03.0006"
};

// "03.0006" (any case): exactly 2 and 4 hex digits, as the kernel names
// queues; nullopt otherwise.
std::optional<Apqn> ParseApqn(std::string_view text);

enum class Mode { kAny, kCca, kEp11, kAccel };
const char* ModeName(Mode m);

struct Card {
  int adapter = 0;
  std::string type;    // "CEX8C"; empty while cex4card is not bound
  int generation = 0;  // 8 for CEX8 (hwtype 14); 0 when unknown
  Mode mode = Mode::kAny;
  bool bound = false;  // driver cex4card
  // Absent files read as the kernel's defaults on kernels that lack them.
  bool online = false, config = true, chkstop = false;
};

struct Queue {
  Apqn apqn;
  std::string driver;  // "cex4queue", "vfio_ap", "" (none)
  bool online = false, config = true, chkstop = false;
};

struct ApBus {
  std::vector<Card> cards;    // by adapter
  std::vector<Queue> queues;  // by APQN; only queues bound to cex4queue
  // Why an entry was left out ("03.0006: bound to vfio_ap"), for the log.
  std::vector<std::string> skipped;
  bool present = false;  // /sys/devices/ap exists
};

// One walk of /sys/devices/ap under `root`. Never fails as a whole: a
// queue bound to another driver, or one whose attributes vanished during
// the walk, is skipped and named in `skipped`.
ApBus ScanApBus(const common::HostRoot& root);

// The card's mode from its ap_functions bits (CCA 0x10000000, accelerator
// 0x08000000, EP11 0x04000000; ap_bus.h AP_FUNC_*), else from the last
// letter of its type (C, A, P).
Mode ModeOf(std::optional<uint32_t> functions, std::string_view type);
// The generation: hwtype 10..14 are CEX4..CEX8 (AP_DEVICE_TYPE_CEX4..8);
// newer cards show a compatible hwtype, so the type's digits ("CEX9C") win
// when they are higher. 0 when neither says.
int GenerationOf(std::optional<int64_t> hwtype, std::string_view type);

}  // namespace devplug::cex
