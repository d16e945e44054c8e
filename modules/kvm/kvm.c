/*
 * kvm module: shares the host's /dev/kvm among pods.
 *
 * Keys: shares (integer, default 110): how many pods may hold the device at
 * once; device (string, default "/dev/kvm"): the device node.
 * Devices: "kvm-0" ... "kvm-<shares-1>", all Healthy while the node exists
 * and is a character device, all Unhealthy otherwise.
 * Allocate: the device node at the same path inside the container ("rw").
 * Events: misc-subsystem uevents for the node (module load/unload, a
 * "change" written to /sys/class/misc/kvm/uevent) trigger a rescan, and so
 * does the node being created or removed without one (watched through the
 * agent's inotify, ABI 1.3).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "devplug/module.h"

#define KVM_DEFAULT_SHARES 110
#define KVM_MAX_SHARES 100000
#define KVM_DEFAULT_DEVICE "/dev/kvm"

struct devplug_instance {
  const struct devplug_host *host;
  int64_t shares;
  char device[256];     /* path the kubelet and containers see */
  char host_path[4096]; /* host_root + device, what we stat */
  int last_healthy;     /* -1 before the first scan */
};

static void kvm_log(const struct devplug_host *h, int32_t level, const char *fmt, const char *arg) {
  char buf[512];
  snprintf(buf, sizeof(buf), fmt, arg);
  h->log(h, level, buf);
}

static int kvm_create(const struct devplug_host *host, struct devplug_instance **ret) {
  int64_t shares = KVM_DEFAULT_SHARES;
  const char *device = KVM_DEFAULT_DEVICE;
  int rc;

  rc = host->config_int(host, "shares", &shares);
  if (rc < 0 && rc != -ENOENT) return rc;
  if (shares < 1 || shares > KVM_MAX_SHARES) {
    host->config_error(host, "shares", "must be between 1 and 100000");
    return -EINVAL;
  }
  rc = host->config_string(host, "device", &device);
  if (rc < 0 && rc != -ENOENT) return rc;
  if (device[0] != '/' || strstr(device, "/../") != NULL) {
    host->config_error(host, "device", "must be an absolute path to a device node, like /dev/kvm");
    return -EINVAL;
  }
  if (strlen(device) >= sizeof(((struct devplug_instance *)0)->device)) {
    host->config_error(host, "device", "path is too long");
    return -EINVAL;
  }

  struct devplug_instance *inst = calloc(1, sizeof(*inst));
  if (inst == NULL) return -ENOMEM;
  inst->host = host;
  inst->shares = shares;
  snprintf(inst->device, sizeof(inst->device), "%s", device);
  /* host_root is "/" or has no trailing slash. */
  if (strcmp(host->host_root, "/") == 0)
    snprintf(inst->host_path, sizeof(inst->host_path), "%s", device);
  else
    snprintf(inst->host_path, sizeof(inst->host_path), "%s%s", host->host_root, device);
  inst->last_healthy = -1;
  /* ABI 1.3: the agent's inotify sees the node made or removed without a
   * uevent (a hand mknod, rm); older agents see it at the next resync. */
  if (DEVPLUG_HAS_MEMBER(host, struct devplug_host, watch_path)) {
    rc = host->watch_path(host, device);
    if (rc < 0 && rc != -ENOSYS) /* ENOSYS: the agent has no inotify (it said so) */
      kvm_log(host, DEVPLUG_LOG_WARN,
              "cannot watch %s; changes without a uevent are seen at the next resync", device);
  }
  *ret = inst;
  return 0;
}

static void kvm_destroy(struct devplug_instance *inst) { free(inst); }

static int kvm_list_devices(struct devplug_instance *inst, struct devplug_device_sink *sink) {
  struct stat st;
  const int present = stat(inst->host_path, &st) == 0;
  const int healthy = present && S_ISCHR(st.st_mode);
  char reason[300];
  snprintf(reason, sizeof(reason), "%s %s", inst->device,
           present ? "is not a character device" : "missing");
  /* ABI 1.2: older agents have no set_health_reason. */
  const int reasons = DEVPLUG_HAS_MEMBER(sink, struct devplug_device_sink, set_health_reason);

  if (healthy != inst->last_healthy) {
    if (healthy)
      kvm_log(inst->host, DEVPLUG_LOG_INFO, "%s is present", inst->device);
    else
      kvm_log(inst->host, DEVPLUG_LOG_WARN,
              "%s is missing or not a character device; devices are Unhealthy", inst->device);
    inst->last_healthy = healthy;
  }
  const char *base = strrchr(inst->device, '/');
  base = base ? base + 1 : inst->device;
  for (int64_t i = 0; i < inst->shares; i++) {
    char id[32];
    struct devplug_recipe *recipe = NULL;
    snprintf(id, sizeof(id), "kvm-%lld", (long long)i);
    int rc = sink->add_device(sink, id, healthy ? DEVPLUG_HEALTHY : DEVPLUG_UNHEALTHY,
                              DEVPLUG_NO_NUMA_NODE, &recipe);
    if (rc < 0) return rc;
    if (!healthy && reasons) sink->set_health_reason(sink, reason);
    /* DRA (ABI 1.10): one device, shared by claims: "kvm" for /dev/kvm. */
    if (inst->shares > 1) devplug_sink_set_share_of(sink, base);
    rc = recipe->add_device_node(recipe, inst->device, inst->device, "rw");
    if (rc < 0) return rc;
  }
  return 0;
}

/* Only events for our own node matter: its misc device's name is the node's
 * file name ("kvm" for /dev/kvm). */
static int kvm_on_udev_event(struct devplug_instance *inst, const struct devplug_udev_event *ev) {
  const char *base = strrchr(inst->device, '/');
  base = base ? base + 1 : inst->device;
  if (ev->sysname != NULL && strcmp(ev->sysname, base) == 0) return 1;
  if (ev->devnode != NULL && strcmp(ev->devnode, inst->device) == 0) return 1;
  return 0;
}

static const struct devplug_config_key kvm_keys[] = {
    {"shares", DEVPLUG_CONFIG_INT, 0, "pods that may use the device at once (default 110)"},
    {"device", DEVPLUG_CONFIG_STRING, 0, "device node (default /dev/kvm)"},
    {NULL, 0, 0, NULL},
};

static const char *const kvm_subsystems[] = {"misc", NULL};

static const struct devplug_module kvm_module = {
    .struct_size = sizeof(struct devplug_module),
    .abi_major = DEVPLUG_MODULE_ABI_MAJOR,
    .abi_minor = DEVPLUG_MODULE_ABI_MINOR,
    .name = "kvm",
    .version = "1.0.0",
    .description = "shares /dev/kvm among pods",
    .config_keys = kvm_keys,
    .udev_subsystems = kvm_subsystems,
    .create = kvm_create,
    .destroy = kvm_destroy,
    .list_devices = kvm_list_devices,
    .on_udev_event = kvm_on_udev_event,
};

DEVPLUG_MODULE_EXPORT int devplug_module_entry_v1(uint32_t agent_abi_minor,
                                                  const struct devplug_module **ret) {
  (void)agent_abi_minor; /* needs nothing beyond minor 0 */
  *ret = &kvm_module;
  return 0;
}
