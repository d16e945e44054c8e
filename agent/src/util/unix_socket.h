// Small Unix socket helpers.
#pragma once

#include <string>

namespace devplug {

// True if something accepts connections on the Unix stream socket at `path`.
bool UnixSocketIsLive(const std::string& path);

}  // namespace devplug
