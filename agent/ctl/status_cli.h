// devplugctl's `status` and `metrics` subcommands, shared by devplugctl and
// by devplugd: the container image carries devplugctl as a link to devplugd
// (its readiness probe and `kubectl exec ... devplugctl status` need these
// two only), which saves the image the 8 MiB of devplugctl's own copy of
// gRPC that the kubelet simulator needs.
#pragma once

#include <CLI/CLI.hpp>

#include "status.h"

namespace devplug::ctl {

struct StatusCommands {
  CLI::App* status = nullptr;
  CLI::App* metrics = nullptr;
  CLI::App* handover = nullptr;
  StatusOptions options;
};

// Adds the subcommands to `app`; `out` must outlive the parse.
void AddStatusCommands(CLI::App& app, StatusCommands* out);

// Runs whichever of them was given; -1 when none was.
int RunStatusCommands(const StatusCommands& commands);

// devplugd run as "devplugctl" (argv[0]): only `status`, `metrics` and
// `handover`.
int StatusOnlyMain(int argc, char** argv, const char* version);

}  // namespace devplug::ctl
