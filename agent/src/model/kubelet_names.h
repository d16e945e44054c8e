// The kubelet's rules for what a device plugin names: its resource and its
// socket. Facts about the kubelet, used by the configuration, the module
// runtime and the service alike; no dependencies.
#pragma once

#include <string>
#include <string_view>

#include "model/kubelet_limits.h"

namespace devplug::kubelet {

// The kubelet's rule for extended resource names (IsExtendedResourceName):
// empty string when valid, otherwise why not.
std::string CheckResourceName(std::string_view name);

// Checks a socket file name: a bare file name of [A-Za-z0-9._-] (not
// starting with '.') that fits in a Unix socket path inside `dir` (the
// folder the key `dir_key` names, for the message). Empty string when
// valid.
std::string CheckSocketName(std::string_view socket, std::string_view dir,
                            std::string_view dir_key = "plugin_dir");

// The default socket file name for a resource name: devplug-<name, '/' as
// '_'>.sock.
std::string DefaultSocketName(std::string_view resource_name);
// Whether a file name has that shape (a socket some devplugd may have made).
bool IsDefaultSocketName(std::string_view file_name);

// The name a device plugin socket takes while another devplugd still serves
// `socket` (a rolling update, or a new devplugd started before the old one
// stops): <stem>.b.sock for <stem>.sock, else <socket>.b. The kubelet holds
// both endpoints and sends its calls to the newer registration.
std::string SecondSocketName(std::string_view socket);

}  // namespace devplug::kubelet
