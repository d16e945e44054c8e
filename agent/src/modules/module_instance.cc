#include "modules/module_instance.h"

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <set>

#include <spdlog/spdlog.h>

#include "util/utf8.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define DEVPLUG_LEAK_ON_PURPOSE(p) __lsan_ignore_object(p)
#else
#define DEVPLUG_LEAK_ON_PURPOSE(p) ((void)(p))
#endif


namespace devplug::modules {
namespace {

// Kubelet API comment: device IDs are at most 63 characters.
constexpr size_t kMaxDeviceIdLength = 63;

bool Empty(const char* s) { return s == nullptr || s[0] == '\0'; }

// Device IDs travel in protobuf string fields (which must be UTF-8: a peer
// that validates drops the whole stream otherwise) and into the kubelet's
// checkpoint: no control characters, well-formed UTF-8.
const char* BadIdCharacters(std::string_view id) {
  for (const char ch : id) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return "a control character";
  }
  return IsValidUtf8(id) ? nullptr : "malformed UTF-8";
}

// ---- devplug_recipe backed by a Recipe --------------------------------------

struct RecipeSink {
  devplug_recipe c{};
  Recipe* target = nullptr;

  explicit RecipeSink(Recipe* r) : target(r) {
    c.struct_size = sizeof(c);
    c.agent_data = this;
    c.add_device_node = &AddDeviceNode;
    c.add_mount = &AddMount;
    c.add_env = &AddEnv;
    c.add_annotation = &AddAnnotation;
    c.add_cdi_device = &AddCdi;
  }
  // Runs `add` on the target recipe; no exception crosses into C.
  template <typename F>
  static int Guarded(devplug_recipe* r, F&& add) {
    try {
      add(*static_cast<RecipeSink*>(r->agent_data)->target);
    } catch (...) {
      return -ENOMEM;
    }
    return 0;
  }

  static int AddDeviceNode(devplug_recipe* r, const char* host, const char* container,
                           const char* perms) {
    if (r == nullptr || Empty(host)) return -EINVAL;
    return Guarded(r, [&](Recipe& x) {
      x.device_nodes.push_back(
          {host, Empty(container) ? host : container, Empty(perms) ? "rw" : perms});
    });
  }
  static int AddMount(devplug_recipe* r, const char* host, const char* container, int32_t ro) {
    if (r == nullptr || Empty(host) || Empty(container)) return -EINVAL;
    return Guarded(r, [&](Recipe& x) { x.mounts.push_back({host, container, ro != 0}); });
  }
  static int AddEnv(devplug_recipe* r, const char* key, const char* value) {
    if (r == nullptr || Empty(key) || value == nullptr) return -EINVAL;
    return Guarded(r, [&](Recipe& x) { x.envs.emplace_back(key, value); });
  }
  static int AddAnnotation(devplug_recipe* r, const char* key, const char* value) {
    if (r == nullptr || Empty(key) || value == nullptr) return -EINVAL;
    return Guarded(r, [&](Recipe& x) { x.annotations.emplace_back(key, value); });
  }
  static int AddCdi(devplug_recipe* r, const char* name) {
    if (r == nullptr || Empty(name)) return -EINVAL;
    return Guarded(r, [&](Recipe& x) { x.cdi_devices.emplace_back(name); });
  }
};

// ---- devplug_device_sink collecting a DeviceList ----------------------------

struct DeviceSink {
  devplug_device_sink c{};
  DeviceList list;
  std::set<std::string, std::less<>> ids;
  std::vector<std::string> problems;
  Recipe scratch;  // target of rejected devices' recipes
  std::unique_ptr<RecipeSink> recipe;

  DeviceSink() {
    c.struct_size = sizeof(c);
    c.agent_data = this;
    c.add_device = &AddDevice;
  }

