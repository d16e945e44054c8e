/*
 * devplug module ABI, major version 1.
 *
 * A devplug module is a shared object that the agent (devplugd) loads with
 * dlopen(RTLD_NOW | RTLD_LOCAL). It exports exactly one symbol,
 * DEVPLUG_MODULE_ENTRY (devplug_module_entry_v1), which hands the agent a
 * static descriptor (struct devplug_module). For every [[resource]] table that
 * names the module the agent calls create() once; each such instance serves
 * one Kubernetes extended resource on its own socket.
 *
 * A minimal module (modules/example/example.c is one, in plain C):
 *   - a static struct devplug_module with struct_size, abi_major, abi_minor,
 *     name, version, config_keys, and the three required functions:
 *     create() reads the [[resource]] table through the host's getters and
 *     returns an instance; list_devices() reports every device, healthy or
 *     not, each with its default recipe (the device nodes, mounts and envs
 *     Allocate returns); destroy() frees the instance;
 *   - devplug_module_entry_v1(), the one exported symbol, handing it out.
 * Everything else is optional, and appended by minor version: hooks
 * (on_udev_event, allocate, preferred_allocation, pre_start; on_release in
 * 1.2), host services (typed getters; pod_of, track_releases in 1.2;
 * config_value, config_member, watch_path in 1.3; prestart_timeout_ms,
 * resource_index in 1.4; use_pre_start in 1.5), sink members
 * (set_health_reason in 1.2, set_numa_nodes in 1.6, the PCI address,
 * attributes and capacities a DRA ResourceSlice publishes in 1.9; set_share_of in 1.10), recipe
 * members (set_network in 1.11) and descriptor flags
 * (concurrency in 1.7, per-device slow calls and max_slow_calls in 1.8). The devplug_*() helpers
 * below call a member an older agent may lack, returning -ENOTSUP when it does.
 *
 * Rules every module can rely on, and must follow:
 *
 * Threading
 *   - All calls into one instance (create, list_devices, on_udev_event,
 *     allocate, preferred_allocation, pre_start, on_release, destroy) happen
 *     on that instance's own worker thread, one at a time, unless the module
 *     declares DEVPLUG_CONCURRENT_SLOW_CALLS (ABI minor 7, see
 *     devplug_module.concurrency): then pre_start and on_release run on a
 *     second thread of the instance, one at a time between themselves, while
 *     the other calls go on on the first, so that a release or a
 *     programming that takes seconds never holds up the kubelet's Allocate
 *     of another device. With DEVPLUG_CONCURRENT_DEVICES (ABI minor 8)
 *     pre_start and on_release of disjoint device sets also run at the same
 *     time as each other, up to max_slow_calls at once, so that one
 *     device's release never holds up another device's container start;
 *     calls on a common device stay one at a time and in order. Different
 *     instances run on different threads, so module-global state must be
 *     thread-safe.
 *   - Host services may be called from the worker thread during any call.
 *     host->devices_changed and host->log may also be called from any thread
 *     the module owns, at any time between create() returning 0 and destroy()
 *     returning; they never block on the worker.
 *
 * Ownership
 *   - Nothing is freed across the boundary. Strings and arrays the agent hands
 *     in stay valid for the duration of the call unless stated otherwise
 *     (configuration values: until destroy()). Data the module hands out
 *     through sinks and recipes is copied by the agent during the call, so the
 *     module may pass stack buffers.
 *
 * Errors
 *   - Functions return 0 (or a documented positive value) on success and a
 *     negative errno value on failure. A module may attach a human-readable
 *     reason with host->set_error() before returning; the agent logs it and,
 *     for kubelet calls, returns it to the kubelet.
 *   - No C++ exception, longjmp or signal may cross the boundary.
 *
 * Versioning
 *   - The major version is part of the entry symbol's name; a module built
 *     for another major is not found, and so not loaded.
 *   - Structs only ever grow at the end. Each starts with struct_size, filled
 *     by whoever provides the struct; a reader checks struct_size before
 *     touching a member added in a later minor version
 *     (DEVPLUG_HAS_MEMBER()).
 *
 * Compiles as C99 and as C++. Only fixed-width integer types cross the
 * boundary; no bool, no enums in structs.
 */
#ifndef DEVPLUG_MODULE_H
#define DEVPLUG_MODULE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** ABI major version; part of the entry symbol's name. */
#define DEVPLUG_MODULE_ABI_MAJOR 1
/** ABI minor version of this header. */
#define DEVPLUG_MODULE_ABI_MINOR 11

/** Name of the one symbol a module exports, for dlsym(). */
#define DEVPLUG_MODULE_ENTRY_SYMBOL "devplug_module_entry_v1"

/** Marks the entry point as exported when building with -fvisibility=hidden. */
#if defined(__GNUC__)
#define DEVPLUG_MODULE_EXPORT __attribute__((visibility("default")))
#else
#define DEVPLUG_MODULE_EXPORT
#endif

/** True if a struct of (struct_size) bytes contains member m of type T. */
#define DEVPLUG_HAS_MEMBER(ptr, T, m) ((ptr)->struct_size >= offsetof(T, m) + sizeof(((T *)0)->m))

