#include "devplug/common/cxx_module.h"

#include "devplug/common/duration.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace devplug::common {
namespace {

[[noreturn]] void TypeMismatch(const char* key) {
  throw ModuleError(EINVAL, std::string("module bug: config key \"") + key +
                                "\" read with a type it was not declared with");
}

// -ENOENT: not set; -EINVAL: declared with another type; other errors pass.
bool Present(int rc, const char* key) {
  if (rc == 0) return true;
  if (rc == -ENOENT) return false;
  if (rc == -EINVAL) TypeMismatch(key);
  throw ModuleError(-rc, std::string("reading config key \"") + key + "\" failed");
}

}  // namespace

std::optional<std::string> Host::String(const char* key) const {
  const char* v = nullptr;
  if (!Present(h_->config_string(h_, key, &v), key)) return std::nullopt;
  return std::string(v);
}

std::optional<int64_t> Host::Int(const char* key) const {
  int64_t v = 0;
  if (!Present(h_->config_int(h_, key, &v), key)) return std::nullopt;
  return v;
}

std::optional<bool> Host::Bool(const char* key) const {
  int32_t v = 0;
  if (!Present(h_->config_bool(h_, key, &v), key)) return std::nullopt;
  return v != 0;
}

std::optional<std::vector<std::string>> Host::Strings(const char* key) const {
  const char* const* v = nullptr;
  size_t n = 0;
  if (!Present(h_->config_string_array(h_, key, &v, &n), key)) return std::nullopt;
  return std::vector<std::string>(v, v + n);
}

std::optional<std::vector<int64_t>> Host::Ints(const char* key) const {
  if (!DEVPLUG_HAS_MEMBER(h_, devplug_host, config_int_array))
    throw ModuleError(ENOTSUP, "this agent is too old for integer-array keys (needs ABI 1.1)");
  const int64_t* v = nullptr;
  size_t n = 0;
  if (!Present(h_->config_int_array(h_, key, &v, &n), key)) return std::nullopt;
  return std::vector<int64_t>(v, v + n);
}

namespace {
void NeedStructured(const devplug_host* h) {
  if (!DEVPLUG_HAS_MEMBER(h, devplug_host, config_value))
    throw ModuleError(ENOTSUP, "this agent is too old for table and array keys (needs ABI 1.3)");
}
}  // namespace

std::optional<Host::Value> Host::Get(const std::string& path) const {
  NeedStructured(h_);
  devplug_config_value v{};
  v.struct_size = sizeof(v);
  const int rc = h_->config_value(h_, path.c_str(), &v);
  if (rc == -ENOENT) return std::nullopt;
  if (rc < 0) throw ModuleError(-rc, "module bug: cannot read config path \"" + path + "\"");
  Value out;
  out.type = v.type;
  if (v.string) out.string = v.string;
  out.integer = v.integer;
  out.boolean = v.boolean != 0;
  out.size = v.size;
  return out;
}

std::vector<std::string> Host::Members(const std::string& path) const {
  NeedStructured(h_);
  std::vector<std::string> out;
  for (size_t i = 0;; i++) {
    const char* name = nullptr;
    const int rc = h_->config_member(h_, path.c_str(), i, &name);
    if (rc == -ENOENT) break;
    if (rc < 0) throw ModuleError(-rc, "module bug: config path \"" + path + "\" is not a table");
    out.emplace_back(name);
  }
  return out;
}

