// Writing a devplug module in C++ on top of the C ABI (devplug/module.h).
//
// A module derives from devplug::common::Instance, implements the hooks it
// needs, and defines its descriptor with DEVPLUG_CXX_MODULE. The adapter
// turns every C++ exception into a negative errno with the message attached
// (no exception ever crosses the ABI), and only advertises the optional
// hooks the class asks for.
//
//   class Foo : public devplug::common::Instance { ... };
//   static std::unique_ptr<Instance> CreateFoo(devplug::common::Host& h);
//   DEVPLUG_CXX_MODULE(foo_module, "foo", "1.0.0", "what it is", keys, subsystems,
//                      CreateFoo, devplug::common::kHookPreferred);
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "devplug/module.h"

namespace devplug::common {

// Thrown by a module to fail the current call with errno `code`.
class ModuleError : public std::runtime_error {
 public:
  ModuleError(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// The host services of one instance, with C++ types.
class Host {
 public:
  explicit Host(const devplug_host* h) : h_(h) {}
  const devplug_host* raw() const { return h_; }
  std::string_view resource_name() const { return h_->resource_name; }
  std::string_view host_root() const { return h_->host_root; }

  void Log(int32_t level, const std::string& msg) const { h_->log(h_, level, msg.c_str()); }
  void Error(const std::string& msg) const { Log(DEVPLUG_LOG_ERROR, msg); }
  void Warn(const std::string& msg) const { Log(DEVPLUG_LOG_WARN, msg); }
  void Info(const std::string& msg) const { Log(DEVPLUG_LOG_INFO, msg); }
  void Debug(const std::string& msg) const { Log(DEVPLUG_LOG_DEBUG, msg); }
  // Any thread, never blocks.
  void DevicesChanged() const { h_->devices_changed(h_); }
  void SetError(const std::string& msg) const { h_->set_error(h_, msg.c_str()); }
  void ConfigError(const char* key, const std::string& msg) const {
    h_->config_error(h_, key, msg.c_str());
  }

  // Config getters: nullopt when the key is not set. Declared types are
  // guaranteed by the agent; a mismatch throws (a module bug).
  std::optional<std::string> String(const char* key) const;
  std::optional<int64_t> Int(const char* key) const;
  std::optional<bool> Bool(const char* key) const;
  std::optional<std::vector<std::string>> Strings(const char* key) const;
  // Needs an agent of ABI minor 1 (throws otherwise).
  std::optional<std::vector<int64_t>> Ints(const char* key) const;

  // ABI minor 2. Who holds device `id` (nullopt: nobody); throws
  // ModuleError(ENOTUNIQ) when it is listed under more than one pod,
  // ModuleError(EAGAIN) when the kubelet cannot be asked now, and on agents
  // older than 1.2.
  struct Pod {
    std::string pod_namespace, pod_name, pod_uid, container;
  };
  std::optional<Pod> PodOf(const std::string& id) const;
  // create() only: opt this instance out of release tracking (its devices
  // are shared by many pods). A no-op on agents older than 1.2.
  void TrackReleases(bool on) const;

  // ABI minor 3: values inside tables and arrays, by path
  // ("paths[2].container_path", see devplug_host.config_value).
  struct Value {
    uint32_t type = 0;  // DEVPLUG_CONFIG_STRING, _INT, _BOOL, _TABLE, _ARRAY, _OTHER
    std::string string;
    int64_t integer = 0;
    bool boolean = false;
    size_t size = 0;  // items of an array, keys of a table
  };
  // nullopt when not set; throws ModuleError(ENOTSUP) on agents older than
  // 1.3 and on a malformed path (a module bug).
  std::optional<Value> Get(const std::string& path) const;
  // The key names of the table at `path` (empty when not set).
  std::vector<std::string> Members(const std::string& path) const;
  // ABI minor 3: a table of environment variables (`envs = {EF_POLL_USEC =
  // "100"}`) as name/value pairs in key order; empty when not set. Names
  // must be non-empty without '=' and values strings: otherwise a config
  // error per bad entry and false.
  using EnvList = std::vector<std::pair<std::string, std::string>>;
  bool EnvTable(const char* key, EnvList* out) const;
  // `name` as a path component: .name, or ."name" quoted where needed.
  static std::string Member(std::string_view name);
  // Watches a host path (without host_root) for entries created or removed
  // without a uevent: 0 or -errno (-ENOSYS on agents older than 1.3).
  int WatchPath(const std::string& path) const;
  // ABI minor 4: the agent's prestart_timeout in ms, the deadline of every
  // PreStartContainer call; nullopt on older agents.
  std::optional<int64_t> PrestartTimeoutMs() const;
  // Why `d`, a bound on work done inside PreStart, does not fit the agent's
  // prestart_timeout (28 s on agents older than 1.4); "" when it does.
  std::string CheckWithinPrestart(std::chrono::milliseconds d) const;
  // ABI minor 4: the [[resource]] table's position in the configuration
  // (as of create()); nullopt on older agents.
  std::optional<int32_t> ResourceIndex() const;
  // ABI minor 5, create() only: false means this instance needs no
  // PreStart (the module's PreStart is not called, the kubelet not asked).
  // A no-op on older agents, which keep calling PreStart.
  void UsePreStart(bool on) const;

 private:
  const devplug_host* h_;
};

// Wraps a devplug_recipe.
class Recipe {
 public:
  explicit Recipe(devplug_recipe* r) : r_(r) {}
  Recipe& Node(const std::string& host_path, const std::string& container_path = {},
               const char* permissions = "rw");
  Recipe& Mount(const std::string& host_path, const std::string& container_path, bool read_only);
  Recipe& Env(const std::string& key, const std::string& value);
  Recipe& Annotation(const std::string& key, const std::string& value);
  Recipe& Cdi(const std::string& name);
  // ABI 1.11: the network interface `device_id` gives the container, for
  // DRA's claim status (devplug_recipe.set_network); agents older than 1.11
  // ignore it.
  Recipe& Network(const std::string& device_id, const std::string& interface_name,
                  const std::string& hardware_address);

 private:
  static void Check(int rc, const char* what);
  devplug_recipe* r_;
};

// Wraps a devplug_device_sink.
class DeviceSink {
 public:
  explicit DeviceSink(devplug_device_sink* s) : s_(s) {}
  // Adds a device; the returned recipe is its default Allocate answer.
  // An ID the agent refuses (invalid, duplicate) yields nullopt: the agent
  // has logged why and the scan goes on. `reason` says why it is Unhealthy
  // (a few words, "port 1 DOWN"); agents older than ABI 1.2 ignore it.
  std::optional<Recipe> Add(const std::string& id, bool healthy, int32_t numa_node,
                            const std::string& reason = {});
  // The same for a device that belongs to several NUMA nodes (a replica of
  // NICs on two nodes); agents older than ABI 1.6 are told the node only
  // when there is one.
  std::optional<Recipe> Add(const std::string& id, bool healthy,
                            const std::vector<int32_t>& numa_nodes, const std::string& reason = {});

  // ABI 1.9, for DRA: what the device added last is (its PCI function, its
  // attributes and capacities, see devplug_device_sink.set_pci_address).
  // A value the agent refuses is logged by it and the device goes on
  // without it; agents older than 1.9 ignore them all.
  DeviceSink& Pci(const std::string& address);
  DeviceSink& StringAttribute(const std::string& name, const std::string& value);
  DeviceSink& IntAttribute(const std::string& name, int64_t value);
  DeviceSink& BoolAttribute(const std::string& name, bool value);
  DeviceSink& VersionAttribute(const std::string& name, const std::string& value);
  DeviceSink& Capacity(const std::string& name, uint64_t value);
  // ABI 1.10: the device added last is one share of `device` (see
  // devplug_device_sink.set_share_of); agents older than 1.10 ignore it.
  DeviceSink& ShareOf(const std::string& device);

 private:
  devplug_device_sink* s_;
};

// Device IDs handed in by the agent.
using Ids = std::vector<std::string_view>;

// One module instance. Every virtual is called on the instance's worker
// thread, one at a time (see devplug/module.h); with kConcurrentSlowCalls,
// PreStart and Release on a second thread, at the same time as the others.
class Instance {
 public:
  explicit Instance(Host host) : host_(host) {}
  virtual ~Instance() = default;
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  const Host& host() const { return host_; }

  virtual void ListDevices(DeviceSink& sink) = 0;
  // true if the event may change the device list.
  virtual bool OnUdevEvent(const devplug_udev_event& /*ev*/) { return true; }
  // Fill `resp` and return true, or return false for the default recipes.
  virtual bool Allocate(const Ids& /*ids*/, Recipe& /*resp*/) { return false; }
  virtual std::vector<std::string> PreferredAllocation(const Ids& available,
                                                       const Ids& must_include, size_t size);
  virtual void PreStart(const Ids& /*ids*/) {}
  // on_release (kHookRelease): true when released, false when still busy
  // (asked again later); throw ModuleError to fail with a reason.
  virtual bool Release(const Ids& /*ids*/) { return true; }

 private:
  Host host_;
};

// Optional hooks a module advertises.
enum Hooks : unsigned {
  kHookUdev = 1u << 0,
  kHookAllocate = 1u << 1,
  kHookPreferred = 1u << 2,
  kHookPreStart = 1u << 3,
  kHookRelease = 1u << 4,  // ABI 1.2: on_release, and with it release tracking
  // ABI 1.7: PreStart and Release run on a thread of their own, at the same
  // time as the other calls (DEVPLUG_CONCURRENT_SLOW_CALLS): the instance
  // guards what they share and holds no lock across slow work.
  kConcurrentSlowCalls = 1u << 5,
  // ABI 1.8: besides, PreStart and Release of different devices run at the
  // same time (DEVPLUG_CONCURRENT_DEVICES, up to the agent's default number
  // of lanes): what they share is guarded too.
  kConcurrentDevices = 1u << 6,
};

// Creates an instance; returns nullptr after host.ConfigError() for bad
// configuration, or throws.
using CreateFn = std::unique_ptr<Instance> (*)(Host& host);

namespace internal {
// Runs `fn` and maps exceptions to negative errno values, attaching the
// message with set_error when `host` is given.
template <class Fn>
int Guard(const devplug_host* host, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const ModuleError& e) {
    if (host) host->set_error(host, e.what());
    return e.code() > 0 ? -e.code() : (e.code() < 0 ? e.code() : -EIO);
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  } catch (const std::exception& e) {
    if (host) host->set_error(host, e.what());
    return -EIO;
  } catch (...) {
    return -EIO;
  }
}
}  // namespace internal

}  // namespace devplug::common

// The instance type the C ABI passes around.
struct devplug_instance {
  std::unique_ptr<devplug::common::Instance> impl;
};

namespace devplug::common::internal {

template <CreateFn kCreate>
struct Thunks {
  static int Create(const devplug_host* h, devplug_instance** ret) {
    return Guard(h, [&] {
      Host host(h);
      std::unique_ptr<Instance> inst = kCreate(host);
      if (!inst) return -EINVAL;
      *ret = new devplug_instance{std::move(inst)};
      return 0;
    });
  }
  static void Destroy(devplug_instance* inst) {
    try {
      delete inst;
    } catch (...) {
    }
  }
  static int ListDevices(devplug_instance* inst, devplug_device_sink* sink) {
    return Guard(inst->impl->host().raw(), [&] {
      DeviceSink s(sink);
      inst->impl->ListDevices(s);
      return 0;
    });
  }
  static int OnUdevEvent(devplug_instance* inst, const devplug_udev_event* ev) {
    return Guard(inst->impl->host().raw(), [&] { return inst->impl->OnUdevEvent(*ev) ? 1 : 0; });
  }
  static Ids ToIds(const char* const* ids, size_t n) { return Ids(ids, ids + n); }
  static int Allocate(devplug_instance* inst, const char* const* ids, size_t n,
                      devplug_recipe* resp) {
    return Guard(inst->impl->host().raw(), [&] {
      Recipe r(resp);
      return inst->impl->Allocate(ToIds(ids, n), r) ? 0 : DEVPLUG_ALLOCATE_DEFAULT;
    });
  }
  static int Preferred(devplug_instance* inst, const char* const* available, size_t n_available,
                       const char* const* must, size_t n_must, int32_t size, devplug_id_sink* ret) {
    return Guard(inst->impl->host().raw(), [&] {
      if (size < 0) throw ModuleError(EINVAL, "negative allocation size");
      for (const std::string& id : inst->impl->PreferredAllocation(
               ToIds(available, n_available), ToIds(must, n_must), static_cast<size_t>(size))) {
        int rc = ret->add_id(ret, id.c_str());
        if (rc < 0) return rc;
      }
      return 0;
    });
  }
  static int PreStart(devplug_instance* inst, const char* const* ids, size_t n) {
    return Guard(inst->impl->host().raw(), [&] {
      inst->impl->PreStart(ToIds(ids, n));
      return 0;
    });
  }
  static int Release(devplug_instance* inst, const char* const* ids, size_t n) {
    return Guard(inst->impl->host().raw(),
                 [&] { return inst->impl->Release(ToIds(ids, n)) ? 0 : -EAGAIN; });
  }
};

template <CreateFn kCreate>
constexpr devplug_module MakeModule(const char* name, const char* version, const char* description,
                                    const devplug_config_key* keys, const char* const* subsystems,
                                    unsigned hooks) {
  using T = Thunks<kCreate>;
  devplug_module m{};
  m.struct_size = sizeof(devplug_module);
  m.abi_major = DEVPLUG_MODULE_ABI_MAJOR;
  m.abi_minor = DEVPLUG_MODULE_ABI_MINOR;
  m.name = name;
  m.version = version;
  m.description = description;
  m.config_keys = keys;
  m.udev_subsystems = subsystems;
  m.create = &T::Create;
  m.destroy = &T::Destroy;
  m.list_devices = &T::ListDevices;
  m.on_udev_event = (hooks & kHookUdev) ? &T::OnUdevEvent : nullptr;
  m.allocate = (hooks & kHookAllocate) ? &T::Allocate : nullptr;
  m.preferred_allocation = (hooks & kHookPreferred) ? &T::Preferred : nullptr;
  m.pre_start = (hooks & kHookPreStart) ? &T::PreStart : nullptr;
  m.on_release = (hooks & kHookRelease) ? &T::Release : nullptr;
  m.concurrency =
      ((hooks & kConcurrentSlowCalls) ? DEVPLUG_CONCURRENT_SLOW_CALLS : 0) |
      ((hooks & kConcurrentDevices) ? DEVPLUG_CONCURRENT_SLOW_CALLS | DEVPLUG_CONCURRENT_DEVICES
                                    : 0);
  return m;
}

}  // namespace devplug::common::internal

// Defines the module descriptor and the exported entry point.
#define DEVPLUG_CXX_MODULE(var, name, version, description, keys, subsystems, create, hooks) \
  static constexpr devplug_module var = devplug::common::internal::MakeModule<create>(       \
      name, version, description, keys, subsystems, hooks);                                  \
  extern "C" DEVPLUG_MODULE_EXPORT int devplug_module_entry_v1(uint32_t,                     \
                                                               const devplug_module** ret) { \
    *ret = &var;                                                                             \
    return 0;                                                                                \
  }