/* ------------------------------------------------------------------------ */
/* Small value sets (stored in int32_t / uint32_t fields)                    */
/* ------------------------------------------------------------------------ */

/** Device health, as reported in list_devices(). */
#define DEVPLUG_UNHEALTHY 0
#define DEVPLUG_HEALTHY 1

/** No NUMA affinity (numa_node argument of add_device). */
#define DEVPLUG_NO_NUMA_NODE (-1)

/** Log levels for host->log. */
#define DEVPLUG_LOG_ERROR 0
#define DEVPLUG_LOG_WARN 1
#define DEVPLUG_LOG_INFO 2
#define DEVPLUG_LOG_DEBUG 3
#define DEVPLUG_LOG_TRACE 4

/** Types of module configuration keys (struct devplug_config_key.type). */
#define DEVPLUG_CONFIG_STRING 1       /**< TOML string */
#define DEVPLUG_CONFIG_INT 2          /**< TOML integer (int64) */
#define DEVPLUG_CONFIG_BOOL 3         /**< TOML boolean */
#define DEVPLUG_CONFIG_STRING_ARRAY 4 /**< TOML array of strings */
#define DEVPLUG_CONFIG_INT_ARRAY 5    /**< TOML array of integers (ABI minor 1) */
#define DEVPLUG_CONFIG_TABLE 6        /**< TOML table, inline or not (ABI minor 3) */
#define DEVPLUG_CONFIG_ARRAY 7        /**< TOML array of any values (ABI minor 3) */
/** Only in devplug_config_value.type: a float, date or time. */
#define DEVPLUG_CONFIG_OTHER 8

/** Flags of module configuration keys. */
#define DEVPLUG_CONFIG_REQUIRED 0x1u /**< the table must set the key */

/**
 * Returned (positive) by allocate() to ask the agent to build the response
 * from the devices' default recipes, as if the hook were absent.
 */
#define DEVPLUG_ALLOCATE_DEFAULT 1

/* ------------------------------------------------------------------------ */
/* Agent-owned sinks the module writes into                                  */
/* ------------------------------------------------------------------------ */

/**
 * What a container needs to use some devices: device nodes, mounts,
 * environment variables, annotations and CDI device names. Provided by the
 * agent, both as a device's default recipe (see devplug_device_sink) and as
 * the response of allocate(). Every function copies its arguments and returns
 * 0, or -EINVAL for a NULL or empty required argument, or -ENOMEM.
 *
 * Paths are host paths as the kubelet sees them: never prefixed with
 * host_root.
 */
struct devplug_recipe {
  uint32_t struct_size;
  uint32_t reserved;
  void *agent_data; /**< the agent's; do not touch */

  /** A device node. container_path NULL means the same as host_path;
   *  permissions NULL means "rw". */
  int (*add_device_node)(struct devplug_recipe *r, const char *host_path,
                         const char *container_path, const char *permissions);
  /** A bind mount; read_only is 0 or 1. */
  int (*add_mount)(struct devplug_recipe *r, const char *host_path, const char *container_path,
                   int32_t read_only);
  /** An environment variable. The values of a key set more than once in
   *  one Allocate response are merged as comma-separated lists: each item
   *  is added once, in order. Per-device values combine ("id0" and "id1"
   *  give "id0,id1"), and a value every device sets alike stays as it is
   *  ("compute,utility" twice gives "compute,utility"). Keys should be namespaced
   *  to the resource: the kubelet keeps only one value per key across
   *  all resources of a container. */
  int (*add_env)(struct devplug_recipe *r, const char *key, const char *value);
  /** A container annotation; the last value of a key wins. */
  int (*add_annotation)(struct devplug_recipe *r, const char *key, const char *value);
  /** A fully qualified CDI device name (vendor.example/class=name). */
  int (*add_cdi_device)(struct devplug_recipe *r, const char *name);

  /* ---- ABI minor 11 ---- */

  /**
   * The network interface device `device_id` gives the container: its name
   * (the link this call made, as the pod's network namespace will know
   * it) and its hardware address ("52:54:00:12:34:56"). DRA writes them
   * into the claim's status (status.devices[].networkData) for the tools
   * that wire pods to networks; the device plugin API has nowhere to put
   * them. Either may be NULL or "" (not known), not both. The interface
   * name is at most 256 bytes, the address at most 128, both UTF-8 with no
   * control character; a second call for one device replaces the first.
   * Returns 0, -EINVAL for what breaks these rules. Check
   * DEVPLUG_HAS_MEMBER(r, struct devplug_recipe, set_network) first, or
   * call devplug_recipe_set_network(): older agents lack it.
   */
  int (*set_network)(struct devplug_recipe *r, const char *device_id, const char *interface_name,
                     const char *hardware_address);
};

/**
 * Collects the full device list during list_devices().
 */
struct devplug_device_sink {
  uint32_t struct_size;
  uint32_t reserved;
  void *agent_data; /**< the agent's; do not touch */

