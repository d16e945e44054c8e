#include "devplug/common/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace devplug::common {
namespace {

constexpr size_t kMaxAttr = 64 * 1024;

FsError Err(int code, std::string path, std::string detail = {}) {
  return FsError{code, std::move(path), std::move(detail)};
}

std::string Join(const std::string& dir, const char* name) {
  std::string p = dir;
  p += '/';
  p += name;
  return p;
}

// Reads a whole small file from an open descriptor; closes it. `dir` and
// `name` make up the path for errors (name may be null).
Result<std::string> ReadFd(int fd, const std::string& dir, const char* name) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      return Err(e, name ? Join(dir, name) : dir);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() >= kMaxAttr) {
      out.resize(kMaxAttr);
      break;
    }
  }
  close(fd);
  out.resize(TrimRight(out).size());
  return out;
}

// A number's attribute: one read() where ReadFd needs two. A read shorter
// than asked is the whole value (sysfs makes an attribute in one show(), and
// a regular file's read is short only at its end); a longer text goes on
// through ReadFd.
Result<std::string> ReadNumberFd(int fd, const std::string& dir, const char* name) {
  char buf[64];
  ssize_t n;
  do n = read(fd, buf, sizeof(buf));
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    int e = errno;
    close(fd);
    return Err(e, name ? Join(dir, name) : dir);
  }
  std::string out(buf, static_cast<size_t>(n));
  if (static_cast<size_t>(n) == sizeof(buf)) {
    auto rest = ReadFd(fd, dir, name);
    if (!rest.ok()) return rest;
    return out + *rest;
  }
  close(fd);
  out.resize(TrimRight(out).size());
  return out;
}

Result<int64_t> ToInt(Result<std::string> r, const std::string& path) {
  if (!r.ok()) return r.error();
  if (auto v = ParseInt(*r)) return *v;
  return Err(EINVAL, path, "not a decimal integer: \"" + r.value() + "\"");
}

Result<uint32_t> ToHex(Result<std::string> r, const std::string& path) {
  if (!r.ok()) return r.error();
  if (auto v = ParseHex(*r)) return *v;
  return Err(EINVAL, path, "not a hex number: \"" + r.value() + "\"");
}

// Walks the directory open as `fd` (taking ownership of it); `fn` sees
// every entry but "." and "..".
std::optional<FsError> WalkFd(int fd, const std::string& path, const EntryFn& fn) {
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    int e = errno;
    close(fd);
    return Err(e, path);
  }
  int e = 0;
  for (;;) {
    errno = 0;  // readdir() reports errors only through errno
    const dirent* ent = readdir(d);
    if (ent == nullptr) {
      e = errno;
      break;
    }
    const std::string_view n = ent->d_name;
    if (n == "." || n == "..") continue;
    fn(dirfd(d), *ent);
  }
  closedir(d);
  if (e != 0) return Err(e, path);
  return std::nullopt;
}

Result<std::vector<std::string>> ListFd(int fd, const std::string& path, std::string_view prefix) {
  std::vector<std::string> names;
  if (auto err = WalkFd(fd, path, [&](int, const dirent& ent) {
        std::string_view n = ent.d_name;
        if (prefix.empty() || n.substr(0, prefix.size()) == prefix) names.emplace_back(n);
      }))
    return *err;
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::string FsError::ToString() const {
  std::string s = path;
  s += ": ";
  s += std::strerror(code);
  if (!detail.empty()) {
    s += ": ";
    s += detail;
  }
  return s;
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t' ||
                        s.back() == '\r' || s.back() == '\0'))
    s.remove_suffix(1);
  return s;
}

