#include "settings.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "devplug/common/duration.h"

namespace devplug::cex {

using common::Host;

const IoctlName kIoctlNames[] = {
    {"ZSENDEP11CPRB", 0x04},        {"ICARSAMODEXPO", 0x05},      {"ICARSACRT", 0x06},
    {"ZCRYPT_STATUS_MASK", 0x58},   {"ZCRYPT_QDEPTH_MASK", 0x59}, {"ZCRYPT_PERDEV_REQCNT", 0x5a},
    {"ZCRYPT_DEVICE_STATUS", 0x5f}, {"ZSECSENDCPRB", 0x81},       {nullptr, 0},
};

bool Settings::Lists(const Apqn& a) const {
  return apqns.empty() || std::binary_search(apqns.begin(), apqns.end(), a);
}

bool Settings::Accepts(const Card& c) const {
  if (mode != Mode::kAny && c.mode != mode) return false;
  if (min_generation > 0 && c.generation < min_generation) return false;
  return true;
}

namespace {

constexpr std::chrono::milliseconds kMaxPoll = std::chrono::hours(1);

std::optional<int> IoctlNumber(const std::string& text) {
  for (const IoctlName* n = kIoctlNames; n->name; ++n)
    if (text == n->name) return n->nr;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 0);
  if (text.empty() || *end != '\0' || v < 1 || v > 255) return std::nullopt;
  return static_cast<int>(v);
}

}  // namespace

std::optional<Settings> ParseSettings(Host& host) {
  Settings s;
  bool ok = true;
  auto bad = [&](const char* key, const std::string& why) {
    host.ConfigError(key, why);
    ok = false;
  };
  std::set<Apqn> seen;
  for (const std::string& text : host.Strings("apqns").value_or(std::vector<std::string>{})) {
    auto a = ParseApqn(text);
    if (!a)
      bad("apqns", "\"" + text + "\" is not an APQN as the kernel names it, like \"03.0006\"");
    else if (!seen.insert(*a).second)
      bad("apqns", "\"" + text + "\" is listed twice");
  }
  s.apqns.assign(seen.begin(), seen.end());
  if (host.Strings("apqns") && s.apqns.empty() && ok) bad("apqns", "must not be empty");

  const std::string mode = host.String("mode").value_or("any");
  if (mode == "cca")
    s.mode = Mode::kCca;
  else if (mode == "ep11")
    s.mode = Mode::kEp11;
  else if (mode == "accel")
    s.mode = Mode::kAccel;
  else if (mode != "any")
    bad("mode", "must be \"cca\", \"ep11\", \"accel\" or \"any\"");

  if (auto g = host.Int("min_generation")) {
    if (*g < 4 || *g > 255)
      bad("min_generation", "must be 4 (CEX4) to 255");
    else
      s.min_generation = static_cast<int>(*g);
  }
  if (auto n = host.Int("shares")) {
    if (*n < 1 || *n > 100)
      bad("shares", "must be 1 to 100");
    else
      s.shares = static_cast<int>(*n);
  }
  if (!s.apqns.empty() && static_cast<int64_t>(s.apqns.size()) * s.shares > kMaxNodes)
    bad("shares", std::to_string(s.apqns.size()) + " APQNs x " + std::to_string(s.shares) +
                      " shares need more than the kernel's " + std::to_string(kMaxNodes) +
                      " zcrypt nodes");
  if (auto id = host.String("machine_id")) {
    if (std::count(id->begin(), id->end(), '-') != 2 || id->front() == '-' || id->back() == '-')
      bad("machine_id",
          "must be <Manufacturer>-<Type>-<Sequence Code>, like "
          "\"IBM-3931-00000000000ABCDE\"");
    s.machine_id = *id;
  }
  s.namespaces = host.Strings("namespaces").value_or(std::vector<std::string>{});
  if (host.Strings("namespaces") && s.namespaces.empty())
    bad("namespaces", "must not be empty (leave it out to allow every namespace)");
  for (const std::string& ns : s.namespaces)
    if (ns.empty() || ns.size() > 63 ||
        !std::all_of(
            ns.begin(), ns.end(),
            [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }) ||
        ns.front() == '-' || ns.back() == '-')
      bad("namespaces", "\"" + ns + "\" is not a namespace name (RFC 1123 label)");
  s.control_domains = host.Bool("control_domains").value_or(false);
  if (auto list = host.Strings("ioctls")) {
    s.ioctls.reset();
    for (const std::string& name : *list) {
      auto nr = IoctlNumber(name);
      if (!nr)
        bad("ioctls", "\"" + name +
                          "\" is neither a known ioctl name (ZSECSENDCPRB, "
                          "ZSENDEP11CPRB, ICARSAMODEXPO, ...) nor a number 1 to 255");
      else
        s.ioctls.set(static_cast<size_t>(*nr));
    }
    if (list->empty()) bad("ioctls", "must not be empty");
  }
  if (auto text = host.String("node_mode")) {
    char* end = nullptr;
    const long m = std::strtol(text->c_str(), &end, 8);
    if (text->empty() || *end != '\0' || m < 0 || m > 0777)
      bad("node_mode", "\"" + *text + "\" is not an octal file mode like \"0666\"");
    else
      s.node_mode = static_cast<mode_t>(m);
  }
  if (auto text = host.String("poll_interval")) {
    auto d = common::ParseDuration(*text, kMaxPoll);
    if (auto* err = std::get_if<std::string>(&d))
      bad("poll_interval", *err);
    else
      s.poll_interval = std::get<std::chrono::milliseconds>(d);
  }
  if (!ok) return std::nullopt;
  return s;
}