  /**
   * Adds one device. id: the ID the kubelet sees (1 to 63 characters,
   * unique within the list). health: DEVPLUG_HEALTHY or DEVPLUG_UNHEALTHY.
   * numa_node: the NUMA node, or DEVPLUG_NO_NUMA_NODE.
   *
   * On success, *ret_recipe (if ret_recipe is not NULL) receives the
   * device's default recipe, valid until the next add_device() call or
   * the end of list_devices(); what it collects is what Allocate returns
   * for this device when the module has no allocate() hook.
   *
   * Returns 0; -EINVAL for an invalid ID or health value (the device is
   * dropped and the agent logs why); -EEXIST for a duplicate ID.
   */
  int (*add_device)(struct devplug_device_sink *s, const char *id, int32_t health,
                    int32_t numa_node, struct devplug_recipe **ret_recipe);

  /* ---- ABI minor 2 ---- */

  /**
   * Says in a few words why the device added last is Unhealthy ("port 1
   * DOWN", "XID 79", "/dev/vfio/72 missing"), or what else is worth knowing
   * about it. The agent logs one line when a device's health or reason
   * changes and shows the reason in its status; at most 127 bytes are kept.
   * Returns 0, -EINVAL for NULL, -ENOENT when the last add_device() was
   * refused (or none came yet). Check DEVPLUG_HAS_MEMBER(s, struct
   * devplug_device_sink, set_health_reason) first: older agents lack it.
   */
  int (*set_health_reason)(struct devplug_device_sink *s, const char *reason);

  /* ---- ABI minor 6 ---- */

  /**
   * Every NUMA node the device added last belongs to, when it is more than
   * one (a replica shared by NICs or HCAs on two nodes): replaces the
   * numa_node given to add_device(). The kubelet's TopologyInfo lists all
   * of them. Nodes are 0 or more, at most 1023; duplicates are dropped;
   * n = 0 means no NUMA affinity. Returns 0, -EINVAL for a NULL array with
   * n > 0 or a node out of range (the device keeps its numa_node), -ENOENT
   * when the last add_device() was refused (or none came yet). Check
   * DEVPLUG_HAS_MEMBER(s, struct devplug_device_sink, set_numa_nodes)
   * first: older agents lack it.
   */
  int (*set_numa_nodes)(struct devplug_device_sink *s, const int32_t *nodes, size_t n);

  /* ---- ABI minor 9 ---- */

  /*
   * What the device added last is, for DRA: a resource served with
   * api = "dra" publishes these in its ResourceSlices, where claims select
   * devices by them (CEL selectors, matchAttribute constraints). The device
   * plugin API has no place for them; `devplugctl status` shows them.
   *
   * set_pci_address: the PCI function the device is, "0000:3b:00.0" (upper
   * case, a short "3b:00.0" and an 8-digit domain are accepted). The agent
   * publishes the standard attributes resource.kubernetes.io/pciBusID and,
   * read from sysfs under host_root, resource.kubernetes.io/pcieRoot, the
   * root complex the function hangs under ("pci0000:3a"), so that claims
   * can put devices of several drivers under one root.
   *
   * set_attribute_*: one attribute. The name is a C identifier of at most
   * 32 characters, which then lies in the driver's own domain ("model"), or
   * a DNS subdomain of at most 63 characters, '/' and such an identifier
   * ("gpu.example.com/model"). The agent's own names are refused: "id" (the
   * module's device ID) and the standard numaNode, pciBusID and pcieRoot.
   * A string holds at most 64 bytes of UTF-8; a version is a Semantic
   * Versioning 2.0.0 string of at most 64 characters ("1.2.3-rc.1"; a
   * driver version such as "580.65.06" is no semantic version: give it as
   * a string).
   *
   * set_capacity: an amount the device has (bytes of memory, queues), a
   * capacity of the same name rules.
   *
   * Attributes and capacities share one set of names and, with the ones
   * the agent adds (id, numaNode, pciBusID, pcieRoot), a budget of 32 per
   * device, as resource.k8s.io/v1 allows. Each returns 0; -EINVAL for a bad
   * name or value, -EEXIST for a name the device has already, -E2BIG past
   * the budget (the agent logs why, and the device keeps what it had);
   * -ENOENT when the last add_device() was refused (or none came yet).
   * Check DEVPLUG_HAS_MEMBER(s, struct devplug_device_sink,
   * set_pci_address) first, or use the devplug_sink_*() helpers below:
   * older agents lack them.
   */
  int (*set_pci_address)(struct devplug_device_sink *s, const char *address);
  int (*set_attribute_string)(struct devplug_device_sink *s, const char *name, const char *value);
  int (*set_attribute_int)(struct devplug_device_sink *s, const char *name, int64_t value);
  /** value is 0 or 1. */
  int (*set_attribute_bool)(struct devplug_device_sink *s, const char *name, int32_t value);
  int (*set_attribute_version)(struct devplug_device_sink *s, const char *name, const char *value);
  /** value at most INT64_MAX. */
  int (*set_capacity)(struct devplug_device_sink *s, const char *name, uint64_t value);

  /* ---- ABI minor 10 ---- */

