#include "settings.h"

#include "devplug/common/duration.h"
#include "devplug/common/pci.h"
#include "gbs.h"

namespace devplug::fpga {

using common::Host;
using std::chrono::milliseconds;

bool AllF(const std::string& id) {
  return !id.empty() && std::all_of(id.begin(), id.end(), [](char c) { return c == 'f'; });
}

bool Selects(const Settings& s, const PortFacts& f) {
  if (!s.addresses.empty() && !Contains(s.addresses, f.function)) return false;
  if (!s.ports.empty() && !Contains(s.ports, f.name)) return false;
  if (s.interface_id && f.interface_id != s.interface_id) return false;
  if (!s.region() && f.afu_id != s.afu_id) return false;
  return true;
}

namespace {

constexpr milliseconds kMaxProgramTimeout = std::chrono::seconds(29);
constexpr milliseconds kMaxFailureHold = std::chrono::hours(24);
constexpr milliseconds kMaxReleaseTimeout = std::chrono::hours(1);
constexpr milliseconds kMaxStatePoll = std::chrono::hours(1);

std::optional<milliseconds> Duration(Host& host, const char* key, milliseconds fallback,
                                     milliseconds max, bool& ok) {
  auto text = host.String(key);
  if (!text) return fallback;
  auto d = devplug::common::ParseDuration(*text, max);
  if (auto* err = std::get_if<std::string>(&d)) {
    host.ConfigError(key, *err);
    ok = false;
    return std::nullopt;
  }
  return std::get<milliseconds>(d);
}

}  // namespace

std::optional<Settings> ParseSettings(Host& host) {
  Settings s;
  bool ok = true;
  auto bad = [&](const char* key, const std::string& why) {
    host.ConfigError(key, why);
    ok = false;
  };
  const std::string mode = host.String("mode").value_or("af");
  if (mode == "af")
    s.mode = Mode::kAf;
  else if (mode == "region")
    s.mode = Mode::kRegion;
  else if (mode == "region-devel")
    s.mode = Mode::kRegionDevel;
  else
    bad("mode", "must be \"af\", \"region\" or \"region-devel\"");

  const std::string driver = host.String("driver").value_or("auto");
  if (driver == "dfl")
    s.driver = Driver::kDfl;
  else if (driver == "intel-fpga")
    s.driver = Driver::kIntelFpga;
  else if (driver != "auto")
    bad("driver", "must be \"dfl\", \"intel-fpga\" or \"auto\"");

  auto id_key = [&](const char* key) -> std::string {
    auto text = host.String(key);
    if (!text) return "";
    auto id = devplug::fpga::CanonicalId(*text);
    if (!id) {
      bad(key, "\"" + *text + "\" is not a UUID (32 hex digits, dashes allowed)");
      return "";
    }
    return *id;
  };
  s.afu_id = id_key("afu_id");  // required: the agent checked it is there
  if (host.String("interface_id")) {
    s.interface_id = id_key("interface_id");
    if (s.interface_id->empty()) s.interface_id.reset();
  }
  for (const std::string& a : host.Strings("addresses").value_or(std::vector<std::string>{})) {
    auto n = devplug::common::NormalizePciAddress(a);
    if (!n)
      bad("addresses", "\"" + a + "\" is not a PCI address like \"0000:5e:00.0\"");
    else
      s.addresses.push_back(*n);
  }
  s.ports = host.Strings("ports").value_or(std::vector<std::string>{});
  for (const std::string& p : s.ports)
    if (p.rfind("dfl-port.", 0) != 0 && p.rfind("intel-fpga-port.", 0) != 0)
      bad("ports", "\"" + p + "\" is not a port name like \"dfl-port.0\"");
  if (auto dir = host.String("bitstream_dir")) {
    if (dir->empty() || dir->front() != '/') bad("bitstream_dir", "must be an absolute path");
    s.bitstream_dir = *dir;
    while (s.bitstream_dir.size() > 1 && s.bitstream_dir.back() == '/') s.bitstream_dir.pop_back();
  }
  const std::string with = host.String("program_with").value_or("auto");
  if (with == "auto")
    s.program_with = ProgramWith::kAuto;
  else if (with == "fpgaconf")
    s.program_with = ProgramWith::kFpgaconf;
  else if (with == "ioctl")
    s.program_with = ProgramWith::kIoctl;
  else
    bad("program_with", "must be \"auto\", \"fpgaconf\" or \"ioctl\"");
  if (auto tool = host.String("fpgaconf")) {
    if (tool->empty() || tool->front() != '/') bad("fpgaconf", "must be an absolute path");
    s.fpgaconf = *tool;
  }
  if (auto d = Duration(host, "program_timeout", s.program_timeout, kMaxProgramTimeout, ok))
    s.program_timeout = *d;
  if (auto d = Duration(host, "failure_hold", s.failure_hold, kMaxFailureHold, ok))
    s.failure_hold = *d;
  if (auto d = Duration(host, "release_timeout", s.release_timeout, kMaxReleaseTimeout, ok))
    s.release_timeout = *d;
  if (host.String("program_timeout") || s.region())
    if (std::string why = host.CheckWithinPrestart(s.program_timeout); !why.empty())
      bad("program_timeout", why);
  if (s.release_timeout.count() <= 0) bad("release_timeout", "must be longer than 0");
  if (auto d = Duration(host, "state_poll", s.state_poll, kMaxStatePoll, ok)) s.state_poll = *d;

  static const char* const kActions[] = {"reset", "clear-errors", "program-idle", "command"};
  for (const std::string& a :
       host.Strings("release_actions").value_or(std::vector<std::string>{})) {
    if (std::find(std::begin(kActions), std::end(kActions), a) == std::end(kActions))
      bad("release_actions",
          "unknown action \"" + a + "\" (known: reset, clear-errors, program-idle, command)");
    else if (Contains(s.release_actions, a))
      bad("release_actions", "\"" + a + "\" is listed twice");
    else
      s.release_actions.push_back(a);
  }
  // They run in one fixed order, whatever order the list has.
  std::sort(s.release_actions.begin(), s.release_actions.end(), [](const auto& a, const auto& b) {
    auto rank = [](const std::string& x) {
      return std::find(std::begin(kActions), std::end(kActions), x) - std::begin(kActions);
    };
    return rank(a) < rank(b);
  });
  s.idle_afu_id = id_key("idle_afu_id");
  if (s.Releases("program-idle") && s.idle_afu_id.empty() && !host.String("idle_afu_id"))
    bad("release_actions", "\"program-idle\" needs idle_afu_id (the scrub accelerator)");
  // af lists a port only while it holds afu_id and never programs it: after
  // its first release the port would leave this resource for good.
  if (s.Releases("program-idle") && s.mode == Mode::kAf)
    bad("release_actions",
        "\"program-idle\" needs mode \"region\" (in mode \"af\" an idle port leaves the resource "
        "and nothing programs it back)");
  if (auto cmd = host.String("release_command")) {
    if (cmd->empty() || cmd->front() != '/') bad("release_command", "must be an absolute path");
    s.release_command = *cmd;
  }
  if (s.Releases("command") && s.release_command.empty() && !host.String("release_command"))
    bad("release_actions", "\"command\" needs release_command");
  s.health_errors = host.Bool("health_errors").value_or(false);
  s.env = host.Bool("env").value_or(true);
  if (!ok) return std::nullopt;
  return s;
}

const devplug_config_key kSettingsKeys[] = {
    {"mode", DEVPLUG_CONFIG_STRING, 0, "\"af\" (default), \"region\" or \"region-devel\""},
    {"driver", DEVPLUG_CONFIG_STRING, 0, "\"auto\" (default), \"dfl\" or \"intel-fpga\""},
    {"afu_id", DEVPLUG_CONFIG_STRING, DEVPLUG_CONFIG_REQUIRED,
     "the accelerator (AFU) ID, 32 hex digits"},
    {"interface_id", DEVPLUG_CONFIG_STRING, 0, "only cards with this FME interface ID"},
    {"addresses", DEVPLUG_CONFIG_STRING_ARRAY, 0, "only ports of these PCI functions"},
    {"ports", DEVPLUG_CONFIG_STRING_ARRAY, 0, "only these ports (\"dfl-port.0\")"},
    {"bitstream_dir", DEVPLUG_CONFIG_STRING, 0,
     "bitstreams at <dir>/<interface_id>/<afu_id>.gbs (default /srv/intel.com/fpga)"},
    {"program_with", DEVPLUG_CONFIG_STRING, 0, "\"auto\" (default), \"fpgaconf\" or \"ioctl\""},
    {"fpgaconf", DEVPLUG_CONFIG_STRING, 0, "path of OPAE's fpgaconf (default /usr/bin/fpgaconf)"},
    {"program_timeout", DEVPLUG_CONFIG_STRING, 0, "longest programming may take (default 20s)"},
    {"failure_hold", DEVPLUG_CONFIG_STRING, 0,
     "a port that failed programming is Unhealthy this long (default 60s)"},
    {"release_actions", DEVPLUG_CONFIG_STRING_ARRAY, 0,
     "after a pod: reset, clear-errors, program-idle, command"},
    {"idle_afu_id", DEVPLUG_CONFIG_STRING, 0, "the accelerator program-idle loads"},
    {"release_command", DEVPLUG_CONFIG_STRING, 0, "program run for the \"command\" action"},
    {"release_timeout", DEVPLUG_CONFIG_STRING, 0, "longest release_command may run (default 60s)"},
    {"health_errors", DEVPLUG_CONFIG_BOOL, 0, "port errors make it Unhealthy (default false)"},
    {"env", DEVPLUG_CONFIG_BOOL, 0, "set FPGA_RESOURCE_<NAME> (default true)"},
    {"state_poll", DEVPLUG_CONFIG_STRING, 0,
     "how often afu_id and power_state are read for changes no uevent tells (default 1s; 0s off)"},
    {nullptr, 0, 0, nullptr},
};

}  // namespace devplug::fpga
