#include "util/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace devplug {

bool UnixSocketIsLive(const std::string& path, int type) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return false;
  // Non-blocking: a listener that does not accept (its backlog full) would
  // hold a blocking connect, and the caller's thread, for ever. EAGAIN is
  // that listener: live.
  const int fd = socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const bool live =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 || errno == EAGAIN;
  close(fd);
  return live;
}

bool UnlinkIfSame(const std::string& path, std::pair<dev_t, ino_t> file) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || std::make_pair(st.st_dev, st.st_ino) != file) return false;
  return unlink(path.c_str()) == 0;
}

}  // namespace devplug