  /**
   * Says that the device added last is one share of `device`, a device the
   * module offers several times (`shares = N`: "kvm-0" ... "kvm-109" are
   * shares of "kvm", "GPU-…::0" ... of "GPU-…"). The device plugin API
   * sees the shares as they are, one extended resource unit each. DRA
   * publishes `device` once, shared by several claims
   * (allowMultipleAllocations) with a capacity "shares" of the number of
   * its shares, a claim consuming one by default; each claim's share is
   * prepared as one of the module's shares, set up and released as the
   * device plugin API's pod would be. The attributes and capacities of the
   * device's first share are published (a capacity of the module's then
   * defaults to 0 per claim); it is tainted while any share is Unhealthy.
   * `device` is at most 127 bytes of UTF-8 with no control character; the
   * name "shares" is the agent's. Returns 0, -EINVAL for a bad `device`,
   * -ENOENT when the last add_device() was refused (or none came yet).
   */
  int (*set_share_of)(struct devplug_device_sink *s, const char *device);
};

/**
 * Collects device IDs: the answer of preferred_allocation().
 */
struct devplug_id_sink {
  uint32_t struct_size;
  uint32_t reserved;
  void *agent_data; /**< the agent's; do not touch */
  /** Appends one ID. Returns 0, or -EINVAL for NULL. */
  int (*add_id)(struct devplug_id_sink *s, const char *id);
};

/* ------------------------------------------------------------------------ */
/* Host services                                                             */
/* ------------------------------------------------------------------------ */

/**
 * One value of the instance's [[resource]] table, at any depth (ABI minor 3,
 * see devplug_host.config_value). The caller sets struct_size; the agent
 * fills what fits.
 */
struct devplug_config_value {
  uint32_t struct_size;
  /** DEVPLUG_CONFIG_STRING, _INT, _BOOL, _TABLE, _ARRAY or _OTHER. */
  uint32_t type;
  const char *string; /**< STRING: the text; NULL otherwise */
  int64_t integer;    /**< INT: the value */
  int32_t boolean;    /**< BOOL: 0 or 1 */
  uint32_t reserved;
  size_t size;  /**< ARRAY: number of items; TABLE: number of keys */
  int32_t line; /**< line in its file, for messages; 0 if unknown */
  uint32_t reserved2;
};

/**
 * Who holds a device: the pod and container the kubelet's PodResources API
 * lists it under (ABI minor 2, see devplug_host.pod_of). The caller sets
 * struct_size; the agent fills what fits.
 */
struct devplug_pod {
  uint32_t struct_size;
  uint32_t reserved;
  const char *pod_namespace;
  const char *pod_name;
  const char *pod_uid; /**< "" when the kubelet does not say (API v1) */
  const char *container;
};

/**
 * Services the agent gives one module instance. Valid from create() until
 * destroy() returns. Never NULL members (in this minor version).
 */
struct devplug_host {
  uint32_t struct_size;
  uint32_t abi_minor;        /**< the agent's ABI minor version */
  void *agent_data;          /**< the agent's; do not touch */
  const char *resource_name; /**< e.g. "devices.kubevirt.io/kvm" */
  /**
   * Prefix for every host filesystem lookup ("/" in production, "/host" in
   * a container, a fixture tree in tests). Never ends with '/' unless it is
   * "/". Paths given back to the agent must not carry it.
   */
  const char *host_root;

  /** Logs one line, attributed to this resource. Any thread. */
  void (*log)(const struct devplug_host *h, int32_t level, const char *msg);

  /**
   * Tells the agent the device list may have changed; the agent calls
   * list_devices() soon on the worker thread. Calls are coalesced. Any
   * thread; never blocks on the worker.
   */
  void (*devices_changed)(const struct devplug_host *h);

  /**
   * Attaches a reason to the error the current call is about to return.
   * Worker thread only; the last call before returning wins.
   */
  void (*set_error)(const struct devplug_host *h, const char *msg);

  /**
   * Reports a bad configuration value during create(); the agent prints it
   * with the file, line and key of the value. create() should then return
   * -EINVAL.
   */
  void (*config_error)(const struct devplug_host *h, const char *key, const char *msg);

  /*
   * Typed read-only access to the instance's own [[resource]] table. The
   * agent has already checked each key against the module's config_keys
   * (unknown keys and wrong types never reach the module). Each getter
   * returns 0 and sets *ret, or -ENOENT if the key is not set (the module
   * applies its default), or -EINVAL if the key was not declared with that
   * type. Returned strings stay valid until destroy().
   */
  int (*config_string)(const struct devplug_host *h, const char *key, const char **ret);
  int (*config_int)(const struct devplug_host *h, const char *key, int64_t *ret);
  int (*config_bool)(const struct devplug_host *h, const char *key, int32_t *ret);
  /** *ret_n strings in *ret (an array owned by the agent). */
  int (*config_string_array)(const struct devplug_host *h, const char *key, const char *const **ret,
                             size_t *ret_n);

  /* ---- ABI minor 1 ---- */

