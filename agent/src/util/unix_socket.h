// Small Unix socket helpers.
#pragma once

#include <sys/socket.h>

#include <string>

namespace devplug {

// True if something accepts connections on the Unix socket at `path`, of
// `type` (SOCK_STREAM or SOCK_SEQPACKET: a connect of the wrong type fails
// with EPROTOTYPE even where a listener answers).
bool UnixSocketIsLive(const std::string& path, int type = SOCK_STREAM);

}  // namespace devplug
