// The rule for where devplugd may send its API server credentials: an
// https:// URL, or http:// only to this host's loopback address (a token
// sent over plain HTTP to anywhere else travels in clear).
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace devplug {

// Why `url` is not an API server devplugd talks to ("" when it is):
// https://HOST[:PORT][/...], or http:// with HOST 127.0.0.0/8, localhost
// or [::1].
std::string CheckApiServerUrl(std::string_view url);

}  // namespace devplug
