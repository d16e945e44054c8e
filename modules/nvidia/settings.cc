#include "settings.h"

#include "devplug/common/fs.h"
#include "mig.h"

namespace devplug::nvidia {
namespace {

using common::Host;

// XIDs caused by applications, not by the GPU: a program's fault must not
// take the GPU away from everyone else.
const std::vector<int64_t> kDefaultIgnoredXids = {13, 31, 43, 45, 68, 109};

// A {host = "...", container = "..."} table at `at`.
std::optional<HostMount> ParseMount(Host& host, const std::string& at) {
  auto v = host.Get(at);
  if (!v) return std::nullopt;
  if (v->type != DEVPLUG_CONFIG_TABLE) {
    host.ConfigError(at.c_str(),
                     "must be a table like { host = \"/home/kubernetes/bin/nvidia\", "
                     "container = \"/usr/local/nvidia\" }");
    return std::nullopt;
  }
  bool ok = true;
  for (const std::string& k : host.Members(at)) {
    if (k != "host" && k != "container") {
      host.ConfigError((at + Host::Member(k)).c_str(), "unknown key (known: host, container)");
      ok = false;
    }
  }
  HostMount m;
  for (auto [key, out] : {std::pair{"host", &m.host}, std::pair{"container", &m.container}}) {
    const std::string path = at + "." + key;
    auto s = host.Get(path);
    if (!s) {
      host.ConfigError(at.c_str(), std::string("has no ") + key + " path");
      ok = false;
    } else if (s->type != DEVPLUG_CONFIG_STRING || !devplug::common::IsAbsolutePath(s->string)) {
      host.ConfigError(path.c_str(), "must be an absolute path");
      ok = false;
    } else {
      *out = s->string;
    }
  }
  if (!ok) return std::nullopt;
  return m;
}

}  // namespace

std::optional<Settings> ParseSettings(Host& host) {
  bool ok = true;
  Settings s;
  const std::string d = host.String("discovery").value_or("auto");
  if (d == "nvml")
    s.discovery = Discovery::kNvml;
  else if (d == "procfs")
    s.discovery = Discovery::kProcfs;
  else if (d != "auto") {
    host.ConfigError("discovery", "must be \"auto\", \"nvml\" or \"procfs\", not \"" + d + "\"");
    ok = false;
  }
  s.library = host.String("nvml_library").value_or("libnvidia-ml.so.1");
  if (s.library.empty()) {
    host.ConfigError("nvml_library", "must name a library, like \"libnvidia-ml.so.1\"");
    ok = false;
  }
  s.shares = host.Int("shares").value_or(1);
  if (s.shares < 1 || s.shares > 1000) {
    host.ConfigError("shares", "must be between 1 and 1000");
    ok = false;
  }
  s.ignored_xids.insert(kDefaultIgnoredXids.begin(), kDefaultIgnoredXids.end());
  if (auto xids = host.Ints("ignored_xids")) {
    s.ignored_xids.clear();
    for (int64_t x : *xids) {
      if (x < 1 || x > 100000) {
        host.ConfigError("ignored_xids", std::to_string(x) + " is not an XID (1 to 100000)");
        ok = false;
      }
      s.ignored_xids.insert(x);
    }
  }
  s.cdi = host.Bool("cdi").value_or(false);

  const std::string mig = host.String("mig").value_or("none");
  if (mig == "only") {
    s.mig_only = true;
  } else if (mig != "none") {
    host.ConfigError(
        "mig", "must be \"none\" (whole GPUs) or \"only\" (MIG devices), not \"" + mig + "\"");
    ok = false;
  }
  if (auto profile = host.String("mig_profile")) {
    s.mig_profile = *profile;
    if (mig == "none") {
      host.ConfigError("mig_profile", "needs mig = \"only\"");
      ok = false;
    } else if (!devplug::nvidia::IsMigProfileName(*profile)) {
      host.ConfigError("mig_profile", "\"" + *profile +
                                          "\" is not a MIG profile name like \"1g.10gb\" or "
                                          "\"1c.3g.40gb\"");
      ok = false;
    }
  }
  if (s.mig_only && s.discovery == Discovery::kProcfs) {
    host.ConfigError("mig", "\"only\" needs NVML: discovery = \"procfs\" cannot list MIG devices");
    ok = false;
  }
  const std::string strategy = host.String("device_list_strategy").value_or("envvar");
  if (strategy == "volume-mounts")
    s.strategy = Strategy::kVolumeMounts;
  else if (strategy == "cdi")
    s.strategy = Strategy::kCdi;
  else if (strategy != "envvar") {
    host.ConfigError("device_list_strategy",
                     "must be \"envvar\", \"volume-mounts\" or \"cdi\", not \"" + strategy + "\"");
    ok = false;
  }
  if (host.Get("driver_mount")) {
    s.driver_mount = ParseMount(host, "driver_mount");
    ok = s.driver_mount.has_value() && ok;
  }
  if (auto extra = host.Get("extra_mounts")) {
    for (size_t i = 0; i < extra->size; i++) {
      auto m = ParseMount(host, "extra_mounts[" + std::to_string(i) + "]");
      if (m)
        s.extra_mounts.push_back(*m);
      else
        ok = false;
    }
  }
  ok = host.EnvTable("envs", &s.envs) && ok;
  for (const auto& [k, v] : s.envs) {
    if (k == kVisible) {
      host.ConfigError(("envs" + Host::Member(k)).c_str(),
                       "is set by the module from the devices given (device_list_strategy)");
      ok = false;
    }
  }
  if (!ok) return std::nullopt;
  return s;
}

}  // namespace devplug::nvidia