std::string Host::Member(std::string_view name) {
  bool bare = !name.empty();
  for (char c : name)
    bare = bare && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-');
  if (bare) return "." + std::string(name);
  std::string out = ".\"";
  for (char c : name) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

int Host::WatchPath(const std::string& path) const {
  if (!DEVPLUG_HAS_MEMBER(h_, devplug_host, watch_path)) return -ENOSYS;
  return h_->watch_path(h_, path.c_str());
}

std::optional<int64_t> Host::PrestartTimeoutMs() const {
  if (!DEVPLUG_HAS_MEMBER(h_, devplug_host, prestart_timeout_ms)) return std::nullopt;
  return h_->prestart_timeout_ms;
}

std::optional<int32_t> Host::ResourceIndex() const {
  if (!DEVPLUG_HAS_MEMBER(h_, devplug_host, resource_index)) return std::nullopt;
  return h_->resource_index;
}

void Recipe::Check(int rc, const char* what) {
  if (rc == -ENOMEM) throw std::bad_alloc();
  if (rc < 0) throw ModuleError(-rc, std::string("the agent refused ") + what);
}

Recipe& Recipe::Node(const std::string& host_path, const std::string& container_path,
                     const char* permissions) {
  Check(r_->add_device_node(r_, host_path.c_str(),
                            container_path.empty() ? nullptr : container_path.c_str(), permissions),
        "a device node");
  return *this;
}

Recipe& Recipe::Mount(const std::string& host_path, const std::string& container_path,
                      bool read_only) {
  Check(r_->add_mount(r_, host_path.c_str(), container_path.c_str(), read_only ? 1 : 0), "a mount");
  return *this;
}

Recipe& Recipe::Env(const std::string& key, const std::string& value) {
  Check(r_->add_env(r_, key.c_str(), value.c_str()), "an environment variable");
  return *this;
}

Recipe& Recipe::Annotation(const std::string& key, const std::string& value) {
  Check(r_->add_annotation(r_, key.c_str(), value.c_str()), "an annotation");
  return *this;
}

Recipe& Recipe::Cdi(const std::string& name) {
  Check(r_->add_cdi_device(r_, name.c_str()), "a CDI device name");
  return *this;
}

Recipe& Recipe::Network(const std::string& device_id, const std::string& interface_name,
                        const std::string& hardware_address) {
  const int rc = devplug_recipe_set_network(r_, device_id.c_str(), interface_name.c_str(),
                                            hardware_address.c_str());
  if (rc != -ENOTSUP) Check(rc, "a device's network interface");
  return *this;
}

std::optional<Recipe> DeviceSink::Add(const std::string& id, bool healthy, int32_t numa_node,
                                      const std::string& reason) {
  devplug_recipe* r = nullptr;
  int rc = s_->add_device(s_, id.c_str(), healthy ? DEVPLUG_HEALTHY : DEVPLUG_UNHEALTHY,
                          numa_node < 0 ? DEVPLUG_NO_NUMA_NODE : numa_node, &r);
  if (rc == -ENOMEM) throw std::bad_alloc();
  if (rc < 0 || r == nullptr) return std::nullopt;
  if (!reason.empty() && DEVPLUG_HAS_MEMBER(s_, devplug_device_sink, set_health_reason))
    s_->set_health_reason(s_, reason.c_str());
  return Recipe(r);
}

std::optional<Recipe> DeviceSink::Add(const std::string& id, bool healthy,
                                      const std::vector<int32_t>& numa_nodes,
                                      const std::string& reason) {
  std::vector<int32_t> nodes;
  for (int32_t n : numa_nodes)
    if (n >= 0 && std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  auto r = Add(id, healthy, nodes.size() == 1 ? nodes.front() : -1, reason);
  if (r && nodes.size() > 1 && DEVPLUG_HAS_MEMBER(s_, devplug_device_sink, set_numa_nodes)) {
    const int rc = s_->set_numa_nodes(s_, nodes.data(), nodes.size());
    if (rc == -ENOMEM) throw std::bad_alloc();
  }
  return r;
}

namespace {
// -ENOTSUP (an older agent) and refusals (the agent logs them) leave the
// device without the value; only a failed allocation fails the scan.
DeviceSink& Checked(DeviceSink& sink, int rc) {
  if (rc == -ENOMEM) throw std::bad_alloc();
  return sink;
}
}  // namespace

DeviceSink& DeviceSink::Pci(const std::string& address) {
  return Checked(*this, devplug_sink_set_pci_address(s_, address.c_str()));
}
DeviceSink& DeviceSink::StringAttribute(const std::string& name, const std::string& value) {
  return Checked(*this, devplug_sink_set_attribute_string(s_, name.c_str(), value.c_str()));
}
DeviceSink& DeviceSink::IntAttribute(const std::string& name, int64_t value) {
  return Checked(*this, devplug_sink_set_attribute_int(s_, name.c_str(), value));
}
DeviceSink& DeviceSink::BoolAttribute(const std::string& name, bool value) {
  return Checked(*this, devplug_sink_set_attribute_bool(s_, name.c_str(), value ? 1 : 0));
}
DeviceSink& DeviceSink::VersionAttribute(const std::string& name, const std::string& value) {
  return Checked(*this, devplug_sink_set_attribute_version(s_, name.c_str(), value.c_str()));
}
DeviceSink& DeviceSink::Capacity(const std::string& name, uint64_t value) {
  return Checked(*this, devplug_sink_set_capacity(s_, name.c_str(), value));
}
DeviceSink& DeviceSink::ShareOf(const std::string& device) {
  return Checked(*this, devplug_sink_set_share_of(s_, device.c_str()));
}

std::optional<Host::Pod> Host::PodOf(const std::string& id) const {
  if (!DEVPLUG_HAS_MEMBER(h_, devplug_host, pod_of))
    throw ModuleError(EAGAIN, "this agent cannot tell who holds a device (ABI 1.2 needed)");
  devplug_pod pod{};
  pod.struct_size = sizeof(pod);
  const int rc = h_->pod_of(h_, id.c_str(), &pod);
  if (rc == -ENOENT) return std::nullopt;
  if (rc == -ENOTUNIQ)
    throw ModuleError(ENOTUNIQ, "the kubelet lists " + id +
                                    " under more than one pod (a finished pod still listed?)");
  if (rc < 0) throw ModuleError(-rc, "cannot ask the kubelet who holds " + id);
  auto str = [](const char* s) { return std::string(s ? s : ""); };
  return Pod{str(pod.pod_namespace), str(pod.pod_name), str(pod.pod_uid), str(pod.container)};
}

bool Host::EnvTable(const char* key, EnvList* out) const {
  out->clear();
  if (!Get(key)) return true;
  bool ok = true;
  for (const std::string& name : Members(key)) {
    const std::string at = key + Member(name);
    auto v = Get(at);
    if (name.empty() || name.find('=') != std::string::npos ||
        name.find('\0') != std::string::npos) {
      ConfigError(at.c_str(), "is not a valid environment variable name");
      ok = false;
    } else if (!v || v->type != DEVPLUG_CONFIG_STRING) {
      ConfigError(at.c_str(), "must be a string");
      ok = false;
    } else {
      out->emplace_back(name, v->string);
    }
  }
  return ok;
}

std::string Host::CheckWithinPrestart(std::chrono::milliseconds d) const {
  const std::chrono::milliseconds prestart(PrestartTimeoutMs().value_or(28'000));
  if (d.count() <= 0) return "must be longer than 0";
  if (d >= prestart)
    return "\"" + FormatDuration(d) + "\" must be shorter than the agent's prestart_timeout (" +
           FormatDuration(prestart) + "), which bounds the whole PreStartContainer call";
  return "";
}

void Host::UsePreStart(bool on) const {
  if (DEVPLUG_HAS_MEMBER(h_, devplug_host, use_pre_start)) h_->use_pre_start(h_, on ? 1 : 0);
}

void Host::TrackReleases(bool on) const {
  if (DEVPLUG_HAS_MEMBER(h_, devplug_host, track_releases)) h_->track_releases(h_, on ? 1 : 0);
}

std::vector<std::string> Instance::PreferredAllocation(const Ids& available,
                                                       const Ids& must_include, size_t size) {
  std::vector<std::string> out;
  std::set<std::string_view> seen;
  for (const Ids* list : {&must_include, &available})
    for (std::string_view id : *list)
      if ((out.size() < size || list == &must_include) && seen.insert(id).second)
        out.emplace_back(id);
  return out;
}

}  // namespace devplug::common
