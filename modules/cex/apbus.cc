#include "apbus.h"

#include <algorithm>
#include <cstdio>

namespace devplug::cex {

using common::HostRoot;

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<int> Hex(std::string_view s) {
  int v = 0;
  for (char c : s) {
    const int d = HexDigit(c);
    if (d < 0) return std::nullopt;
    v = v * 16 + d;
  }
  return s.empty() ? std::nullopt : std::optional<int>(v);
}

// A "0"/"1" attribute (`rel` may name one below the directory); nullopt
// when absent or not a number.
std::optional<bool> Flag(const common::Dir& dir, const std::string& rel) {
  auto v = dir.ReadInt(rel.c_str());
  if (!v) return std::nullopt;
  return *v != 0;
}

}  // namespace

std::string Apqn::Name() const {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%02x.%04x", adapter & 0xff, domain & 0xffff);
  return buf;
}

std::optional<Apqn> ParseApqn(std::string_view text) {
  if (text.size() != 7 || text[2] != '.') return std::nullopt;
  auto a = Hex(text.substr(0, 2));
  auto d = Hex(text.substr(3));
  if (!a || !d || *d > kMaxDomain) return std::nullopt;
  return Apqn{*a, *d};
}

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kCca:
      return "cca";
    case Mode::kEp11:
      return "ep11";
    case Mode::kAccel:
      return "accel";
    case Mode::kAny:
      break;
  }
  return "any";
}

Mode ModeOf(std::optional<uint32_t> functions, std::string_view type) {
  if (functions) {
    if (*functions & 0x10000000u) return Mode::kCca;
    if (*functions & 0x04000000u) return Mode::kEp11;
    if (*functions & 0x08000000u) return Mode::kAccel;
  }
  if (!type.empty()) {
    switch (type.back()) {
      case 'C':
        return Mode::kCca;
      case 'P':
        return Mode::kEp11;
      case 'A':
        return Mode::kAccel;
      default:
        break;
    }
  }
  return Mode::kAny;
}

int GenerationOf(std::optional<int64_t> hwtype, std::string_view type) {
  int gen = 0;
  if (hwtype && *hwtype >= 10 && *hwtype <= 255) gen = static_cast<int>(*hwtype) - 6;
  // "CEX<digits><letter>"
  if (type.size() > 4 && type.substr(0, 3) == "CEX") {
    int n = 0;
    size_t i = 3;
    for (; i < type.size() && type[i] >= '0' && type[i] <= '9' && n < 1000; ++i)
      n = n * 10 + (type[i] - '0');
    if (i > 3) gen = std::max(gen, n);
  }
  return gen;
}

ApBus ScanApBus(const HostRoot& root) {
  // One open directory per card, its queues' attributes read relative to
  // it: syscalls, most of them path walks, are a rescan's whole cost
  // (bench/cex_bench.cc).
  ApBus bus;
  auto ap = common::Dir::Open(root.Path("/sys/devices/ap"));
  if (!ap) return bus;
  bus.present = true;
  auto entries = ap->List("card");
  if (!entries) return bus;
  // The queues cex4queue holds, from the driver's folder (the driver core
  // links each bound device there by its name): one directory read, where
  // a queue's own `driver` link costs a path walk each. A queue not named
  // there (bound elsewhere, or since the listing) reads its link.
  std::vector<std::string> held;
  if (auto drv = common::Dir::Open(root.Path("/sys/bus/ap/drivers/cex4queue")))
    held = drv->List().value_or(std::vector<std::string>{});
  for (const std::string& name : *entries) {
    if (name.size() != 6) continue;
    auto adapter = Hex(name.substr(4));
    if (!adapter) continue;
    auto dir = ap->Sub(name.c_str());
    if (!dir) continue;  // removed during the walk
    Card card;
    card.adapter = *adapter;
    card.bound = dir->LinkName("driver").value_or("") == "cex4card";
    card.type = dir->Read("type").value_or("");
    auto hwtype = dir->ReadInt("hwtype");
    auto functions = dir->ReadHex("ap_functions");
    card.generation =
        GenerationOf(hwtype ? std::optional<int64_t>(*hwtype) : std::nullopt, card.type);
    card.mode = ModeOf(functions ? std::optional<uint32_t>(*functions) : std::nullopt, card.type);
    card.online = Flag(*dir, "online").value_or(false);
    // zcrypt's card and queue `online` read as config && online: an online
    // one is configured, and a rescan skips one read per queue (not so for
    // chkstop, which `online` does not include).
    card.config = card.online || Flag(*dir, "config").value_or(true);
    card.chkstop = Flag(*dir, "chkstop").value_or(false);
    bus.cards.push_back(card);
    if (!card.bound) {
      // zcrypt serves a queue only through its card's cex4card driver.
      bus.skipped.push_back(name + ": no cex4card driver");
      continue;
    }
    // Queues of card XX are XX.YYYY; their attributes are read relative to
    // the card's directory.
    auto queues = dir->List(name.substr(4) + ".");
    if (!queues) continue;
    for (const std::string& qname : *queues) {
      auto apqn = ParseApqn(qname);
      if (!apqn) continue;
      Queue q;
      q.apqn = *apqn;
      q.driver = std::binary_search(held.begin(), held.end(), qname)
                     ? "cex4queue"
                     : dir->LinkName((qname + "/driver").c_str()).value_or("");
      if (q.driver != "cex4queue") {
        bus.skipped.push_back(qname + ": " +
                              (q.driver.empty() ? "bound to no driver" : "bound to " + q.driver));
        continue;
      }
      auto online = Flag(*dir, qname + "/online");
      if (!online) {
        // zcrypt adds `online` while cex4queue is bound: gone means the
        // queue was unbound or removed during the walk.
        bus.skipped.push_back(qname + ": no online attribute");
        continue;
      }
      q.online = *online;
      q.config = q.online || Flag(*dir, qname + "/config").value_or(true);
      q.chkstop = Flag(*dir, qname + "/chkstop").value_or(false);
      bus.queues.push_back(q);
    }
  }
  std::sort(bus.queues.begin(), bus.queues.end(),
            [](const Queue& a, const Queue& b) { return a.apqn < b.apqn; });
  return bus;
}

}  // namespace devplug::cex