  /**
   * *ret_n integers in *ret (owned by the agent), for a key declared
   * DEVPLUG_CONFIG_INT_ARRAY. An agent of minor 0 has no such member and
   * rejects such keys: check DEVPLUG_HAS_MEMBER(h, struct devplug_host,
   * config_int_array), or refuse to load (-ENOTSUP from the entry point)
   * when agent_abi_minor < 1.
   */
  int (*config_int_array)(const struct devplug_host *h, const char *key, const int64_t **ret,
                          size_t *ret_n);

  /* ---- ABI minor 2 ---- */

  /**
   * Which pod holds device `id` of this resource, as the kubelet's
   * PodResources API lists it: fills *ret and returns 0; -ENOENT when no
   * running container holds it; -ENOTUNIQ when the kubelet lists it under
   * more than one pod (kubelets before 1.34 keep a finished pod's devices
   * listed, and List does not say which pod runs): no holder can be named,
   * so act on none (fail pre_start(); the kubelet retries the start);
   * -EAGAIN when the kubelet cannot be asked now (no PodResources socket,
   * rate limited, an error); -EINVAL for bad arguments. The answer always
   * comes from a List sent after the device was last handed out (its last
   * Allocate and, inside pre_start(), that PreStartContainer), never from
   * one that may still show the previous holder. Worker thread only: it may
   * wait for List calls (each at most 5 s); a List at most 1 s old and new
   * enough is reused, and the agent shares Lists among every resource.
   * Strings in *ret stay valid until the next pod_of() or the end of the
   * current module call.
   */
  int (*pod_of)(const struct devplug_host *h, const char *id, struct devplug_pod *ret);

  /**
   * create() only. A module with on_release() gets release tracking for
   * every instance; an instance whose devices are shared by many pods at
   * once (replica IDs) calls this with 0 to opt out: its devices are then
   * never tracked or released. Returns 0.
   */
  int (*track_releases)(const struct devplug_host *h, int32_t on);

  /* ---- ABI minor 3 ---- */

  /*
   * Structured configuration: values inside tables and arrays. A path
   * starts with a declared key (of any type) and goes on with [N] for the
   * N-th item of an array (from 0) and .name for a key of a table; a name
   * that is not made of [A-Za-z0-9_-] is written in double quotes, with \"
   * and \\ inside: paths[2].container_path, envs."EF_POLL.USEC", usb[0].
   * The same paths name nested values in config_error(), which then points
   * at their own line. Check DEVPLUG_HAS_MEMBER(h, struct devplug_host,
   * config_value) first, or refuse to load when agent_abi_minor < 3 (keys
   * of type TABLE or ARRAY need it anyway: older agents reject them).
   */

  /**
   * Fills *ret with the value at path: 0; -ENOENT when it is not set (an
   * index past the end, a missing key); -EINVAL for a malformed path, an
   * undeclared key, or [N] / .name on a value that is no array / table.
   * Strings stay valid until destroy(). Any call of the instance.
   */
  int (*config_value)(const struct devplug_host *h, const char *path,
                      struct devplug_config_value *ret);

  /**
   * The name of the index-th key (from 0, in name order) of the table
   * at path: 0 with *ret_name set (valid until destroy()); -ENOENT when
   * index is past the end; -EINVAL when path is no table.
   */
  int (*config_member)(const struct devplug_host *h, const char *path, size_t index,
                       const char **ret_name);

  /**
   * Watches a host path (absolute, without host_root), typically a device
   * node: when an entry of that name is created, removed or renamed in its
   * directory, the agent rescans the instance as for devices_changed(). This
   * catches nodes made or removed without a uevent (rm, mknod by hand or by
   * a container runtime). The last component may be a shell pattern
   * (fnmatch(3), as in "/dev/ttyUSB*"): every entry it matches counts.
   * The agent keeps one inotify instance for all modules and watches the parent directory, or while
   * that is missing its nearest existing ancestor, moving down as directories appear. Changes of
   * content or attributes are not reported. Worker thread only; watching a path twice counts once;
   * watches end with destroy(). Returns 0; -EINVAL for a path that is not absolute or is "/"; or a
   * negative errno when no watch could be added (-ENOSPC: the inotify watch limit): the path is
   * then seen only through events and resyncs.
   */
  int (*watch_path)(const struct devplug_host *h, const char *path);

  /* ---- ABI minor 4 ---- */

  /**
   * The agent's [agent] prestart_timeout in milliseconds: past it the
   * kubelet gets DEADLINE_EXCEEDED for PreStartContainer (pre_start() plus
   * any release run before it), whatever the module is still doing. A module
   * that bounds work of its own inside pre_start() (programming a device,
   * running a tool) keeps that bound below this, and may refuse a
   * configuration that cannot (config_error on its key). Fixed for an
   * instance's life: a reload that changes prestart_timeout creates new
   * instances for the resources whose module has pre_start() or
   * on_release(). Check DEVPLUG_HAS_MEMBER(h, struct devplug_host,
   * prestart_timeout_ms) first.
   */
  int64_t prestart_timeout_ms;

