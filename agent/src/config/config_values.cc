// The configuration's value vocabulary, apart from the parser (config.cc):
// durations, the metrics address, log levels, registration modes, udev
// sources, and how a problem is located ("file:line: key: problem").
#include "config/config.h"
#include "devplug/common/duration.h"
#include "model/dra_names.h"

namespace devplug::config {

StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text,
                                                  std::chrono::milliseconds max) {
  auto d = common::ParseDuration(text, max);
  if (auto* why = std::get_if<std::string>(&d)) return InvalidArgumentError(std::move(*why));
  return std::get<std::chrono::milliseconds>(d);
}

std::string CheckMetricsAddress(std::string_view address) {
  if (address.empty()) return "";
  if (address.starts_with("unix:"))
    return "Unix-socket metrics are not available (Debian's civetweb is built without them); "
           "use host:port, or `devplugctl metrics` over the control socket";
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return StrCat("\"", address, "\" is not host:port (e.g. \"127.0.0.1:9847\")");
  const std::string_view port = address.substr(colon + 1);
  int p = 0;
  for (char c : port) {
    if (c < '0' || c > '9' || p > 65535) return StrCat("port \"", port, "\" is not a number");
    p = p * 10 + (c - '0');
  }
  if (port.empty() || p < 1 || p > 65535) return StrCat("port \"", port, "\" is not 1 to 65535");
  return "";
}

std::string FormatDuration(std::chrono::milliseconds d) { return common::FormatDuration(d); }

std::string Located(const SourceLocation& where, std::string_view key, std::string_view problem) {
  std::string out = where.line > 0 ? StrCat(where.file, ":", where.line) : where.file;
  if (!key.empty()) StrAppend(&out, ": ", key);
  StrAppend(&out, ": ", problem);
  return out;
}

std::string ResourceKey(size_t index, std::string_view key) {
  return StrCat("resource[", index, "].", key);
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

bool ParseLogLevel(std::string_view name, LogLevel* out) {
  for (LogLevel l :
       {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (name == LogLevelName(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

std::string_view ServingApiName(ServingApi api) {
  return api == ServingApi::kDra ? "dra" : "device-plugin";
}

bool ParseServingApi(std::string_view text, ServingApi* out) {
  if (text == "device-plugin")
    *out = ServingApi::kDevicePlugin;
  else if (text == "dra")
    *out = ServingApi::kDra;
  else
    return false;
  return true;
}

std::string DefaultDriverName(std::string_view resource_name) {
  const size_t slash = resource_name.find('/');
  std::string out = slash == std::string_view::npos ? std::string(resource_name)
                                                    : StrCat(resource_name.substr(slash + 1), ".",
                                                             resource_name.substr(0, slash));
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c == '_') c = '-';
  }
  return out;
}

std::string CheckDriverName(std::string_view name) { return dra::CheckDnsSubdomain(name, 63); }

std::string_view RegistrationModeName(RegistrationMode mode) {
  return mode == RegistrationMode::kPluginWatcher ? "plugin-watcher" : "kubelet";
}

bool ParseRegistrationMode(std::string_view text, RegistrationMode* out) {
  if (text == "kubelet")
    *out = RegistrationMode::kKubelet;
  else if (text == "plugin-watcher")
    *out = RegistrationMode::kPluginWatcher;
  else
    return false;
  return true;
}

std::string_view CdiModeName(CdiMode mode) {
  switch (mode) {
    case CdiMode::kCri:
      return "cri";
    case CdiMode::kAnnotations:
      return "annotations";
    case CdiMode::kBoth:
      return "both";
    case CdiMode::kOff:
      break;
  }
  return "off";
}

bool ParseCdiMode(std::string_view text, CdiMode* out) {
  for (CdiMode m : {CdiMode::kOff, CdiMode::kCri, CdiMode::kAnnotations, CdiMode::kBoth}) {
    if (text == CdiModeName(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

std::string_view UdevSourceName(UdevSource source) {
  switch (source) {
    case UdevSource::kAuto:
      return "auto";
    case UdevSource::kUdev:
      return "udev";
    case UdevSource::kKernel:
      return "kernel";
  }
  return "auto";
}

}  // namespace devplug::config
