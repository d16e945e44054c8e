#include "settings.h"

#include <set>

#include "devplug/common/fs.h"
#include "devplug/common/pci.h"

namespace devplug::generic {
namespace {

using common::Host;

bool ValidPermissions(const std::string& p) {
  if (p.empty() || p.size() > 3) return false;
  for (size_t i = 0; i < p.size(); i++)
    if ((p[i] != 'r' && p[i] != 'w' && p[i] != 'm') || p.find(p[i]) != i) return false;
  return true;
}

// Reads a string or boolean at `path` into *out when set; false after a
// config error (the wrong type).
bool GetString(Host& host, const std::string& path, std::string* out) {
  auto v = host.Get(path);
  if (v && v->type != DEVPLUG_CONFIG_STRING)
    host.ConfigError(path.c_str(), "must be a string");
  else if (v)
    *out = v->string;
  return !v || v->type == DEVPLUG_CONFIG_STRING;
}

bool GetBool(Host& host, const std::string& path, bool* out) {
  auto v = host.Get(path);
  if (v && v->type != DEVPLUG_CONFIG_BOOL)
    host.ConfigError(path.c_str(), "must be a boolean");
  else if (v)
    *out = v->boolean;
  return !v || v->type == DEVPLUG_CONFIG_BOOL;
}

bool ParseItem(Host& host, size_t i, const std::string& default_perm, bool default_ro, Item* it) {
  const std::string at = "paths[" + std::to_string(i) + "]";
  auto v = host.Get(at);
  bool ok = true;
  it->permissions = default_perm;
  it->read_only = default_ro;
  std::string type = "device";
  if (v->type == DEVPLUG_CONFIG_STRING) {
    it->pattern = v->string;
  } else if (v->type == DEVPLUG_CONFIG_TABLE) {
    for (const std::string& k : host.Members(at)) {
      static const std::set<std::string> kKnown = {"path",        "container_path", "type",
                                                   "permissions", "read_only",      "optional"};
      if (!kKnown.contains(k)) {
        host.ConfigError((at + Host::Member(k)).c_str(),
                         "unknown key (known: path, container_path, type, permissions, "
                         "read_only, optional)");
        ok = false;
      }
    }
    if (!host.Get(at + ".path")) {
      host.ConfigError(at.c_str(), "has no path");
      return false;
    }
    ok = GetString(host, at + ".path", &it->pattern) && ok;
    ok = GetString(host, at + ".container_path", &it->container_path) && ok;
    ok = GetString(host, at + ".type", &type) && ok;
    ok = GetString(host, at + ".permissions", &it->permissions) && ok;
    ok = GetBool(host, at + ".read_only", &it->read_only) && ok;
    ok = GetBool(host, at + ".optional", &it->optional) && ok;
  } else {
    host.ConfigError(at.c_str(), "must be a path (string) or a table {path = ..., ...}");
    return false;
  }
  const std::string where = v->type == DEVPLUG_CONFIG_STRING ? at : at + ".path";
  if (ok && !devplug::common::IsAbsolutePath(it->pattern)) {
    host.ConfigError(where.c_str(),
                     "\"" + it->pattern + "\" must be an absolute path, like /dev/net/tun");
    ok = false;
  }
  if (type != "device" && type != "mount") {
    host.ConfigError((at + ".type").c_str(), "must be \"device\" or \"mount\"");
    ok = false;
  }
  it->mount = type == "mount";
  if (!ValidPermissions(it->permissions)) {
    host.ConfigError(
        (v->type == DEVPLUG_CONFIG_STRING ? std::string("permissions") : at + ".permissions")
            .c_str(),
        "must be made of r, w and m, like \"rw\"");
    ok = false;
  }
  if (!it->container_path.empty() && !devplug::common::IsAbsolutePath(it->container_path)) {
    host.ConfigError((at + ".container_path").c_str(), "must be an absolute path");
    ok = false;
  }
  it->glob = HasGlob(it->pattern);
  return ok;
}

}  // namespace

std::optional<Settings> ParseSettings(Host& host) {
  Settings s;
  bool ok = true;
  const std::string perm = host.String("permissions").value_or("rw");
  if (!ValidPermissions(perm)) {
    host.ConfigError("permissions", "must be made of r, w and m, like \"rw\"");
    ok = false;
  }
  const bool read_only = host.Bool("read_only").value_or(false);
  std::vector<Item> items;
  if (auto paths = host.Get("paths")) {
    if (paths->size == 0) {
      host.ConfigError("paths", "is empty");
      ok = false;
    }
    for (size_t i = 0; i < paths->size; i++) {
      Item it;
      if (ParseItem(host, i, perm, read_only, &it))
        items.push_back(std::move(it));
      else
        ok = false;
    }
  }
  std::vector<UsbSel> usb;
  if (auto u = host.Get("usb")) {
    if (u->size == 0) {
      host.ConfigError("usb", "is empty");
      ok = false;
    }
    for (size_t i = 0; i < u->size; i++) {
      const std::string at = "usb[" + std::to_string(i) + "]";
      if (host.Get(at)->type != DEVPLUG_CONFIG_TABLE) {
        host.ConfigError(at.c_str(), "must be a table {vendor = \"0403\", product = \"6001\"}");
        ok = false;
        continue;
      }
      UsbSel sel;
      for (const std::string& k : host.Members(at)) {
        if (k != "vendor" && k != "product" && k != "serial") {
          host.ConfigError((at + Host::Member(k)).c_str(),
                           "unknown key (known: vendor, product, serial)");
          ok = false;
        }
      }
      for (const char* key : {"vendor", "product"}) {
        std::string text;
        const std::string p = at + "." + key;
        if (!GetString(host, p, &text)) {
          ok = false;
          continue;
        }
        auto id = devplug::common::ParsePciId(text);  // any 16-bit hex ID
        if (!id) {
          host.ConfigError(p.c_str(),
                           text.empty()
                               ? "missing (a 16-bit ID in hex, like \"0403\")"
                               : "\"" + text + "\" is not a 16-bit ID in hex, like \"0403\"");
          ok = false;
          continue;
        }
        (std::string_view(key) == "vendor" ? sel.vendor : sel.product) = *id;
      }
      if (host.Get(at + ".serial")) {
        std::string serial;
        if (!GetString(host, at + ".serial", &serial))
          ok = false;
        else
          sel.serial = serial;
      }
      usb.push_back(sel);
    }
  }
  if (items.empty() && usb.empty() && ok) {
    host.ConfigError("paths", "missing (give paths, usb, or both)");
    ok = false;
  }
  const bool group = host.Bool("group").value_or(false);
  if (group && !usb.empty()) {
    host.ConfigError("group", "cannot be combined with usb");
    ok = false;
  }
  const int64_t shares = host.Int("shares").value_or(1);
  if (shares < 1 || shares > kMaxShares) {
    host.ConfigError("shares", "must be between 1 and 100000");
    ok = false;
  }
  const std::string nodes = host.String("usb_nodes").value_or("bus");
  if (nodes != "bus" && nodes != "all") {
    host.ConfigError("usb_nodes", "must be \"bus\" or \"all\"");
    ok = false;
  }
  const std::string preferred = host.String("preferred").value_or("spread");
  if (preferred != "spread" && preferred != "pack") {
    host.ConfigError("preferred", "must be \"spread\" or \"pack\"");
    ok = false;
  }
  Host::EnvList envs;
  ok = host.EnvTable("envs", &envs) && ok;
  if (!ok) return std::nullopt;
  s.items = std::move(items);
  s.usb = std::move(usb);
  s.group = group;
  s.shares = shares;
  s.usb_all = nodes == "all";
  s.usb_env = host.Bool("usb_env").value_or(false);
  s.envs = std::move(envs);
  s.pack = preferred == "pack";
  s.preopen = host.Bool("preopen").value_or(false);
  return s;
}

}  // namespace devplug::generic
