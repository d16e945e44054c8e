// Host file system access for modules: paths under host_root, sysfs
// attribute reads that return errors as values, and directory listings.
//
// Every function here takes a *host* path (host_root already applied, see
// HostRoot::Path) and never throws for file system problems; it returns a
// Result holding either the value or an FsError naming the errno and path.
#pragma once

#include <dirent.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace devplug::common {

// Why a file system read failed: the errno value (positive) and the path.
struct FsError {
  int code = 0;
  std::string path;
  std::string detail;  // optional, e.g. "not a hex number"
  // "<path>: <strerror>[: <detail>]"
  std::string ToString() const;
};

// A value or an FsError.
template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(FsError error) : v_(std::move(error)) {}  // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  const T* operator->() const { return &value(); }
  const FsError& error() const { return std::get<1>(v_); }
  // The value, or `fallback` on error.
  T value_or(T fallback) const& { return ok() ? value() : std::move(fallback); }

 private:
  std::variant<T, FsError> v_;
};

// Turns absolute host paths ("/sys/bus/pci") into paths under host_root and
// back. host_root is "/" (a real node), "/host" (a container with the host's
// root mounted), or a fixture tree in tests.
class HostRoot {
 public:
  explicit HostRoot(std::string root);
  const std::string& root() const { return root_; }
  // root + abs ("/sys" under "/host" is "/host/sys"); `abs` starts with '/'.
  std::string Path(std::string_view abs) const;
  // The inverse: a host path without the root prefix; `path` unchanged if
  // it does not start with the root.
  std::string_view Strip(std::string_view path) const;

 private:
  std::string root_;  // "" for "/"
};

// Reads a sysfs-style attribute: the file's content with trailing
// whitespace and newlines removed. Files larger than 64 KiB are cut.
Result<std::string> ReadAttr(const std::string& path);
// A decimal integer attribute ("-1", "4").
Result<int64_t> ReadIntAttr(const std::string& path);
// A hex attribute, with or without 0x ("0x8086", "0x020000").
Result<uint32_t> ReadHexAttr(const std::string& path);
// The final component of a symlink's target ("vfio-pci" for
// driver -> ../../../bus/pci/drivers/vfio-pci).
Result<std::string> LinkName(const std::string& path);
// Entry names of a directory, sorted, without "." and "..".
Result<std::vector<std::string>> ListDir(const std::string& path);
// Calls fn(dir_fd, entry) for every entry of the directory `path` but "."
// and "..", in readdir() order; dir_fd is the open directory, for
// fstatat()/readlinkat() on the entry. An error opening or reading it is
// returned (a missing folder: code ENOENT).
using EntryFn = std::function<void(int dir_fd, const struct dirent& entry)>;
std::optional<FsError> ForEachEntry(const std::string& path, const EntryFn& fn);

// True if a ForEachEntry entry is a character device (d_type, or an
// lstat where the file system does not fill it).
bool IsCharDeviceEntry(int dir_fd, const struct dirent& entry);

// Names of the character devices directly in `dir` (one directory read;
// d_type, with an lstat only where the file system does not fill it),
// sorted. A missing folder is an empty list.
Result<std::vector<std::string>> ListCharDevices(const std::string& dir);
// True if `path` exists and is a character device (following symlinks).
bool IsCharDevice(const std::string& path);
bool Exists(const std::string& path);

// A directory held open, for reading many attributes of one sysfs object
// with openat() instead of resolving the full path each time.
// NUMA placement, one rule for every module: a sysfs device directory's
// numa_node ("-1", "0".., absent without CONFIG_NUMA) is the node when it is
// 0..kMaxNumaNodes-1 (MAX_NUMNODES with the largest NODES_SHIFT, 10), else
// -1 (unknown).
inline constexpr int kMaxNumaNodes = 1024;
// `device_dir` has host_root applied.
int NumaNodeOf(const std::string& device_dir);
// For a device below its bus device (a tty, input or USB device under its
// PCI function): the node of the nearest directory from `sysfs_dir` (without
// host_root, under /sys/devices) upwards that names one; -1 when none does.
int NearestNumaNode(const HostRoot& root, std::string_view sysfs_dir);

class Dir {
 public:
  static Result<Dir> Open(const std::string& path);
  Dir(Dir&& other) noexcept : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}
  Dir& operator=(Dir&& other) noexcept;
  Dir(const Dir&) = delete;
  Dir& operator=(const Dir&) = delete;
  ~Dir();

  const std::string& path() const { return path_; }
  // A subdirectory (following symlinks, as sysfs device links need).
  Result<Dir> Sub(const char* name) const;
  Result<std::string> Read(const char* name) const;
  Result<int64_t> ReadInt(const char* name) const;
  Result<uint32_t> ReadHex(const char* name) const;
  Result<std::string> LinkName(const char* name) const;
  // The full target of a symlink.
  Result<std::string> ReadLink(const char* name) const;
  bool Has(const char* name) const;
  // Entry names, sorted, without "." and ".."; only those starting with
  // `prefix` when given.
  Result<std::vector<std::string>> List(std::string_view prefix = {}) const;

 private:
  Dir(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// Parsing helpers shared by the attribute readers.
std::optional<int64_t> ParseInt(std::string_view s);
std::optional<uint32_t> ParseHex(std::string_view s);  // "0x8086" or "8086"
std::string_view TrimRight(std::string_view s);
std::string_view Basename(std::string_view path);
// The directory part of an absolute path: "/dev/net" of "/dev/net/tun", "/"
// of "/dev".
std::string_view Dirname(std::string_view path);
// What a configured host or container path must be: absolute, not "/"
// alone, without ".." components or NUL bytes.
bool IsAbsolutePath(std::string_view path);

}  // namespace devplug::common