std::string_view Basename(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view Dirname(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string_view::npos ? std::string_view("/")
                                                       : path.substr(0, slash);
}

bool IsAbsolutePath(std::string_view p) {
  return p.size() > 1 && p[0] == '/' && p.find('\0') == std::string_view::npos &&
         p.find("/../") == std::string_view::npos &&
         (p.size() < 3 || p.substr(p.size() - 3) != "/..");
}

std::optional<int64_t> ParseInt(std::string_view s) {
  s = TrimRight(s);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  if (s.empty()) return std::nullopt;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<uint32_t> ParseHex(std::string_view s) {
  s = TrimRight(s);
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  if (s.empty() || s.size() > 8) return std::nullopt;
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

HostRoot::HostRoot(std::string root) : root_(std::move(root)) {
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
}

std::string HostRoot::Path(std::string_view abs) const {
  std::string p = root_;
  if (abs.empty() || abs.front() != '/') p += '/';
  p += abs;
  return p;
}

std::string_view HostRoot::Strip(std::string_view path) const {
  if (root_.empty()) return path;
  if (path.size() > root_.size() && path.substr(0, root_.size()) == root_ &&
      path[root_.size()] == '/')
    return path.substr(root_.size());
  return path;
}

Result<std::string> ReadAttr(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Err(errno, path);
  return ReadFd(fd, path, nullptr);
}

Result<int64_t> ReadIntAttr(const std::string& path) { return ToInt(ReadAttr(path), path); }

Result<uint32_t> ReadHexAttr(const std::string& path) { return ToHex(ReadAttr(path), path); }

Result<std::string> LinkName(const std::string& path) {
  char buf[4096];
  ssize_t n = readlink(path.c_str(), buf, sizeof(buf));
  if (n < 0) return Err(errno, path);
  if (static_cast<size_t>(n) == sizeof(buf)) return Err(ENAMETOOLONG, path);
  return std::string(Basename(std::string_view(buf, static_cast<size_t>(n))));
}

Result<std::vector<std::string>> ListDir(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Err(errno, path);
  return ListFd(fd, path, {});
}

std::optional<FsError> ForEachEntry(const std::string& path, const EntryFn& fn) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Err(errno, path);
  return WalkFd(fd, path, fn);
}

bool IsCharDeviceEntry(int dir_fd, const dirent& entry) {
  if (entry.d_type != DT_UNKNOWN) return entry.d_type == DT_CHR;
  struct stat st;  // file systems without d_type
  return fstatat(dir_fd, entry.d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISCHR(st.st_mode);
}

Result<std::vector<std::string>> ListCharDevices(const std::string& path) {
  std::vector<std::string> names;
  auto err = ForEachEntry(path, [&](int dir, const dirent& ent) {
    if (IsCharDeviceEntry(dir, ent)) names.emplace_back(ent.d_name);
  });
  if (err) {
    if (err->code == ENOENT) return std::vector<std::string>{};
    return *err;
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool IsCharDevice(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

int NumaNodeOf(const std::string& device_dir) {
  auto n = ReadIntAttr(device_dir + "/numa_node");
  return n.ok() && *n >= 0 && *n < kMaxNumaNodes ? static_cast<int>(*n) : -1;
}

int NearestNumaNode(const HostRoot& root, std::string_view sysfs_dir) {
  std::string p(sysfs_dir);
  while (p.rfind("/sys/devices/", 0) == 0) {
    if (const int n = NumaNodeOf(root.Path(p)); n >= 0) return n;
    p = std::string(Dirname(p));
  }
  return -1;
}

Result<Dir> Dir::Open(const std::string& path) {
  int fd = open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Err(errno, path);
  return Dir(fd, path);
}

Result<Dir> Dir::Sub(const char* name) const {
  int fd = openat(fd_, name, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Err(errno, Join(path_, name));
  return Dir(fd, Join(path_, name));
}

Dir& Dir::operator=(Dir&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

Dir::~Dir() {
  if (fd_ >= 0) close(fd_);
}

Result<std::string> Dir::Read(const char* name) const {
  int fd = openat(fd_, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Err(errno, Join(path_, name));
  return ReadFd(fd, path_, name);
}

Result<int64_t> Dir::ReadInt(const char* name) const {
  int fd = openat(fd_, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Err(errno, Join(path_, name));
  auto r = ReadNumberFd(fd, path_, name);
  if (!r.ok()) return r.error();
  if (auto v = ParseInt(*r)) return *v;
  return Err(EINVAL, Join(path_, name), "not a decimal integer: \"" + r.value() + "\"");
}

Result<uint32_t> Dir::ReadHex(const char* name) const {
  int fd = openat(fd_, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Err(errno, Join(path_, name));
  auto r = ReadNumberFd(fd, path_, name);
  if (!r.ok()) return r.error();
  if (auto v = ParseHex(*r)) return *v;
  return Err(EINVAL, Join(path_, name), "not a hex number: \"" + r.value() + "\"");
}

Result<std::string> Dir::ReadLink(const char* name) const {
  char buf[4096];
  ssize_t n = readlinkat(fd_, name, buf, sizeof(buf));
  if (n < 0) return Err(errno, Join(path_, name));
  if (static_cast<size_t>(n) == sizeof(buf)) return Err(ENAMETOOLONG, Join(path_, name));
  return std::string(buf, static_cast<size_t>(n));
}

Result<std::string> Dir::LinkName(const char* name) const {
  auto r = ReadLink(name);
  if (!r.ok()) return r.error();
  return std::string(Basename(*r));
}

bool Dir::Has(const char* name) const { return faccessat(fd_, name, F_OK, 0) == 0; }

Result<std::vector<std::string>> Dir::List(std::string_view prefix) const {
  int fd = openat(fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Err(errno, path_);
  return ListFd(fd, path_, prefix);
}

}  // namespace devplug::common