  /**
   * Where the instance's [[resource]] table stands among all of them in the
   * agent's configuration (0 for the first, after the drop-ins are merged),
   * as of create(). For modules whose instances share hardware and must
   * agree on who takes what ("the first matching table wins"): creates run
   * in parallel, so their order says nothing. A reload that moves tables
   * around does not renumber instances it keeps.
   */
  int32_t resource_index;
  uint32_t reserved2;

  /* ---- ABI minor 5 ---- */

  /**
   * create() only: on = 0 tells the agent that this instance has nothing
   * to do before containers start, although its module has pre_start()
   * (some configurations need it, others not). The agent then does not
   * call pre_start() for it, nor ask the kubelet for PreStartContainer,
   * unless release tracking needs the call (see on_release). Returns 0.
   */
  int (*use_pre_start)(const struct devplug_host *h, int32_t on);
};

/* ------------------------------------------------------------------------ */
/* Calling members a given agent may lack                                    */
/* ------------------------------------------------------------------------ */

/*
 * Each helper calls one member added after minor 0 when the struct it was
 * handed has it, and returns -ENOTSUP (or, for the numbers, a neutral
 * value) when an older agent's struct stops before it, so that a module can
 * call it without a DEVPLUG_HAS_MEMBER() check of its own.
 */
#define DEVPLUG_CALL_OPTIONAL_(ptr, T, m, call) \
  ((DEVPLUG_HAS_MEMBER(ptr, T, m) && (ptr)->m != NULL) ? (call) : -ENOTSUP)

static inline int devplug_sink_set_health_reason(struct devplug_device_sink *s,
                                                 const char *reason) {
  return DEVPLUG_CALL_OPTIONAL_(s, struct devplug_device_sink, set_health_reason,
                                s->set_health_reason(s, reason));
}
static inline int devplug_sink_set_numa_nodes(struct devplug_device_sink *s, const int32_t *nodes,
                                              size_t n) {
  return DEVPLUG_CALL_OPTIONAL_(s, struct devplug_device_sink, set_numa_nodes,
                                s->set_numa_nodes(s, nodes, n));
}
static inline int devplug_sink_set_pci_address(struct devplug_device_sink *s, const char *address) {
  return DEVPLUG_CALL_OPTIONAL_(s, struct devplug_device_sink, set_pci_address,
                                s->set_pci_address(s, address));
}
static inline int devplug_sink_set_attribute_string(struct devplug_device_sink *s, const char *name,
                                                    const char *value) {
  return DEVPLUG_CALL_OPTIONAL_(s, struct devplug_device_sink, set_attribute_string,
                                s->set_attribute_string(s, name, value));
}
static inline int devplug_sink_set_attribute_int(struct devplug_device_sink *s, const char *name,
                                                 int64_t value) {
  return DEVPLUG_CALL_OPTIONAL_(s, struct devplug_device_sink, set_attribute_int,
                                s->set_attribute_int(s, name, value));
}
static inline int devplug_sink_set_attribute_bool(struct devplug_device_sink *s, const char *name,
                                                  int32_t value) {
  return DEVPLUG_CALL_OPTIONAL_(s, struct devplug_device_sink, set_attribute_bool,
                                s->set_attribute_bool(s, name, value));
}
static inline int devplug_sink_set_attribute_version(struct devplug_device_sink *s,
                                                     const char *name, const char *value) {
  return DEVPLUG_CALL_OPTIONAL_(s, struct devplug_device_sink, set_attribute_version,
                                s->set_attribute_version(s, name, value));
}
static inline int devplug_sink_set_capacity(struct devplug_device_sink *s, const char *name,
                                            uint64_t value) {
  return DEVPLUG_CALL_OPTIONAL_(s, struct devplug_device_sink, set_capacity,
                                s->set_capacity(s, name, value));
}
static inline int devplug_sink_set_share_of(struct devplug_device_sink *s, const char *device) {
  return DEVPLUG_CALL_OPTIONAL_(s, struct devplug_device_sink, set_share_of,
                                s->set_share_of(s, device));
}
static inline int devplug_recipe_set_network(struct devplug_recipe *r, const char *device_id,
                                             const char *interface_name,
                                             const char *hardware_address) {
  return DEVPLUG_CALL_OPTIONAL_(r, struct devplug_recipe, set_network,
                                r->set_network(r, device_id, interface_name, hardware_address));
}
static inline int devplug_host_config_int_array(const struct devplug_host *h, const char *key,
                                                const int64_t **ret, size_t *ret_n) {
  return DEVPLUG_CALL_OPTIONAL_(h, struct devplug_host, config_int_array,
                                h->config_int_array(h, key, ret, ret_n));
}
static inline int devplug_host_pod_of(const struct devplug_host *h, const char *id,
                                      struct devplug_pod *ret) {
  return DEVPLUG_CALL_OPTIONAL_(h, struct devplug_host, pod_of, h->pod_of(h, id, ret));
}
static inline int devplug_host_track_releases(const struct devplug_host *h, int32_t on) {
  return DEVPLUG_CALL_OPTIONAL_(h, struct devplug_host, track_releases, h->track_releases(h, on));
}
static inline int devplug_host_config_value(const struct devplug_host *h, const char *path,
                                            struct devplug_config_value *ret) {
  return DEVPLUG_CALL_OPTIONAL_(h, struct devplug_host, config_value,
                                h->config_value(h, path, ret));
}
static inline int devplug_host_config_member(const struct devplug_host *h, const char *path,
                                             size_t index, const char **ret_name) {
  return DEVPLUG_CALL_OPTIONAL_(h, struct devplug_host, config_member,
                                h->config_member(h, path, index, ret_name));
}
static inline int devplug_host_watch_path(const struct devplug_host *h, const char *path) {
  return DEVPLUG_CALL_OPTIONAL_(h, struct devplug_host, watch_path, h->watch_path(h, path));
}
static inline int devplug_host_use_pre_start(const struct devplug_host *h, int32_t on) {
  return DEVPLUG_CALL_OPTIONAL_(h, struct devplug_host, use_pre_start, h->use_pre_start(h, on));
}
/** The agent's PreStartContainer deadline in ms; 28000 (the default) when
 *  the agent does not say (before minor 4). */