  static int AddDevice(devplug_device_sink* s, const char* id, int32_t health, int32_t numa,
                       devplug_recipe** ret_recipe) {
    if (s == nullptr) return -EINVAL;
    auto* self = static_cast<DeviceSink*>(s->agent_data);
    try {
      int rc = 0;
      if (Empty(id)) {
        self->problems.push_back("a device with an empty ID");
        rc = -EINVAL;
      } else if (std::strlen(id) > kMaxDeviceIdLength) {
        self->problems.push_back(StrCat("device ID \"", id, "\" is longer than ",
                                              kMaxDeviceIdLength, " characters"));
        rc = -EINVAL;
      } else if (const char* bad = BadIdCharacters(id)) {
        self->problems.push_back(StrCat("a device ID with ", bad));
        rc = -EINVAL;
      } else if (health != DEVPLUG_HEALTHY && health != DEVPLUG_UNHEALTHY) {
        self->problems.push_back(StrCat("device \"", id, "\" has health value ", health));
        rc = -EINVAL;
      } else if (self->ids.contains(id)) {
        self->problems.push_back(StrCat("duplicate device ID \"", id, "\""));
        rc = -EEXIST;
      }
      if (rc < 0) {
        // Give the module somewhere harmless to write; the device is dropped.
        self->scratch = {};
        if (self->recipe)
          self->recipe->target = &self->scratch;
        else
          self->recipe = std::make_unique<RecipeSink>(&self->scratch);
        if (ret_recipe) *ret_recipe = &self->recipe->c;
        return rc;
      }
      self->ids.emplace(id);
      Device& d = self->list.emplace_back();
      d.id = id;
      d.healthy = health == DEVPLUG_HEALTHY;
      d.numa_node = numa < 0 ? -1 : numa;
      // list may reallocate on the next add; the recipe pointer is valid only
      // until then, as the ABI says, so one sink serves every device.
      if (self->recipe)
        self->recipe->target = &d.recipe;
      else
        self->recipe = std::make_unique<RecipeSink>(&d.recipe);
      if (ret_recipe) *ret_recipe = &self->recipe->c;
      return 0;
    } catch (...) {
      return -ENOMEM;
    }
  }
};

struct IdSink {
  devplug_id_sink c{};
  std::vector<std::string> ids;
  IdSink() {
    c.struct_size = sizeof(c);
    c.agent_data = this;
    c.add_id = &AddId;
  }
  static int AddId(devplug_id_sink* s, const char* id) {
    if (s == nullptr || id == nullptr) return -EINVAL;
    try {
      static_cast<IdSink*>(s->agent_data)->ids.emplace_back(id);
    } catch (...) {
      return -ENOMEM;
    }
    return 0;
  }
};

std::vector<const char*> CStrings(const std::vector<std::string>& v) {
  std::vector<const char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(s.c_str());
  out.push_back(nullptr);
  return out;
}

spdlog::level::level_enum SpdLevel(int32_t level) {
  switch (level) {
    case DEVPLUG_LOG_ERROR: return spdlog::level::err;
    case DEVPLUG_LOG_WARN: return spdlog::level::warn;
    case DEVPLUG_LOG_INFO: return spdlog::level::info;
    case DEVPLUG_LOG_DEBUG: return spdlog::level::debug;
    default: return spdlog::level::trace;
  }
}

}  // namespace

// ---- Recipe -------------------------------------------------------------------