const devplug_config_key kSettingsKeys[] = {
    {"apqns", DEVPLUG_CONFIG_STRING_ARRAY, 0,
     "APQNs as the kernel names them (\"03.0006\"); default every one the filters pass"},
    {"mode", DEVPLUG_CONFIG_STRING, 0, "\"cca\", \"ep11\", \"accel\" or \"any\" (default)"},
    {"min_generation", DEVPLUG_CONFIG_INT, 0, "only CEX<n> cards with n at least this (4-255)"},
    {"shares", DEVPLUG_CONFIG_INT, 0, "IDs per APQN, each with its own node (1-100, default 1)"},
    {"machine_id", DEVPLUG_CONFIG_STRING, 0,
     "serve only on this machine (<Manufacturer>-<Type>-<Sequence Code> of /proc/sysinfo)"},
    {"namespaces", DEVPLUG_CONFIG_STRING_ARRAY, 0,
     "only pods of these namespaces may start with a device (checked at PreStart)"},
    {"control_domains", DEVPLUG_CONFIG_BOOL, 0,
     "allow control-domain (admin) requests to the allocated domains (default false)"},
    {"ioctls", DEVPLUG_CONFIG_STRING_ARRAY, 0,
     "ioctls the node allows, names or 1-255 (default all)"},
    {"node_mode", DEVPLUG_CONFIG_STRING, 0, "octal mode of the node (default \"0666\")"},
    {"poll_interval", DEVPLUG_CONFIG_STRING, 0,
     "how often a checkstop, which sends no uevent, is looked for (default 30s; 0s off)"},
    {nullptr, 0, 0, nullptr},
};

std::pair<std::string, std::string> Registry::Add(const Entry& e) {
  std::lock_guard lock(mu_);
  int64_t nodes = e.settings->apqns.empty()
                      ? 0
                      : static_cast<int64_t>(e.settings->apqns.size()) * e.settings->shares;
  for (const Entry& other : entries_) {
    if (other.resource == e.resource) continue;
    for (const Apqn& a : e.settings->apqns)
      if (!other.settings->apqns.empty() &&
          std::binary_search(other.settings->apqns.begin(), other.settings->apqns.end(), a))
        return {"apqns",
                "APQN " + a.Name() + " is also listed by resource \"" + other.resource + "\""};
    nodes += static_cast<int64_t>(other.settings->apqns.size()) * other.settings->shares;
  }
  if (nodes > kMaxNodes)
    return {"shares", "the cex resources' apqns x shares come to " + std::to_string(nodes) +
                          " nodes, more than the kernel's " + std::to_string(kMaxNodes)};
  entries_.push_back(e);
  return {};
}

bool Registry::ListedByOther(const void* owner, const Apqn& a) const {
  std::lock_guard lock(mu_);
  std::string self;
  for (const Entry& e : entries_)
    if (e.owner == owner) self = e.resource;
  for (const Entry& e : entries_)
    if (e.owner != owner && e.resource != self && e.settings->Lists(a)) return true;
  return false;
}

void Registry::Remove(const void* owner) {
  std::lock_guard lock(mu_);
  std::erase_if(entries_, [&](const Entry& e) { return e.owner == owner; });
}

std::string Registry::TakenBy(const void* owner, const Apqn& a, const Card& c) const {
  std::lock_guard lock(mu_);
  const Entry* self = nullptr;
  for (const Entry& e : entries_)
    if (e.owner == owner) self = &e;
  if (self == nullptr) return "";
  for (const Entry& e : entries_) {
    if (e.owner == owner || e.resource == self->resource) continue;
    if (e.index >= self->index) continue;
    if (e.settings->Lists(a) && e.settings->Accepts(c)) return e.resource;
  }
  return "";
}

}  // namespace devplug::cex
