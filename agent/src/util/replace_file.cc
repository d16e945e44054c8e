#include "util/replace_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace devplug {
namespace {

bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Status ReplaceFile(const std::string& dir, const std::string& name, const std::string& content,
                   mode_t mode, std::string_view tmp_prefix, bool durable) {
  std::string tmp = StrCat(dir, "/", tmp_prefix, "XXXXXX.tmp");
  const int fd = ::mkostemps(tmp.data(), 4, O_CLOEXEC);
  if (fd < 0)
    return UnavailableError(
        StrCat("cannot open a temporary file in ", dir, ": ", std::strerror(errno)));
  int err = 0;
  if (!WriteAll(fd, content)) err = errno ? errno : EIO;
  if (err == 0 && ::fchmod(fd, mode) != 0) err = errno;
  if (err == 0 && durable && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  const std::string path = StrCat(dir, "/", name);
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return UnavailableError(StrCat("cannot write ", path, ": ", std::strerror(err)));
  }
  if (durable) {
    // The rename itself reaches the disk with its folder.
    if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }
  return OkStatus();
}

}  // namespace devplug