void Recipe::Merge(const Recipe& other) {
  for (const DeviceNode& n : other.device_nodes) {
    if (std::none_of(device_nodes.begin(), device_nodes.end(),
                     [&](const DeviceNode& x) { return x.container_path == n.container_path; }))
      device_nodes.push_back(n);
  }
  for (const MountSpec& m : other.mounts) {
    if (std::none_of(mounts.begin(), mounts.end(),
                     [&](const MountSpec& x) { return x.container_path == m.container_path; }))
      mounts.push_back(m);
  }
  // (No structured bindings captured in lambdas: clang 14 cannot.)
  for (const auto& kv : other.envs) {
    const std::string& key = kv.first;
    const std::string& value = kv.second;
    auto it = std::find_if(envs.begin(), envs.end(), [&](const auto& e) { return e.first == key; });
    if (it == envs.end()) {
      envs.emplace_back(key, value);
      continue;
    }
    // Join, skipping a value already present in the list.
    bool present = false;
    for (std::string_view rest = it->second; !present;) {
      const size_t comma = rest.find(',');
      present = rest.substr(0, comma) == value;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    if (!present) StrAppend(&it->second, ",", value);
  }
  for (const auto& kv : other.annotations) {
    auto it = std::find_if(annotations.begin(), annotations.end(),
                           [&](const auto& e) { return e.first == kv.first; });
    if (it == annotations.end()) annotations.emplace_back(kv);
    else it->second = kv.second;
  }
  for (const std::string& cdi : other.cdi_devices) {
    if (std::find(cdi_devices.begin(), cdi_devices.end(), cdi) == cdi_devices.end())
      cdi_devices.push_back(cdi);
  }
}

Recipe DefaultRecipe(const DeviceList& devices, const std::vector<std::string>& ids) {
  Recipe out;
  for (const std::string& id : ids) {
    auto it = std::lower_bound(devices.begin(), devices.end(), id,
                               [](const Device& d, const std::string& v) { return d.id < v; });
    if (it != devices.end() && it->id == id) out.Merge(it->recipe);
  }
  return out;
}

// ---- ModuleInstance -------------------------------------------------------------

ModuleInstance::ModuleInstance(std::shared_ptr<const LoadedModule> module,
                               config::ResourceConfig resource, Options options)
    : module_(std::move(module)), resource_(std::move(resource)), options_(std::move(options)) {
  host_.struct_size = sizeof(host_);
  host_.abi_minor = DEVPLUG_MODULE_ABI_MINOR;
  host_.agent_data = this;
  host_.resource_name = resource_.name.c_str();
  host_.host_root = options_.host_root.c_str();
  host_.log = &HostLog;
  host_.devices_changed = &HostDevicesChanged;
  host_.set_error = &HostSetError;
  host_.config_error = &HostConfigError;
  host_.config_string = &HostString;
  host_.config_int = &HostInt;
  host_.config_bool = &HostBool;
  host_.config_string_array = &HostStringArray;
  host_.config_int_array = &HostIntArray;
  for (const auto& [key, value] : resource_.module_keys) {
    if (const auto* v = std::get_if<std::vector<std::string>>(&value.value)) {
      auto& arr = string_arrays_[key];
      for (const std::string& s : *v) arr.push_back(s.c_str());
    }
  }
}

StatusOr<std::unique_ptr<ModuleInstance>> ModuleInstance::Create(
    std::shared_ptr<const LoadedModule> module, const config::ResourceConfig& resource,
    Options options) {
  std::unique_ptr<ModuleInstance> self(
      new ModuleInstance(std::move(module), resource, std::move(options)));
  self->worker_ = std::thread([p = self.get()] { p->WorkerLoop(); });

  auto created = std::make_shared<std::promise<Status>>();
  std::future<Status> result = created->get_future();
  self->Post([p = self.get(), created] {
    p->last_error_.clear();
    devplug_instance* inst = nullptr;
    const int rc = p->module_->descriptor().create(&p->host_, &inst);
    if (rc < 0 || inst == nullptr) {
      std::string why;
      if (!p->config_errors_.empty()) {
        why = StrJoin(p->config_errors_, "\n");
      } else {
        why = StrCat("resource \"", p->resource_.name, "\" (", p->resource_.where.file,
                           ":", p->resource_.where.line, "): module \"", p->module_->name(),
                           "\" create failed: ",
                           p->last_error_.empty() ? std::strerror(rc < 0 ? -rc : EINVAL)
                                                  : p->last_error_);
        if (rc >= 0) why += " (no instance returned)";
      }
      // Configuration problems are the operator's to fix: say so by code.
      created->set_value(p->config_errors_.empty() ? FailedPreconditionError(why)
                                                   : InvalidArgumentError(why));
      return;
    }
    p->inst_ = inst;
    p->ScanOnWorker();
    created->set_value(OkStatus());
  });
  if (result.wait_for(self->options_.start_timeout) != std::future_status::ready) {
    const std::string why =
        StrCat("resource \"", resource.name, "\": module \"", self->module_->name(),
               "\" did not finish create() and its first scan within ",
               self->options_.start_timeout.count(), " ms; giving it up");
    // The worker is stuck inside the module and may come back at any time:
    // this object must outlive it, so it is leaked on purpose.
    if (!self->Stop(std::chrono::milliseconds(0))) self.release();
    return UnavailableError(why);
  }
  Status st = result.get();
  if (!st.ok()) return st;  // the destructor stops the worker
  return self;
}

bool ModuleInstance::Stop(std::chrono::milliseconds timeout) {
  if (!worker_.joinable()) return true;
  Post([this] {
    if (inst_ != nullptr) module_->descriptor().destroy(inst_);
    inst_ = nullptr;
  });
  std::unique_lock lock(mu_);
  stopping_ = true;
  cv_.notify_one();
  if (!exited_cv_.wait_for(lock, timeout, [&] { return worker_exited_; })) {
    abandoned_ = true;
    // The owner leaks this object (the thread may still use it).
    DEVPLUG_LEAK_ON_PURPOSE(this);
    lock.unlock();
    worker_.detach();
    return false;
  }
  lock.unlock();
  worker_.join();
  return true;
}

ModuleInstance::~ModuleInstance() {
  // No deadline: the owner chose not to give this instance up.
  if (worker_.joinable()) (void)Stop(std::chrono::hours(24 * 365));
}

void ModuleInstance::Post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ModuleInstance::WorkerLoop() {
  // "dp:<module>" in top -H, ps -L and gdb (15 characters at most).
  const std::string name = std::string("dp:").append(module_->name()).substr(0, 15);
  pthread_setname_np(pthread_self(), name.c_str());
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      auto ready = [&] { return stopping_ || !queue_.empty(); };
      if (deferred_scan_at_) {
        // deferred_scan_at_ is worker-only state, read here on the worker.
        cv_.wait_until(lock, *deferred_scan_at_, ready);
      } else {
        cv_.wait(lock, ready);
      }
      if (queue_.empty()) {
        if (stopping_) {  // stopping and drained
          worker_exited_ = true;
          exited_cv_.notify_all();
          return;
        }
        // The rate-limit window of a deferred event scan is over.
        lock.unlock();
        if (deferred_scan_at_ && std::chrono::steady_clock::now() >= *deferred_scan_at_) {
          deferred_scan_at_.reset();
          last_event_scan_ = std::chrono::steady_clock::now();
          ScanOnWorker();
        }
        continue;
      }
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void ModuleInstance::OnUdevEvents(std::vector<udev::Event> events) {
  if (events.empty()) return;
  {
    std::lock_guard lock(events_mu_);
    if (pending_events_.empty()) pending_events_ = std::move(events);
    else
      pending_events_.insert(pending_events_.end(), std::make_move_iterator(events.begin()),
                             std::make_move_iterator(events.end()));
    if (events_queued_) return;
    events_queued_ = true;
  }
  Post([this] { ProcessEventsOnWorker(); });
}

void ModuleInstance::ProcessEventsOnWorker() {
  std::vector<udev::Event> events;
  {
    std::lock_guard lock(events_mu_);
    events.swap(pending_events_);
    events_queued_ = false;
  }
  if (inst_ == nullptr) return;
  bool scan = !module_->has_on_udev_event();
  if (!scan) {
    for (const udev::Event& e : events) {
      devplug_udev_event ev{};
      ev.struct_size = sizeof(ev);
      ev.action = e.action.c_str();
      ev.subsystem = e.subsystem.c_str();
      ev.devtype = e.devtype.empty() ? nullptr : e.devtype.c_str();
      ev.syspath = e.syspath.c_str();
      ev.sysname = e.sysname.c_str();
      ev.devnode = e.devnode.empty() ? nullptr : e.devnode.c_str();
      last_error_.clear();
      const int rc = module_->descriptor().on_udev_event(inst_, &ev);
      if (rc < 0)
        spdlog::debug("{}: on_udev_event({} {}): {}; rescanning", resource_.name, e.action,
                      e.syspath, last_error_.empty() ? std::strerror(-rc) : last_error_);
      if (rc != 0) scan = true;
    }
  }
  if (!scan || deferred_scan_at_) return;  // a deferred scan will cover it
  const auto now = std::chrono::steady_clock::now();
  if (now - last_event_scan_ >= kMinEventScanInterval) {
    last_event_scan_ = now;
    ScanOnWorker();
  } else {
    deferred_scan_at_ = last_event_scan_ + kMinEventScanInterval;
  }
}

DeviceListPtr ModuleInstance::devices() const {
  std::lock_guard lock(devices_mu_);
  return devices_;
}

void ModuleInstance::RequestRescan() {
  if (rescan_queued_.exchange(true)) return;
  Post([this] {
    rescan_queued_.store(false);
    ScanOnWorker();
  });
}

void ModuleInstance::ScanOnWorker() {
  if (inst_ == nullptr) return;
  DeviceSink sink;
  {
    std::lock_guard lock(devices_mu_);
    if (devices_) sink.list.reserve(devices_->size());  // usually the same size again
  }
  last_error_.clear();
  const int rc = module_->descriptor().list_devices(inst_, &sink.c);
  scans_.fetch_add(1);
  if (rc < 0) {
    spdlog::warn("{}: list_devices failed: {}; keeping the previous device list",
                 resource_.name, last_error_.empty() ? std::strerror(-rc) : last_error_);
    return;
  }
  for (const std::string& p : sink.problems)
    spdlog::warn("{}: module {} reported {}, ignoring that device", resource_.name,
                 module_->path(), p);
  std::sort(sink.list.begin(), sink.list.end(),
            [](const Device& a, const Device& b) { return a.id < b.id; });
  DeviceListPtr next = std::make_shared<const DeviceList>(std::move(sink.list));
  {
    std::lock_guard lock(devices_mu_);
    if (devices_ && *devices_ == *next) return;
    devices_ = next;
  }
  const size_t healthy =
      std::count_if(next->begin(), next->end(), [](const Device& d) { return d.healthy; });
  spdlog::info("{}: {} devices, {} healthy", resource_.name, next->size(), healthy);
  if (options_.on_change && !abandoned_) options_.on_change(next);
}

Status ModuleInstance::ModuleError(std::string_view call, int rc) {
  std::string why = last_error_.empty() ? std::strerror(-rc) : last_error_;
  return Status(rc == -EINVAL ? StatusCode::kInvalidArgument
                                    : StatusCode::kInternal,
                      StrCat(resource_.name, ": ", call, ": ", why));
}

namespace {
// Checks ids against `list`: every one known and healthy. Fills `unique`
// (request order, duplicates dropped).
Status CheckIds(const std::string& resource, const DeviceList& list,
                const std::vector<std::string>& ids, std::vector<std::string>* unique) {
  for (const std::string& id : ids) {
    auto it = std::lower_bound(list.begin(), list.end(), id,
                               [](const Device& d, const std::string& v) { return d.id < v; });
    if (it == list.end() || it->id != id)
      return InvalidArgumentError(StrCat(resource, ": unknown device ID \"", id, "\""));
    if (!it->healthy)
      return InvalidArgumentError(StrCat(resource, ": device \"", id, "\" is unhealthy"));
    if (std::find(unique->begin(), unique->end(), id) == unique->end()) unique->push_back(id);
  }
  if (unique->empty()) return InvalidArgumentError(StrCat(resource, ": no device IDs requested"));
  return OkStatus();
}
}  // namespace

void ModuleInstance::Allocate(std::vector<std::string> ids,
                              std::function<void(StatusOr<Recipe>)> done) {
  if (!module_->has_allocate()) {
    // No module code involved: answer from the published (immutable) list
    // on the caller's thread, without a hop to the worker.
    DeviceListPtr list = devices();
    std::vector<std::string> unique;
    if (Status st = CheckIds(resource_.name, *list, ids, &unique); !st.ok()) {
      done(st);
      return;
    }
    done(DefaultRecipe(*list, unique));
    return;
  }
  Post([this, ids = std::move(ids), done = std::move(done)]() mutable {
    DeviceListPtr list = devices();
    std::vector<std::string> unique;
    if (Status st = CheckIds(resource_.name, *list, ids, &unique); !st.ok()) {
      done(st);
      return;
    }
    if (inst_ != nullptr) {
      Recipe built;
      RecipeSink sink(&built);
      auto cids = CStrings(unique);
      last_error_.clear();
      const int rc = module_->descriptor().allocate(inst_, cids.data(), unique.size(), &sink.c);
      if (rc < 0) {
        done(ModuleError("allocate", rc));
        return;
      }
      if (rc != DEVPLUG_ALLOCATE_DEFAULT) {
        Recipe normalized;
        normalized.Merge(built);
        done(std::move(normalized));
        return;
      }
    }
    done(DefaultRecipe(*list, unique));
  });
}

void ModuleInstance::PreferredAllocation(
    std::vector<std::string> available, std::vector<std::string> must_include, int32_t size,
    std::function<void(StatusOr<std::vector<std::string>>)> done) {
  Post([this, available = std::move(available), must = std::move(must_include), size,
        done = std::move(done)] {
    if (!module_->has_preferred_allocation() || inst_ == nullptr) {
      done(UnimplementedError(
          StrCat(resource_.name, ": module has no preferred allocation")));
      return;
    }
    IdSink sink;
    auto a = CStrings(available);
    auto m = CStrings(must);
    last_error_.clear();
    const int rc = module_->descriptor().preferred_allocation(
        inst_, a.data(), available.size(), m.data(), must.size(), size, &sink.c);
    if (rc < 0) {
      done(ModuleError("preferred_allocation", rc));
      return;
    }
    done(std::move(sink.ids));
  });
}

void ModuleInstance::PreStart(std::vector<std::string> ids,
                              std::function<void(Status)> done) {
  Post([this, ids = std::move(ids), done = std::move(done)] {
    if (!module_->has_pre_start() || inst_ == nullptr) {
      done(OkStatus());
      return;
    }
    auto c = CStrings(ids);
    last_error_.clear();
    const int rc = module_->descriptor().pre_start(inst_, c.data(), ids.size());
    done(rc < 0 ? ModuleError("pre_start", rc) : OkStatus());
  });
}

// ---- host services ------------------------------------------------------------------

ModuleInstance* ModuleInstance::Self(const devplug_host* h) {
  return static_cast<ModuleInstance*>(h->agent_data);
}

void ModuleInstance::HostLog(const devplug_host* h, int32_t level, const char* msg) {
  if (h == nullptr || msg == nullptr) return;
  try {
    ModuleInstance* self = Self(h);
    spdlog::log(SpdLevel(level), "{} [{}]: {}", self->resource_.name, self->module_->name(), msg);
  } catch (...) {
  }
}

void ModuleInstance::HostDevicesChanged(const devplug_host* h) {
  if (h == nullptr) return;
  try {
    Self(h)->RequestRescan();
  } catch (...) {
  }
}

void ModuleInstance::HostSetError(const devplug_host* h, const char* msg) {
  if (h == nullptr) return;
  try {
    Self(h)->last_error_ = msg ? msg : "";
  } catch (...) {
  }
}

void ModuleInstance::HostConfigError(const devplug_host* h, const char* key, const char* msg) {
  if (h == nullptr) return;
  try {
    ModuleInstance* self = Self(h);
    const config::ResourceConfig& r = self->resource_;
    config::SourceLocation where = r.where;
    std::string k = key ? key : "";
    if (auto it = r.module_keys.find(k); it != r.module_keys.end()) where = it->second.where;
    self->config_errors_.push_back(StrCat(where.file, ":", where.line, ": resource[",
                                                self->options_.index, "].", k, ": ",
                                                msg ? msg : "invalid value"));
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

int ModuleInstance::HostString(const devplug_host* h, const char* key, const char** ret) {
  if (h == nullptr || ret == nullptr) return -EINVAL;
  const std::string* v = nullptr;
  const int rc = Get(Self(h)->resource_, *Self(h)->module_, key, DEVPLUG_CONFIG_STRING, &v);
  if (rc == 0) *ret = v->c_str();
  return rc;
}

int ModuleInstance::HostInt(const devplug_host* h, const char* key, int64_t* ret) {
  if (h == nullptr || ret == nullptr) return -EINVAL;
  const int64_t* v = nullptr;
  const int rc = Get(Self(h)->resource_, *Self(h)->module_, key, DEVPLUG_CONFIG_INT, &v);
  if (rc == 0) *ret = *v;
  return rc;
}

int ModuleInstance::HostBool(const devplug_host* h, const char* key, int32_t* ret) {
  if (h == nullptr || ret == nullptr) return -EINVAL;
  const bool* v = nullptr;
  const int rc = Get(Self(h)->resource_, *Self(h)->module_, key, DEVPLUG_CONFIG_BOOL, &v);
  if (rc == 0) *ret = *v ? 1 : 0;
  return rc;
}

int ModuleInstance::HostIntArray(const devplug_host* h, const char* key, const int64_t** ret,
                                 size_t* ret_n) {
  if (h == nullptr || ret == nullptr || ret_n == nullptr || key == nullptr) return -EINVAL;
  ModuleInstance* self = Self(h);
  if (self->module_->KeyType(key) != DEVPLUG_CONFIG_INT_ARRAY) return -EINVAL;
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

int ModuleInstance::HostStringArray(const devplug_host* h, const char* key,
                                    const char* const** ret, size_t* ret_n) {
  if (h == nullptr || ret == nullptr || ret_n == nullptr) return -EINVAL;
  ModuleInstance* self = Self(h);
  const std::vector<std::string>* v = nullptr;
  const int rc = Get(self->resource_, *self->module_, key, DEVPLUG_CONFIG_STRING_ARRAY, &v);
  if (rc != 0) return rc;
  auto it = self->string_arrays_.find(std::string_view(key));
  static const char* const kEmpty[] = {nullptr};
  *ret = (it == self->string_arrays_.end() || it->second.empty()) ? kEmpty : it->second.data();
  *ret_n = v->size();
  return 0;
}

}  // namespace devplug::modules
