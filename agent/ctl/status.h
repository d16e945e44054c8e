// devplugctl status / metrics: ask a running devplugd over its control
// socket ([agent] control_socket) what it serves, and print the answer.
#pragma once

#include <string>

namespace devplug::ctl {

struct StatusOptions {
  std::string socket;    // the control socket; empty: from `config`
  std::string config;    // empty: /etc/devplug/devplug.toml when it exists
  std::string resource;  // only this resource, with its devices
  bool json = false;     // the agent's JSON as it is
  bool devices = false;  // per-device rows for every resource
  // Readiness probe: devplugd runs and answers (it answers only once its
  // start is over); device health and registrations play no part, so an
  // Unhealthy device never gets the agent restarted. Exit 0 or 1.
  bool ready = false;
};

// Exit status: 0 when every resource shown is registered and has a healthy
// device, 1 otherwise (or no such resource), 2 when devplugd cannot be
// reached or its answer cannot be read.
int PrintStatus(const StatusOptions& options);

// PrintStatus's exit status, printing nothing.
int StatusExitCode(const StatusOptions& options);

// Prints devplugd's metrics in the Prometheus text format. Exit status 0, or
// 2 when devplugd cannot be reached.
int PrintMetrics(const StatusOptions& options);

// devplugctl handover: asks the running devplugd to start the installed
// devplugd beside itself and to leave once that one serves, so that no
// call finds nobody serving. Exit status 0 when it did, 1 when devplugd
// refused or the new one failed (the old one then serves on), 2 when
// devplugd cannot be reached or does not know the request (an older one).
int Handover(const StatusOptions& options);

}  // namespace devplug::ctl
