/*
 * Pins the module ABI's layout on LP64 targets (x86_64, aarch64): a change
 * here breaks every module built against an earlier header. Compiled as C99
 * and as C++ (abi_layout.cc includes this file); the checks run at compile
 * time, so a build that succeeds has passed them.
 */
#include "devplug/module.h"

#if defined(__cplusplus)
#define DEVPLUG_STATIC_ASSERT(e, m) static_assert(e, m)
#else
/* C99 has no _Static_assert: a negative array size fails the build. */
#define DEVPLUG_CAT2(a, b) a##b
#define DEVPLUG_CAT(a, b) DEVPLUG_CAT2(a, b)
#define DEVPLUG_STATIC_ASSERT(e, m) \
  typedef char DEVPLUG_CAT(devplug_abi_check_, __LINE__)[(e) ? 1 : -1]
#endif

#define PIN_SIZE(T, n) DEVPLUG_STATIC_ASSERT(sizeof(struct T) == (n), "sizeof " #T)
#define PIN_OFFSET(T, m, n) DEVPLUG_STATIC_ASSERT(offsetof(struct T, m) == (n), #T "." #m)

#if defined(__LP64__)
PIN_SIZE(devplug_recipe, 64);
PIN_OFFSET(devplug_recipe, agent_data, 8);
PIN_OFFSET(devplug_recipe, add_device_node, 16);
PIN_OFFSET(devplug_recipe, add_mount, 24);
PIN_OFFSET(devplug_recipe, add_env, 32);
PIN_OFFSET(devplug_recipe, add_annotation, 40);
PIN_OFFSET(devplug_recipe, add_cdi_device, 48);
PIN_OFFSET(devplug_recipe, set_network, 56);

PIN_SIZE(devplug_device_sink, 96);
PIN_OFFSET(devplug_device_sink, add_device, 16);
PIN_OFFSET(devplug_device_sink, set_health_reason, 24); /* minor 2 */
PIN_OFFSET(devplug_device_sink, set_numa_nodes, 32);    /* minor 6 */
PIN_OFFSET(devplug_device_sink, set_pci_address, 40);   /* minor 9 */
PIN_OFFSET(devplug_device_sink, set_attribute_string, 48);
PIN_OFFSET(devplug_device_sink, set_attribute_int, 56);
PIN_OFFSET(devplug_device_sink, set_attribute_bool, 64);
PIN_OFFSET(devplug_device_sink, set_attribute_version, 72);
PIN_OFFSET(devplug_device_sink, set_capacity, 80);
PIN_OFFSET(devplug_device_sink, set_share_of, 88); /* minor 10 */

PIN_SIZE(devplug_id_sink, 24);
PIN_OFFSET(devplug_id_sink, add_id, 16);

PIN_SIZE(devplug_host, 168);
PIN_OFFSET(devplug_host, abi_minor, 4);
PIN_OFFSET(devplug_host, agent_data, 8);
PIN_OFFSET(devplug_host, resource_name, 16);
PIN_OFFSET(devplug_host, host_root, 24);
PIN_OFFSET(devplug_host, log, 32);
PIN_OFFSET(devplug_host, devices_changed, 40);
PIN_OFFSET(devplug_host, set_error, 48);
PIN_OFFSET(devplug_host, config_error, 56);
PIN_OFFSET(devplug_host, config_string, 64);
PIN_OFFSET(devplug_host, config_int, 72);
PIN_OFFSET(devplug_host, config_bool, 80);
PIN_OFFSET(devplug_host, config_string_array, 88);
PIN_OFFSET(devplug_host, config_int_array, 96);     /* minor 1 */
PIN_OFFSET(devplug_host, pod_of, 104);              /* minor 2 */
PIN_OFFSET(devplug_host, track_releases, 112);      /* minor 2 */
PIN_OFFSET(devplug_host, config_value, 120);        /* minor 3 */
PIN_OFFSET(devplug_host, config_member, 128);       /* minor 3 */
PIN_OFFSET(devplug_host, watch_path, 136);          /* minor 3 */
PIN_OFFSET(devplug_host, prestart_timeout_ms, 144); /* minor 4 */
PIN_OFFSET(devplug_host, resource_index, 152);      /* minor 4 */
PIN_OFFSET(devplug_host, use_pre_start, 160);       /* minor 5 */

