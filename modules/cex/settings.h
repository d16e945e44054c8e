// The cex module's keys (README.md beside this file), read and checked once
// at create(), and the registry of every cex instance in the process: an
// APQN listed in two resources' `apqns` is a configuration error, so is a
// set of resources that could need more than the kernel's 256 nodes, and
// an APQN that several resources select without listing it goes to the
// first of them in configuration order.
//
// Thread safety: Settings are read-only after ParseSettings(); Registry is
// thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "apbus.h"
#include "devplug/common/cxx_module.h"
#include "zcrypt.h"

namespace devplug::cex {

struct Settings {
  std::vector<Apqn> apqns;  // sorted; empty: every APQN the filters pass
  Mode mode = Mode::kAny;
  int min_generation = 0;  // 0: any
  int shares = 1;
  std::string machine_id;               // "": any machine
  std::vector<std::string> namespaces;  // empty: any namespace
  bool control_domains = false;
  Mask ioctls = Mask().set();
  mode_t node_mode = 0666;
  std::chrono::milliseconds poll_interval = std::chrono::seconds(30);  // 0: off

  // The configuration alone takes the APQN (its `apqns`, when given).
  bool Lists(const Apqn& a) const;
  // The card's facts pass `mode` and `min_generation`.
  bool Accepts(const Card& c) const;
};

// Reads and checks the instance's keys; nullopt after host.ConfigError()
// for every mistake.
std::optional<Settings> ParseSettings(common::Host& host);

// The keys ParseSettings() reads, for the module descriptor.
extern const devplug_config_key kSettingsKeys[];

// The ioctl names `ioctls` accepts, with their numbers (the nr of the
// ioctl, arch/s390/include/uapi/asm/zcrypt.h).
struct IoctlName {
  const char* name;
  int nr;
};
extern const IoctlName kIoctlNames[];

class Registry {
 public:
  struct Entry {
    const void* owner;
    std::string resource;
    int32_t index;
    const Settings* settings;
  };
  static Registry& Get() {
    static Registry r;
    return r;
  }
  // Why `e` cannot join, as {key, message} (an APQN another resource lists:
  // "apqns"; more nodes than the kernel has: "shares"), or {} after adding
  // it. An instance of the same resource (one a reload replaces) is not
  // counted against it.
  std::pair<std::string, std::string> Add(const Entry& e);
  void Remove(const void* owner);
  // The resource before `owner` in configuration order that also takes
  // `a` (for a card `c`), or "" when `owner` serves it.
  std::string TakenBy(const void* owner, const Apqn& a, const Card& c) const;
  // Another resource's configuration may take `a`: a node of it is not
  // `owner`'s to destroy.
  bool ListedByOther(const void* owner, const Apqn& a) const;

 private:
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
};

}  // namespace devplug::cex
