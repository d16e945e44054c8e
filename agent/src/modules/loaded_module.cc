#include "modules/loaded_module.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "util/mutex.h"

namespace devplug::modules {
namespace {

// The descriptor must reach at least the last required member.
constexpr size_t kMinDescriptorSize =
    offsetof(devplug_module, list_devices) + sizeof(devplug_module::list_devices);

bool Matches(const config::ModuleValue& v, uint32_t type) {
  switch (type) {
    case DEVPLUG_CONFIG_STRING:
      return std::holds_alternative<std::string>(v.value);
    case DEVPLUG_CONFIG_INT:
      return std::holds_alternative<int64_t>(v.value);
    case DEVPLUG_CONFIG_BOOL:
      return std::holds_alternative<bool>(v.value);
    case DEVPLUG_CONFIG_STRING_ARRAY:
      return std::holds_alternative<std::vector<std::string>>(v.value) && !v.array_of_non_strings;
    case DEVPLUG_CONFIG_INT_ARRAY: {
      const auto* s = std::get_if<std::vector<std::string>>(&v.value);
      return std::holds_alternative<std::vector<int64_t>>(v.value) ||
             (s != nullptr && s->empty() && !v.array_of_non_strings);
    }
    case DEVPLUG_CONFIG_TABLE:
      return v.tree != nullptr && v.tree->kind == config::ConfigNode::Kind::kTable;
    case DEVPLUG_CONFIG_ARRAY:
      return v.tree != nullptr && v.tree->kind == config::ConfigNode::Kind::kArray;
    default:
      return false;
  }
}

}  // namespace

std::string ResolveModulePath(const std::string& module, const std::string& module_dir) {
  if (!module.empty() && module.front() == '/') return module;
  return StrCat(module_dir, "/", module, ".so");
}

namespace {

// Modules loaded now, by path: the same file is shared, a replaced one
// loaded beside it.
Mutex g_loaded_mu;
std::map<std::string, std::weak_ptr<const LoadedModule>> g_loaded DEVPLUG_GUARDED_BY(g_loaded_mu);

// dlopen() knows an object by the name it was opened with, so a module file
// replaced on disk while the old one is loaded would come back as the old
// one. A name used once and for nothing else makes the loader open the file
// afresh: a symlink in a private folder, removed once the file is mapped.
void* OpenFresh(const std::string& path, std::string* error) {
  static std::atomic<uint64_t> seq{0};
  static const std::string dir = [] {
    const char* base = std::getenv("RUNTIME_DIRECTORY");  // systemd's RuntimeDirectory=
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/devplug-modules.XXXXXX";
    return mkdtemp(tmpl.data()) ? tmpl : std::string();
  }();
  if (dir.empty()) {
    *error = "no private folder to load a replaced module from";
    return nullptr;
  }
  const std::string link = StrCat(dir, "/", ++seq, "-", path.substr(path.rfind('/') + 1));
  if (symlink(path.c_str(), link.c_str()) != 0) {
    *error = StrCat("symlink ", link, ": ", std::strerror(errno));
    return nullptr;
  }
  dlerror();
  void* handle = dlopen(link.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    *error = err ? err : "unknown dlopen error";
  }
  unlink(link.c_str());
  return handle;
}

}  // namespace

std::optional<LoadedModule::FileId> LoadedModule::Identify(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
                static_cast<int64_t>(st.st_size)};
}

LoadedModule::~LoadedModule() {
  if (handle_ != nullptr) dlclose(handle_);
}

StatusOr<std::shared_ptr<const LoadedModule>> LoadedModule::Load(const std::string& path) {
  MutexLock registry_lock(g_loaded_mu);
  const std::optional<FileId> id = Identify(path);
  bool replaced = false;
  if (auto it = g_loaded.find(path); it != g_loaded.end()) {
    if (auto loaded = it->second.lock()) {
      if (id && loaded->file_id() == *id) return loaded;
      replaced = true;
    }
  }
  dlerror();
  std::string open_error;
  void* handle =
      replaced ? OpenFresh(path, &open_error) : dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    if (!replaced) {
      const char* err = dlerror();
      open_error = err ? err : "unknown dlopen error";
    }
    return FailedPreconditionError(StrCat("module ", path, ": cannot load: ", open_error));
  }
  auto fail = [&](std::string_view why) {
    dlclose(handle);
    return FailedPreconditionError(StrCat("module ", path, ": ", why));
  };
  void* sym = dlsym(handle, DEVPLUG_MODULE_ENTRY_SYMBOL);
  if (sym == nullptr) {
    return fail("no " DEVPLUG_MODULE_ENTRY_SYMBOL
                " symbol (not a devplug module, or built for another ABI major version)");
  }
  auto entry = reinterpret_cast<devplug_module_entry_fn>(sym);
  const devplug_module* desc = nullptr;
  if (int rc = entry(DEVPLUG_MODULE_ABI_MINOR, &desc); rc < 0) {
    return fail(StrCat("entry point refused this agent (ABI 1.", DEVPLUG_MODULE_ABI_MINOR,
                       "): ", strerror(-rc)));
  }
  if (desc == nullptr) return fail("entry point returned no descriptor");
  if (desc->struct_size < kMinDescriptorSize) {
    return fail(StrCat("descriptor is ", desc->struct_size, " bytes; at least ", kMinDescriptorSize,
                       " are required"));
  }
  if (desc->abi_major != DEVPLUG_MODULE_ABI_MAJOR) {
    return fail(StrCat("built for ABI major ", desc->abi_major, ", this agent speaks ",
                       DEVPLUG_MODULE_ABI_MAJOR));
  }
  if (desc->name == nullptr || desc->name[0] == '\0') return fail("descriptor has no name");
  std::vector<std::string> missing;
  if (desc->create == nullptr) missing.push_back("create");
  if (desc->destroy == nullptr) missing.push_back("destroy");
  if (desc->list_devices == nullptr) missing.push_back("list_devices");
  if (!missing.empty()) return fail(StrCat("required functions missing: ", StrJoin(missing, ", ")));
  for (const devplug_config_key* k = desc->config_keys; k && k->name; ++k) {
    if (k->type < DEVPLUG_CONFIG_STRING || k->type > DEVPLUG_CONFIG_ARRAY)
      return fail(StrCat("config key \"", k->name, "\" has unknown type ", k->type));
  }

  auto m = std::shared_ptr<LoadedModule>(new LoadedModule());
  m->path_ = path;
  m->handle_ = handle;
  m->desc_ = desc;
  if (id) m->file_id_ = *id;
  std::shared_ptr<const LoadedModule> out = std::move(m);
  g_loaded[path] = out;
  return out;
}

