#include "cdi/spec_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "cdi/spec.h"
#include "util/replace_file.h"

namespace devplug::cdi {

std::string UnderHostRoot(const std::string& host_root, const std::string& path) {
  if (host_root.empty() || host_root == "/") return path;
  return host_root + path;
}

namespace {

Status Errno(std::string_view what, const std::string& path, int err) {
  return UnavailableError(StrCat(what, " ", path, ": ", std::strerror(err)));
}

// mkdir -p, mode 0755.
int MakeDirs(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at != dir.size() && dir[at] != '/') continue;
    const std::string part = dir.substr(0, at);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return errno;
  }
  return 0;
}

}  // namespace

Status WriteSpecFile(const std::string& dir, const std::string& name, const std::string& content) {
  if (int err = MakeDirs(dir); err != 0) return Errno("cannot create", dir, err);
  return ReplaceFile(dir, name, content, 0644, StrCat(".", kFilePrefix));
}

Status RemoveSpecFile(const std::string& dir, const std::string& name) {
  const std::string path = StrCat(dir, "/", name);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("cannot remove", path, errno);
  return OkStatus();
}

std::vector<std::string> OwnedFiles(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  const std::string tmp_prefix = StrCat(".", kFilePrefix);
  const time_t now = ::time(nullptr);
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n.substr(0, kFilePrefix.size()) == kFilePrefix) {
      out.emplace_back(n);
      continue;
    }
    if (n.substr(0, tmp_prefix.size()) != tmp_prefix || n.size() <= 4 ||
        n.substr(n.size() - 4) != ".tmp")
      continue;
    // A temporary file lives for the few milliseconds of a write (another
    // thread's, perhaps: a worker's or a DRA prepare's). Only one left
    // behind by an interrupted write, older than that by far, is listed.
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        now - st.st_mtime >= kTemporaryFileAge.count())
      out.emplace_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace devplug::cdi