PIN_SIZE(devplug_config_value, 48); /* minor 3 */
PIN_OFFSET(devplug_config_value, type, 4);
PIN_OFFSET(devplug_config_value, string, 8);
PIN_OFFSET(devplug_config_value, integer, 16);
PIN_OFFSET(devplug_config_value, boolean, 24);
PIN_OFFSET(devplug_config_value, size, 32);
PIN_OFFSET(devplug_config_value, line, 40);

PIN_SIZE(devplug_pod, 40);
PIN_OFFSET(devplug_pod, pod_namespace, 8);
PIN_OFFSET(devplug_pod, pod_name, 16);
PIN_OFFSET(devplug_pod, pod_uid, 24);
PIN_OFFSET(devplug_pod, container, 32);

PIN_SIZE(devplug_config_key, 24);
PIN_OFFSET(devplug_config_key, type, 8);
PIN_OFFSET(devplug_config_key, flags, 12);
PIN_OFFSET(devplug_config_key, help, 16);

PIN_SIZE(devplug_udev_event, 56);
PIN_OFFSET(devplug_udev_event, action, 8);
PIN_OFFSET(devplug_udev_event, subsystem, 16);
PIN_OFFSET(devplug_udev_event, devtype, 24);
PIN_OFFSET(devplug_udev_event, syspath, 32);
PIN_OFFSET(devplug_udev_event, sysname, 40);
PIN_OFFSET(devplug_udev_event, devnode, 48);

PIN_SIZE(devplug_module, 128);
PIN_OFFSET(devplug_module, abi_major, 4);
PIN_OFFSET(devplug_module, abi_minor, 8);
PIN_OFFSET(devplug_module, name, 16);
PIN_OFFSET(devplug_module, version, 24);
PIN_OFFSET(devplug_module, description, 32);
PIN_OFFSET(devplug_module, config_keys, 40);
PIN_OFFSET(devplug_module, udev_subsystems, 48);
PIN_OFFSET(devplug_module, create, 56);
PIN_OFFSET(devplug_module, destroy, 64);
PIN_OFFSET(devplug_module, list_devices, 72);
PIN_OFFSET(devplug_module, on_udev_event, 80);
PIN_OFFSET(devplug_module, allocate, 88);
PIN_OFFSET(devplug_module, preferred_allocation, 96);
PIN_OFFSET(devplug_module, pre_start, 104);
PIN_OFFSET(devplug_module, on_release, 112);     /* minor 2 */
PIN_OFFSET(devplug_module, concurrency, 120);    /* minor 7 */
PIN_OFFSET(devplug_module, max_slow_calls, 124); /* minor 8, reserved before */
#endif

/* Values other code relies on. */
DEVPLUG_STATIC_ASSERT(DEVPLUG_MODULE_ABI_MAJOR == 1, "ABI major");
DEVPLUG_STATIC_ASSERT(DEVPLUG_UNHEALTHY == 0 && DEVPLUG_HEALTHY == 1, "health values");
DEVPLUG_STATIC_ASSERT(DEVPLUG_NO_NUMA_NODE == -1, "no NUMA node");
DEVPLUG_STATIC_ASSERT(DEVPLUG_CONFIG_STRING == 1 && DEVPLUG_CONFIG_INT == 2 &&
                          DEVPLUG_CONFIG_BOOL == 3 && DEVPLUG_CONFIG_STRING_ARRAY == 4 &&
                          DEVPLUG_CONFIG_INT_ARRAY == 5 && DEVPLUG_CONFIG_TABLE == 6 &&
                          DEVPLUG_CONFIG_ARRAY == 7 && DEVPLUG_CONFIG_OTHER == 8,
                      "config types");
DEVPLUG_STATIC_ASSERT(DEVPLUG_ALLOCATE_DEFAULT == 1, "allocate default");
DEVPLUG_STATIC_ASSERT(DEVPLUG_CONCURRENT_SLOW_CALLS == 1 && DEVPLUG_CONCURRENT_DEVICES == 2,
                      "concurrency flags");
DEVPLUG_STATIC_ASSERT(DEVPLUG_LOG_ERROR == 0 && DEVPLUG_LOG_TRACE == 4, "log levels");

/* The header alone is enough: this translation unit includes nothing else. */
int devplug_abi_layout_checked(void);
int devplug_abi_layout_checked(void) { return DEVPLUG_MODULE_ABI_MINOR; }
