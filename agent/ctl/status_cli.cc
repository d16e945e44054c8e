#include "status_cli.h"

#include <string>

#include "ops/log.h"

namespace devplug::ctl {

void AddStatusCommands(CLI::App& app, StatusCommands* out) {
  StatusOptions& so = out->options;
  out->status = app.add_subcommand(
      "status",
      "Ask the running devplugd what it serves. Exit status 0: every resource shown "
      "is registered and has a healthy device; 1: not so; 2: devplugd not reached");
  out->metrics = app.add_subcommand(
      "metrics", "Print the running devplugd's metrics (Prometheus text format)");
  out->handover = app.add_subcommand(
      "handover",
      "Restart devplugd without a gap: the running devplugd starts the installed one beside "
      "itself and leaves once that one serves (under systemd it becomes the service's main "
      "process). Exit status 0: handed over; 1: refused or the new one failed, and the old "
      "one serves on; 2: devplugd not reached, or too old to hand over");
  out->handover->add_flag("--json", so.json, "Print devplugd's answer as JSON");
  for (auto* sub : {out->status, out->metrics, out->handover}) {
    auto* sock = sub->add_option("--socket", so.socket,
                                 "devplugd's control socket (default: agent.control_socket of "
                                 "the configuration)");
    sub->add_option("--config", so.config,
                    "Read agent.control_socket from this file (default: "
                    "/etc/devplug/devplug.toml when it exists)")
        ->excludes(sock);
  }
  out->status->add_option("resource", so.resource, "Only this resource, with one row per device");
  out->status->add_flag("--json", so.json, "Print devplugd's answer as JSON");
  out->status->add_flag("--devices", so.devices, "One row per device for every resource");
  out->status->add_flag("--ready", so.ready,
                        "Readiness probe: exit 0 once devplugd answers, every resource's first "
                        "start attempt has ended (created, failed or given up) and every resource "
                        "whose module runs is registered with the kubelet; 1 before that or when "
                        "devplugd cannot be reached; device health does not count");
}

int RunStatusCommands(const StatusCommands& c) {
  if (!*c.status && !*c.metrics && !*c.handover) return -1;
  SetupLogging("devplugctl");
  SetLogLevel(LogLevel::kWarn);
  if (*c.handover) return Handover(c.options);
  return *c.status ? PrintStatus(c.options) : PrintMetrics(c.options);
}

int StatusOnlyMain(int argc, char** argv, const char* version) {
  CLI::App app{
      "devplugctl (devplugd's own: status and metrics; the simulator, demo and "
      "inspect-module come with the devplug package)"};
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", std::string("devplugctl ") + version);
  StatusCommands commands;
  AddStatusCommands(app, &commands);
  CLI11_PARSE(app, argc, argv);
  return RunStatusCommands(commands);
}

}  // namespace devplug::ctl