#define DEVPLUG_OPTIONAL(member) \
  (DEVPLUG_HAS_MEMBER(desc_, devplug_module, member) && desc_->member != nullptr)
bool LoadedModule::has_on_udev_event() const { return DEVPLUG_OPTIONAL(on_udev_event); }
bool LoadedModule::has_allocate() const { return DEVPLUG_OPTIONAL(allocate); }
bool LoadedModule::has_preferred_allocation() const {
  return DEVPLUG_OPTIONAL(preferred_allocation);
}
bool LoadedModule::has_pre_start() const { return DEVPLUG_OPTIONAL(pre_start); }
bool LoadedModule::has_on_release() const { return DEVPLUG_OPTIONAL(on_release); }
#undef DEVPLUG_OPTIONAL
bool LoadedModule::slow_calls_apart() const {
  return DEVPLUG_HAS_MEMBER(desc_, devplug_module, concurrency) &&
         (desc_->concurrency & (DEVPLUG_CONCURRENT_SLOW_CALLS | DEVPLUG_CONCURRENT_DEVICES)) != 0 &&
         (has_pre_start() || has_on_release());
}

size_t LoadedModule::slow_call_lanes() const {
  if (!slow_calls_apart()) return 0;
  if ((desc_->concurrency & DEVPLUG_CONCURRENT_DEVICES) == 0) return 1;
  // max_slow_calls shares concurrency's struct_size (it was reserved before
  // minor 8, and zero).
  const uint32_t max = desc_->max_slow_calls;
  return max > 0 ? std::min<size_t>(max, 64) : kDefaultSlowLanes;
}

uint32_t LoadedModule::KeyType(std::string_view key) const {
  for (const devplug_config_key* k = desc_->config_keys; k && k->name; ++k)
    if (key == k->name) return k->type;
  return 0;
}

std::string_view KeyTypeName(uint32_t type, bool article) {
  switch (type) {
    case DEVPLUG_CONFIG_STRING:
      return article ? "a string" : "string";
    case DEVPLUG_CONFIG_INT:
      return article ? "an integer" : "integer";
    case DEVPLUG_CONFIG_BOOL:
      return article ? "a boolean" : "boolean";
    case DEVPLUG_CONFIG_STRING_ARRAY:
      return article ? "an array of strings" : "string array";
    case DEVPLUG_CONFIG_INT_ARRAY:
      return article ? "an array of integers" : "integer array";
    case DEVPLUG_CONFIG_TABLE:
      return article ? "a table" : "table";
    case DEVPLUG_CONFIG_ARRAY:
      return article ? "an array" : "array";
    default:
      return article ? "an unknown type" : "?";
  }
}

Status LoadedModule::CheckKeys(const config::ResourceConfig& r, size_t index) const {
  std::vector<std::string> errors;
  auto key_of = [&](std::string_view k) { return config::ResourceKey(index, k); };
  for (const auto& [key, value] : r.module_keys) {
    const uint32_t type = KeyType(key);
    if (type == 0) {
      std::vector<std::string> known{"name", "module", "socket", "required"};
      for (const devplug_config_key* k = desc_->config_keys; k && k->name; ++k)
        known.emplace_back(k->name);
      errors.push_back(config::Located(value.where, key_of(key),
                                       StrCat("unknown key for module \"", desc_->name,
                                              "\" (known: ", StrJoin(known, ", "), ")")));
    } else if (!Matches(value, type)) {
      errors.push_back(config::Located(value.where, key_of(key),
                                       StrCat("must be ", KeyTypeName(type, /*article=*/true))));
    }
  }
  for (const devplug_config_key* k = desc_->config_keys; k && k->name; ++k) {
    if ((k->flags & DEVPLUG_CONFIG_REQUIRED) && !r.module_keys.contains(k->name)) {
      errors.push_back(config::Located(
          r.where, key_of(k->name), StrCat("missing (required by module \"", desc_->name, "\")")));
    }
  }
  if (errors.empty()) return OkStatus();
  return InvalidArgumentError(StrJoin(errors, "\n"));
}

}  // namespace devplug::modules
