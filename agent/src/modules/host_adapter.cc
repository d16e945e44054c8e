#include "modules/host_adapter.h"

#include <cerrno>
#include <cstddef>

#include <cstring>

#include <spdlog/spdlog.h>

#include "util/utf8.h"

namespace devplug::modules {
namespace {

// The longest set_error() or config_error() text kept.
constexpr size_t kMaxErrorBytes = 4096;

// Module text as it enters the agent: it reaches logs, the status JSON and
// the kubelet's gRPC status, so it is made printable UTF-8 once, here.
std::string ModuleText(const char* s) {
  if (s == nullptr) return "";
  return PrintableUtf8(std::string_view(s, strnlen(s, kMaxErrorBytes)), kMaxErrorBytes);
}

spdlog::level::level_enum SpdLevel(int32_t level) {
  switch (level) {
    case DEVPLUG_LOG_ERROR:
      return spdlog::level::err;
    case DEVPLUG_LOG_WARN:
      return spdlog::level::warn;
    case DEVPLUG_LOG_INFO:
      return spdlog::level::info;
    case DEVPLUG_LOG_DEBUG:
      return spdlog::level::debug;
    default:
      return spdlog::level::trace;
  }
}

}  // namespace

thread_local HostAdapter::CallContext* HostAdapter::current_call_ = nullptr;
thread_local HostAdapter::CallContext HostAdapter::lane_call_;

HostAdapter::HostAdapter(const LoadedModule& module, const config::ResourceConfig& resource,
                         Options options)
    : module_(module), resource_(resource), options_(std::move(options)) {
  worker_call_.owner = this;
  host_.struct_size = sizeof(host_);
  host_.abi_minor = DEVPLUG_MODULE_ABI_MINOR;
  host_.agent_data = this;
  host_.resource_name = resource_.name.c_str();
  host_.host_root = options_.host_root.c_str();
  host_.log = &Log;
  host_.devices_changed = &DevicesChanged;
  host_.set_error = &SetError;
  host_.config_error = &ConfigError;
  host_.config_string = &String;
  host_.config_int = &Int;
  host_.config_bool = &Bool;
  host_.config_string_array = &StringArray;
  host_.config_int_array = &IntArray;
  host_.pod_of = &PodOf;
  host_.track_releases = &TrackReleases;
  host_.use_pre_start = &UsePreStart;
  host_.config_value = &ConfigValue;
  host_.config_member = &ConfigMember;
  host_.watch_path = &WatchPath;
  host_.prestart_timeout_ms = options_.prestart_timeout.count();
  host_.resource_index = static_cast<int32_t>(options_.index);
  for (const auto& [key, value] : resource_.module_keys) {
    if (const auto* v = std::get_if<std::vector<std::string>>(&value.value)) {
      auto& arr = string_arrays_[key];
      for (const std::string& s : *v) arr.push_back(s.c_str());
    }
  }
}

HostAdapter::CallContext& HostAdapter::Call() {
  if (current_call_ != nullptr && current_call_->owner == this) return *current_call_;
  return worker_call_;
}

void HostAdapter::BindLane() {
  lane_call_ = CallContext();
  lane_call_.owner = this;
  current_call_ = &lane_call_;
}

std::string HostAdapter::Why(int rc) {
  const std::string& e = Call().error;
  return e.empty() ? std::strerror(rc < 0 ? -rc : rc) : e;
}

void HostAdapter::EndWatches() {
  if (options_.watches) options_.watches->EndAll();
}

HostAdapter* HostAdapter::Self(const devplug_host* h) {
  return static_cast<HostAdapter*>(h->agent_data);
}

void HostAdapter::Log(const devplug_host* h, int32_t level, const char* msg) {
  if (h == nullptr || msg == nullptr) return;
  try {
    HostAdapter* self = Self(h);
    spdlog::log(SpdLevel(level), "{} [{}]: {}", self->resource_.name, self->module_.name(), msg);
  } catch (...) {
  }
}

void HostAdapter::DevicesChanged(const devplug_host* h) {
  if (h == nullptr) return;
  try {
    if (const auto& f = Self(h)->options_.devices_changed) f();
  } catch (...) {
  }
}

void HostAdapter::SetError(const devplug_host* h, const char* msg) {
  if (h == nullptr) return;
  try {
    Self(h)->Call().error = ModuleText(msg);
  } catch (...) {
  }
}

void HostAdapter::ConfigError(const devplug_host* h, const char* key, const char* msg) {
  if (h == nullptr) return;
  try {
    HostAdapter* self = Self(h);
    const config::ResourceConfig& r = self->resource_;
    const std::string k = ModuleText(key);
    // The key's line, or for a path into a table or array the nested
    // value's own line.
    config::SourceLocation where = r.where;
    if (auto it = r.module_keys.find(std::string(config::PathTopKey(k))); it != r.module_keys.end())
      where = it->second.where;
    int error = 0;
    if (const config::ConfigNode* n = self->FindConfig(k.c_str(), &error); n && n->line > 0)
      where.line = n->line;
    self->config_errors_.push_back(config::Located(where,
                                                   config::ResourceKey(self->options_.index, k),
                                                   msg ? ModuleText(msg) : "invalid value"));
  } catch (...) {
  }
}

namespace {
template <typename T>
int Get(const config::ResourceConfig& r, const LoadedModule& m, const char* key, uint32_t type,
        const T** out) {
  if (key == nullptr || m.KeyType(key) != type) return -EINVAL;
  auto it = r.module_keys.find(key);
  if (it == r.module_keys.end()) return -ENOENT;
  const T* v = std::get_if<T>(&it->second.value);
  if (v == nullptr) return -EINVAL;
  *out = v;
  return 0;
}
}  // namespace

int HostAdapter::String(const devplug_host* h, const char* key, const char** ret) {
  if (h == nullptr || ret == nullptr) return -EINVAL;
  const std::string* v = nullptr;
  const int rc = Get(Self(h)->resource_, Self(h)->module_, key, DEVPLUG_CONFIG_STRING, &v);
  if (rc == 0) *ret = v->c_str();
  return rc;
}

int HostAdapter::Int(const devplug_host* h, const char* key, int64_t* ret) {
  if (h == nullptr || ret == nullptr) return -EINVAL;
  const int64_t* v = nullptr;
  const int rc = Get(Self(h)->resource_, Self(h)->module_, key, DEVPLUG_CONFIG_INT, &v);
  if (rc == 0) *ret = *v;
  return rc;
}

int HostAdapter::Bool(const devplug_host* h, const char* key, int32_t* ret) {
  if (h == nullptr || ret == nullptr) return -EINVAL;
  const bool* v = nullptr;
  const int rc = Get(Self(h)->resource_, Self(h)->module_, key, DEVPLUG_CONFIG_BOOL, &v);
  if (rc == 0) *ret = *v ? 1 : 0;
  return rc;
}

int HostAdapter::IntArray(const devplug_host* h, const char* key, const int64_t** ret,
                          size_t* ret_n) {
  if (h == nullptr || ret == nullptr || ret_n == nullptr || key == nullptr) return -EINVAL;
  HostAdapter* self = Self(h);
  if (self->module_.KeyType(key) != DEVPLUG_CONFIG_INT_ARRAY) return -EINVAL;
  auto it = self->resource_.module_keys.find(key);
  if (it == self->resource_.module_keys.end()) return -ENOENT;
  static const int64_t kNone[] = {0};
  if (const auto* v = std::get_if<std::vector<int64_t>>(&it->second.value)) {
    *ret = v->data();
    *ret_n = v->size();
    return 0;
  }
  // An empty TOML array.
  *ret = kNone;
  *ret_n = 0;
  return 0;
}

int HostAdapter::StringArray(const devplug_host* h, const char* key, const char* const** ret,
                             size_t* ret_n) {
  if (h == nullptr || ret == nullptr || ret_n == nullptr) return -EINVAL;
  HostAdapter* self = Self(h);
  const std::vector<std::string>* v = nullptr;
  const int rc = Get(self->resource_, self->module_, key, DEVPLUG_CONFIG_STRING_ARRAY, &v);
  if (rc != 0) return rc;
  auto it = self->string_arrays_.find(std::string_view(key));
  static const char* const kEmpty[] = {nullptr};
  *ret = (it == self->string_arrays_.end() || it->second.empty()) ? kEmpty : it->second.data();
  *ret_n = v->size();
  return 0;
}

const config::ConfigNode* HostAdapter::FindConfig(const char* path, int* error) const {
  *error = -EINVAL;
  if (path == nullptr) return nullptr;
  const std::string_view p(path);
  const std::string_view top = config::PathTopKey(p);
  if (top.empty() || module_.KeyType(top) == 0) return nullptr;
  auto it = resource_.module_keys.find(std::string(top));
  if (it == resource_.module_keys.end() || !it->second.tree) {
    *error = -ENOENT;
    return nullptr;
  }
  return config::FindNode(*it->second.tree, p.substr(top.size()), error);
}

int HostAdapter::ConfigValue(const devplug_host* h, const char* path, devplug_config_value* ret) {
  if (h == nullptr || ret == nullptr ||
      ret->struct_size < offsetof(devplug_config_value, type) + sizeof(ret->type))
    return -EINVAL;
  int error = 0;
  const config::ConfigNode* n = Self(h)->FindConfig(path, &error);
  if (n == nullptr) return error;
  using Kind = config::ConfigNode::Kind;
  uint32_t type = DEVPLUG_CONFIG_OTHER;
  switch (n->kind) {
    case Kind::kString:
      type = DEVPLUG_CONFIG_STRING;
      break;
    case Kind::kInt:
      type = DEVPLUG_CONFIG_INT;
      break;
    case Kind::kBool:
      type = DEVPLUG_CONFIG_BOOL;
      break;
    case Kind::kArray:
      type = DEVPLUG_CONFIG_ARRAY;
      break;
    case Kind::kTable:
      type = DEVPLUG_CONFIG_TABLE;
      break;
    case Kind::kOther:
      break;
  }
  ret->type = type;
  if (DEVPLUG_HAS_MEMBER(ret, devplug_config_value, string))
    ret->string = n->kind == Kind::kString ? n->text.c_str() : nullptr;
  if (DEVPLUG_HAS_MEMBER(ret, devplug_config_value, integer)) ret->integer = n->integer;
  if (DEVPLUG_HAS_MEMBER(ret, devplug_config_value, boolean)) ret->boolean = n->boolean ? 1 : 0;
  if (DEVPLUG_HAS_MEMBER(ret, devplug_config_value, size))
    ret->size = n->kind == Kind::kArray ? n->items.size()
                                        : (n->kind == Kind::kTable ? n->members.size() : 0);
  if (DEVPLUG_HAS_MEMBER(ret, devplug_config_value, line)) ret->line = n->line;
  return 0;
}

int HostAdapter::ConfigMember(const devplug_host* h, const char* path, size_t index,
                              const char** ret_name) {
  if (h == nullptr || ret_name == nullptr) return -EINVAL;
  int error = 0;
  const config::ConfigNode* n = Self(h)->FindConfig(path, &error);
  if (n == nullptr) return error;
  if (n->kind != config::ConfigNode::Kind::kTable) return -EINVAL;
  if (index >= n->members.size()) return -ENOENT;
  *ret_name = n->members[index].first.c_str();
  return 0;
}

int HostAdapter::WatchPath(const devplug_host* h, const char* path) {
  if (h == nullptr || path == nullptr || path[0] != '/' || path[1] == '\0') return -EINVAL;
  HostAdapter* self = Self(h);
  if (!self->options_.watches) return -ENOSYS;
  try {
    const std::string& root = self->options_.host_root;
    std::string full = (root == "/" || root.empty()) ? std::string(path) : root + path;
    return self->options_.watches->Add(full);
  } catch (...) {
    return -ENOMEM;
  }
}

int HostAdapter::PodOf(const devplug_host* h, const char* id, devplug_pod* ret) {
  if (h == nullptr || id == nullptr || ret == nullptr ||
      ret->struct_size < offsetof(devplug_pod, pod_namespace) + sizeof(ret->pod_namespace))
    return -EINVAL;
  HostAdapter* self = Self(h);
  if (!self->options_.pods) return -EAGAIN;
  try {
    PodHolder holder;
    CallContext& call = self->Call();
    const int rc = self->options_.pods->PodOf(id, call.prestart_began, &holder);
    if (rc != 0) return rc;
    call.pod_answer = std::move(holder);
    const PodHolder& a = call.pod_answer;
    if (DEVPLUG_HAS_MEMBER(ret, devplug_pod, pod_namespace))
      ret->pod_namespace = a.pod_namespace.c_str();
    if (DEVPLUG_HAS_MEMBER(ret, devplug_pod, pod_name)) ret->pod_name = a.pod_name.c_str();
    if (DEVPLUG_HAS_MEMBER(ret, devplug_pod, pod_uid)) ret->pod_uid = a.pod_uid.c_str();
    if (DEVPLUG_HAS_MEMBER(ret, devplug_pod, container)) ret->container = a.container.c_str();
    return 0;
  } catch (...) {
    return -ENOMEM;
  }
}

int HostAdapter::TrackReleases(const devplug_host* h, int32_t on) {
  if (h == nullptr) return -EINVAL;
  Self(h)->track_releases_ = on != 0;
  return 0;
}

int HostAdapter::UsePreStart(const devplug_host* h, int32_t on) {
  if (h == nullptr) return -EINVAL;
  Self(h)->use_pre_start_ = on != 0;
  return 0;
}

}  // namespace devplug::modules