static inline int64_t devplug_host_prestart_timeout_ms(const struct devplug_host *h) {
  return DEVPLUG_HAS_MEMBER(h, struct devplug_host, prestart_timeout_ms) ? h->prestart_timeout_ms
                                                                         : 28000;
}
/** The instance's table index; -1 when the agent does not say (before
 *  minor 4). */
static inline int32_t devplug_host_resource_index(const struct devplug_host *h) {
  return DEVPLUG_HAS_MEMBER(h, struct devplug_host, resource_index) ? h->resource_index : -1;
}

/* ------------------------------------------------------------------------ */
/* The module descriptor                                                     */
/* ------------------------------------------------------------------------ */

/** One key a module accepts in its [[resource]] table. */
struct devplug_config_key {
  const char *name; /**< NULL terminates the array */
  uint32_t type;    /**< DEVPLUG_CONFIG_* */
  uint32_t flags;   /**< DEVPLUG_CONFIG_REQUIRED, ... */
  const char *help; /**< one line, shown by tools; may be NULL */
};

/** A kernel/udev event passed to on_udev_event(). */
struct devplug_udev_event {
  uint32_t struct_size;
  uint32_t reserved;
  const char *action;    /**< "add", "remove", "change", "bind", ... */
  const char *subsystem; /**< e.g. "misc", "pci" */
  const char *devtype;   /**< may be NULL */
  const char *syspath;   /**< /sys/... as the kernel names it (no host_root) */
  const char *sysname;   /**< last component of syspath */
  const char *devnode;   /**< /dev/... or NULL */
};

/** Opaque module instance, defined by each module. */
struct devplug_instance;

/**
 * What a module is. Static storage: the agent reads it for as long as the
 * module is loaded. Members up to and including list_devices are required;
 * the hooks after it are optional (NULL when absent).
 */
struct devplug_module {
  uint32_t struct_size; /**< sizeof(struct devplug_module) at build time */
  uint32_t abi_major;   /**< DEVPLUG_MODULE_ABI_MAJOR */
  uint32_t abi_minor;   /**< DEVPLUG_MODULE_ABI_MINOR at build time */
  uint32_t reserved;

  const char *name;        /**< short name, e.g. "kvm" */
  const char *version;     /**< the module's own version string */
  const char *description; /**< one line */

  /** Accepted keys of the [[resource]] table; NULL-name terminated; may be
   *  NULL when the module takes none. */
  const struct devplug_config_key *config_keys;
  /** udev subsystems whose events concern this module; NULL-terminated;
   *  may be NULL. */
  const char *const *udev_subsystems;

  /**
   * Creates an instance for one resource. Reads configuration through
   * host's getters; keeps host for later calls. On success stores the
   * instance in *ret_inst and returns 0. On failure returns a negative errno
   * (-EINVAL after config_error() for bad configuration) and leaves
   * *ret_inst untouched.
   */
  int (*create)(const struct devplug_host *host, struct devplug_instance **ret_inst);

  /** Destroys an instance; stops every thread the module started for it.
   *  After it returns the module makes no further host calls for it. */
  void (*destroy)(struct devplug_instance *inst);

  /**
   * Reports every device the instance serves, healthy or not, through sink.
   * The agent diffs successive lists and tells the kubelet only about
   * changes. Returns 0, or a negative errno when the scan itself failed (the
   * agent then keeps the previous list and logs the reason).
   */
  int (*list_devices)(struct devplug_instance *inst, struct devplug_device_sink *sink);

  /* ---- optional hooks ---- */

  /**
   * A udev event in one of udev_subsystems. Returns 1 if the device list
   * may have changed (the agent then calls list_devices()), 0 if the event
   * did not concern this instance, or a negative errno. When NULL, every
   * matching event triggers list_devices().
   */
  int (*on_udev_event)(struct devplug_instance *inst, const struct devplug_udev_event *event);

