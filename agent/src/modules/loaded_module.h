// A module shared object loaded with dlopen and checked against the ABI.
//
// Thread safety: immutable after Load(); share freely.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "config/config.h"
#include "devplug/module.h"
#include "util/status.h"

namespace devplug::modules {

// A DEVPLUG_CONFIG_* type in words: "integer", or with `article` "an
// integer" (for "must be ..." messages).
std::string_view KeyTypeName(uint32_t type, bool article = false);

class LoadedModule {
 public:
  // Which file a module came from: replaced on disk means another identity.
  struct FileId {
    uint64_t dev = 0, ino = 0;
    int64_t mtime_ns = 0, size = 0;
    bool operator==(const FileId&) const = default;
  };
  static std::optional<FileId> Identify(const std::string& path);

  // dlopen(RTLD_NOW | RTLD_LOCAL), resolve the entry symbol, negotiate the
  // version and check the descriptor. The error names the file and reason.
  // The same file loaded twice is one LoadedModule. A file replaced on disk
  // while its old version is still loaded (a reload upgrading a module) is
  // loaded beside the old one.
  static StatusOr<std::shared_ptr<const LoadedModule>> Load(const std::string& path);

  const std::string& path() const { return path_; }
  const devplug_module& descriptor() const { return *desc_; }
  std::string_view name() const { return desc_->name; }
  std::string_view version() const { return desc_->version ? desc_->version : ""; }

  // Optional members, checked against the descriptor's struct_size.
  bool has_on_udev_event() const;
  bool has_allocate() const;
  bool has_preferred_allocation() const;
  bool has_pre_start() const;
  bool has_on_release() const;  // ABI 1.2
  // pre_start and on_release may run apart from the other calls (ABI 1.7,
  // DEVPLUG_CONCURRENT_SLOW_CALLS).
  bool slow_calls_apart() const;
  // How many of them may run at once on disjoint devices: 0 (none apart: on
  // the worker), 1 (one lane, ABI 1.7), or with DEVPLUG_CONCURRENT_DEVICES
  // (ABI 1.8) the module's max_slow_calls, kDefaultSlowLanes when it says 0.
  size_t slow_call_lanes() const;
  static constexpr size_t kDefaultSlowLanes = 4;

  // Checks a [[resource]] table's module keys against the declared keys:
  // unknown keys, wrong types, missing required keys. Each problem is one
  // line "file:line: resource[i].key: problem".
  Status CheckKeys(const config::ResourceConfig& resource, size_t index) const;

  // The declared type of `key`, or 0 if it is not declared.
  uint32_t KeyType(std::string_view key) const;

  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;
  // Unloads the shared object. Every instance holds a reference, and one
  // given up (stuck in a call) is never destroyed, so nothing runs module
  // code any more when the last reference goes.
  ~LoadedModule();

  const FileId& file_id() const { return file_id_; }

 private:
  LoadedModule() = default;
  std::string path_;
  void* handle_ = nullptr;
  FileId file_id_;
  const devplug_module* desc_ = nullptr;
};

// Resolves a [[resource]] module setting to a file: an absolute path as is,
// a bare name as <module_dir>/<name>.so.
std::string ResolveModulePath(const std::string& module, const std::string& module_dir);

}  // namespace devplug::modules
