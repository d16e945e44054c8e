// Small Unix socket helpers.
#pragma once

#include <sys/socket.h>

#include <sys/types.h>

#include <string>
#include <utility>

namespace devplug {

// True if something accepts connections on the Unix socket at `path`, of
// `type` (SOCK_STREAM or SOCK_SEQPACKET: a connect of the wrong type fails
// with EPROTOTYPE even where a listener answers).
bool UnixSocketIsLive(const std::string& path, int type = SOCK_STREAM);

// Removes the file at `path` only if it is still the one with this device
// and inode (the socket we bound), never one another process put there.
bool UnlinkIfSame(const std::string& path, std::pair<dev_t, ino_t> file);

}  // namespace devplug