  /**
   * Builds the Allocate answer for one container that was given ids[0..n).
   * The agent has already checked that every ID is known, and healthy or
   * only held back while a release runs (the kubelet may not have seen
   * that yet; the release then runs at PreStart).
   * Returns 0 with resp filled, DEVPLUG_ALLOCATE_DEFAULT to use the default
   * recipes, or a negative errno (the kubelet fails the pod's admission).
   */
  int (*allocate)(struct devplug_instance *inst, const char *const *ids, size_t n_ids,
                  struct devplug_recipe *resp);

  /**
   * Chooses `size` devices out of available[0..n_available), which includes
   * must_include[0..n_must_include); the choice should contain all of
   * must_include. Its presence advertises GetPreferredAllocation to the
   * kubelet. Returns 0 with IDs in ret, or a negative errno.
   */
  int (*preferred_allocation)(struct devplug_instance *inst, const char *const *available,
                              size_t n_available, const char *const *must_include,
                              size_t n_must_include, int32_t size, struct devplug_id_sink *ret);

  /**
   * Runs before every start of a container holding ids[0..n). Its presence
   * makes the kubelet call PreStartContainer, unless the instance opted out
   * (host->use_pre_start, ABI minor 5). The whole call must end within
   * host->prestart_timeout_ms (ABI minor 4; the kubelet gives it 30 s).
   * Returns 0, or a negative errno to fail the container start (the
   * kubelet tries the start again).
   */
  int (*pre_start)(struct devplug_instance *inst, const char *const *ids, size_t n_ids);

  /* ---- ABI minor 2 (optional, read only when struct_size covers it) ---- */

  /**
   * Gives devices back after their pod: ids[0..n) are no longer held (the
   * kubelet's PodResources API has stopped listing them past the agent's
   * grace period), or, right before a container start, were handed to a new
   * pod while the agent still counted them as held. Reset, scrub, power
   * down here. Returns 0 (released: the devices turn Healthy again),
   * -EAGAIN (still busy: asked again at the next poll) or another negative
   * errno with set_error() (failed: retried with backoff; the devices stay
   * Unhealthy with that reason meanwhile). While a release runs, the
   * devices are reported Unhealthy ("releasing"). Its presence makes the
   * agent track the resource's devices (see host->track_releases) and
   * advertise PreStartContainer. Each release runs exactly once per
   * holder.
   */
  int (*on_release)(struct devplug_instance *inst, const char *const *ids, size_t n_ids);

  /* ---- ABI minor 7 (read only when struct_size covers it) ---- */

  /**
   * DEVPLUG_CONCURRENT_* flags, or 0. With DEVPLUG_CONCURRENT_SLOW_CALLS,
   * pre_start() and on_release() of an instance run on a thread of their
   * own, one at a time between themselves and in the order they were asked
   * for, at the same time as its list_devices(), on_udev_event(),
   * allocate() and preferred_allocation(), which run one at a time on the
   * instance's worker. The module then guards the state the two threads
   * share, and holds no lock of its own across slow work (programming,
   * scrubbing, running a program), else the worker waits on it all the
   * same. create() and destroy() still run alone: no other call of the
   * instance is in flight. Set it when pre_start() or on_release() may take
   * longer than the kubelet waits for Allocate (the agent's call_timeout):
   * without it such a call holds up every Allocate of the resource behind
   * it, and the kubelet fails those pods' admission for good.
   */
  uint32_t concurrency;

  /* ---- ABI minor 8 (reserved, and zero, before) ---- */

  /**
   * With DEVPLUG_CONCURRENT_DEVICES: how many pre_start() and on_release()
   * calls of an instance may run at once, each on its own thread, on
   * disjoint device sets; 0 lets the agent choose (4). Calls that name a
   * common device still run one at a time, in the order they were asked
   * for (a release, then the PreStart of the device's next container).
   * A limit of the hardware (a card that programs one port at a time)
   * belongs here, or in a lock the module takes around that step only.
   */
  uint32_t max_slow_calls;
};

/** devplug_module.concurrency: pre_start and on_release apart (ABI minor 7). */
#define DEVPLUG_CONCURRENT_SLOW_CALLS 1u
/**
 * devplug_module.concurrency: pre_start and on_release apart, and of
 * different devices at the same time, up to max_slow_calls (ABI minor 8).
 * Implies DEVPLUG_CONCURRENT_SLOW_CALLS. The module then guards what calls
 * on different devices share. Set it when one device's programming or
 * scrub may take long: without it the PreStart of another device waits
 * behind it, and the kubelet fails that container's start after 30 s.
 */
#define DEVPLUG_CONCURRENT_DEVICES 2u

/**
 * The one exported function. The agent passes its own ABI minor version;
 * the module stores its descriptor in *ret_module and returns 0, or returns
 * a negative errno (-ENOTSUP when it needs a newer agent).
 */
typedef int (*devplug_module_entry_fn)(uint32_t agent_abi_minor,
                                       const struct devplug_module **ret_module);

DEVPLUG_MODULE_EXPORT int devplug_module_entry_v1(uint32_t agent_abi_minor,
                                                  const struct devplug_module **ret_module);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DEVPLUG_MODULE_H */
