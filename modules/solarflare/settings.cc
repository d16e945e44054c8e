#include "settings.h"

#include <algorithm>
#include <variant>

#include "devplug/common/duration.h"
#include "devplug/common/fs.h"
#include "devplug/common/pci.h"

namespace devplug::solarflare {

using common::Host;

std::optional<Settings> ParseSettings(Host& host) {
  Settings s;
  bool ok = true;
  auto bad = [&](const char* key, const std::string& why) {
    host.ConfigError(key, why);
    ok = false;
  };
  const std::string mode = host.String("mode").value_or("shared");
  if (mode != "shared" && mode != "nic")
    bad("mode", "must be \"shared\" or \"nic\", not \"" + mode + "\"");
  s.nic_mode = mode == "nic";
  if (auto shares = host.Int("shares")) {
    if (s.nic_mode)
      bad("shares", "applies to mode = \"shared\" only");
    else if (*shares < 1 || *shares > 10000)
      bad("shares", "must be between 1 and 10000");
    else
      s.shares = *shares;
  }
  auto names = [&](const char* key, std::vector<std::string>* into) {
    auto v = host.Strings(key);
    if (!v) return;
    if (v->empty()) bad(key, "is empty; leave it out for the default");
    for (const std::string& n : *v)
      if (n.empty() || n.size() > 64 || n.find('/') != std::string::npos || n == "." || n == "..")
        bad(key, "\"" + n + "\" is not a name");
    *into = *v;
  };
  names("drivers", &s.drivers);
  names("ifnames", &s.ifnames);
  if (auto vendors = host.Strings("vendors")) {
    s.vendors.clear();
    if (vendors->empty()) bad("vendors", "is empty; leave it out for the default");
    for (const std::string& v : *vendors) {
      auto id = devplug::common::ParsePciId(v);
      if (!id)
        bad("vendors", "\"" + v + "\" is not a 16-bit PCI vendor ID in hex, like \"1924\"");
      else
        s.vendors.push_back(*id);
    }
  }
  if (auto addresses = host.Strings("addresses")) {
    if (addresses->empty()) bad("addresses", "is empty; leave it out to select any");
    for (const std::string& a : *addresses) {
      auto n = devplug::common::NormalizePciAddress(a);
      if (!n)
        bad("addresses", "\"" + a + "\" is not a PCI address like \"0000:3b:00.0\"");
      else
        s.addresses.push_back(*n);
    }
  }
  s.require_nic = host.Bool("require_nic").value_or(true);
  s.require_link = host.Bool("require_link").value_or(false);
  s.check_cplane = host.Bool("check_cplane").value_or(true);

  auto absolute = [&](const char* key, const std::string& p) {
    if (!devplug::common::IsAbsolutePath(p) || p.back() == '/') {
      bad(key, "\"" + p + "\" must be an absolute path");
      return false;
    }
    return true;
  };
  auto paths = [&](const char* key, std::vector<std::string>* into) {
    auto v = host.Strings(key);
    if (!v) return;
    into->clear();
    for (const std::string& p : *v)
      if (absolute(key, p)) into->push_back(p);
  };
  paths("devices", &s.devices);
  paths("optional_devices", &s.optional_devices);
  auto dir_key = [&](const char* key, std::string* into, bool allow_auto) {
    auto v = host.String(key);
    if (!v) return;
    if (allow_auto && *v == "auto")
      into->clear();
    else if (absolute(key, *v))
      *into = *v;
  };
  dir_key("lib_dir", &s.lib_dir, true);
  dir_key("container_lib_dir", &s.container_lib_dir, false);
  dir_key("bin_dir", &s.bin_dir, true);
  dir_key("container_bin_dir", &s.container_bin_dir, false);
  if (auto libs = host.Strings("libraries")) {
    s.libraries.clear();
    for (const std::string& l : *libs) {
      if (l.empty() || l.find('/') != std::string::npos)
        bad("libraries", "\"" + l + "\" is not a file-name prefix");
      else
        s.libraries.push_back(l);
    }
  }
  s.preload = host.Bool("preload").value_or(true);
  s.onload_script = host.Bool("onload_script").value_or(false);
  if (s.preload && s.onload_script)
    bad("onload_script", "needs preload = false: the onload script sets LD_PRELOAD itself");
  if (s.preload && std::none_of(s.libraries.begin(), s.libraries.end(), [](const std::string& l) {
        return std::string_view(kPreloadLib).rfind(l, 0) == 0;
      }))
    bad("libraries", "no entry matches libonload.so, which preload = true needs");
  ok = host.EnvTable("envs", &s.envs) && ok;
  for (const auto& [key, value] : s.envs) {
    if (key == "LD_PRELOAD" && s.preload)
      bad("envs",
          "sets LD_PRELOAD, which preload = true sets; set preload = false to give your own");
    if (key.rfind("SFC_RESOURCE_", 0) == 0 && s.nic_mode)
      bad("envs", "sets " + key + ", which nic mode sets");
  }

  if (auto cmd = host.String("attach_command")) {
    if (!s.nic_mode)
      bad("attach_command", "applies to mode = \"nic\" only");
    else if (absolute("attach_command", *cmd))
      s.attach_command = *cmd;
  }
  if (auto text = host.String("attach_timeout")) {
    if (!host.String("attach_command")) bad("attach_timeout", "applies only with attach_command");
    auto d = devplug::common::ParseDuration(*text, kMaxAttachTimeout);
    if (auto* why = std::get_if<std::string>(&d))
      bad("attach_timeout", *why);
    else
      s.attach_timeout = std::get<milliseconds>(d);
  }
  if (!s.attach_command.empty())
    if (std::string why = host.CheckWithinPrestart(s.attach_timeout); !why.empty())
      bad("attach_timeout", why);
  if (!ok) return std::nullopt;
  return s;
}

}  // namespace devplug::solarflare
