/*
 * example: a complete devplug module in plain C, built against the installed
 * SDK alone. Start here when writing a module for new hardware.
 *
 * It serves `count` devices "example-0" ... backed by one character device
 * (default /dev/null). Each device is Healthy while that node exists and is a
 * character device. A container given devices receives the node under its
 * own name (/dev/example-<k>) and EXAMPLE_DEVICES=<comma-separated IDs>.
 *
 * Keys: count (integer, 1..1024, default 2), node (string, default /dev/null),
 * exclusive (boolean, default false): each device goes to one pod at a time,
 * and is "given back" (on_release) after it; otherwise pods share them and
 * release tracking is off.
 *
 * ABI 1.2 in use, each checked at run time so that the module also runs on
 * older agents: set_health_reason (why a device is Unhealthy), on_release
 * and track_releases (what to do when a pod has given a device back).
 *
 * Build: see README.md beside this file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <devplug/module.h>

struct devplug_instance {
  const struct devplug_host *host; /* valid until destroy() */
  int64_t count;
  int32_t exclusive;
  char node[256];       /* as the kubelet sees it */
  char host_node[4096]; /* host_root + node: what we stat */
};

static int example_create(const struct devplug_host *host, struct devplug_instance **ret) {
  int64_t count = 2;
  const char *node = "/dev/null";
  /* -ENOENT means "not set": keep the default. The agent has already
   * checked types and rejected unknown keys. */
  if (host->config_int(host, "count", &count) == 0 && (count < 1 || count > 1024)) {
    host->config_error(host, "count", "must be between 1 and 1024");
    return -EINVAL;
  }
  if (host->config_string(host, "node", &node) == 0 &&
      (node[0] != '/' || strlen(node) >= sizeof(((struct devplug_instance *)0)->node))) {
    host->config_error(host, "node", "must be an absolute path shorter than 256 bytes");
    return -EINVAL;
  }
  int32_t exclusive = 0;
  host->config_bool(host, "exclusive", &exclusive);
  /* Shared devices are never "given back": no release tracking for them. */
  if (!exclusive) (void)devplug_host_track_releases(host, 0);
  struct devplug_instance *inst = calloc(1, sizeof(*inst));
  if (inst == NULL) return -ENOMEM;
  inst->host = host;
  inst->count = count;
  inst->exclusive = exclusive;
  snprintf(inst->node, sizeof(inst->node), "%s", node);
  snprintf(inst->host_node, sizeof(inst->host_node), "%s%s",
           strcmp(host->host_root, "/") == 0 ? "" : host->host_root, node);
  *ret = inst;
  return 0;
}

static void example_destroy(struct devplug_instance *inst) { free(inst); }

static int example_list_devices(struct devplug_instance *inst, struct devplug_device_sink *sink) {
  struct stat st;
  const int healthy = stat(inst->host_node, &st) == 0 && S_ISCHR(st.st_mode);
  for (int64_t k = 0; k < inst->count; k++) {
    char id[32], container_path[64];
    struct devplug_recipe *recipe = NULL;
    snprintf(id, sizeof(id), "example-%lld", (long long)k);
    snprintf(container_path, sizeof(container_path), "/dev/example-%lld", (long long)k);
    int rc = sink->add_device(sink, id, healthy ? DEVPLUG_HEALTHY : DEVPLUG_UNHEALTHY,
                              DEVPLUG_NO_NUMA_NODE, &recipe);
    if (rc < 0) return rc;
    /* Why it is Unhealthy, in a few words: the agent logs it and shows it in
     * its status. */
    if (!healthy) (void)devplug_sink_set_health_reason(sink, "backing node missing");
    /* The default recipe: what Allocate returns for this device. Values of
     * one env key from several devices are merged as comma-separated lists. */
    if ((rc = recipe->add_device_node(recipe, inst->node, container_path, "rw")) < 0) return rc;
    if ((rc = recipe->add_env(recipe, "EXAMPLE_DEVICES", id)) < 0) return rc;
  }
  return 0;
}

/* A pod has given these devices back (exclusive mode). A real module resets
 * or scrubs the hardware here; -EAGAIN asks the agent to try again later.
 * Meanwhile the devices are Unhealthy ("releasing"). */
static int example_release(struct devplug_instance *inst, const char *const *ids, size_t n) {
  char msg[256];
  snprintf(msg, sizeof(msg), "%zu device(s) given back, first %s: nothing to reset", n,
           n > 0 ? ids[0] : "-");
  inst->host->log(inst->host, DEVPLUG_LOG_INFO, msg);
  return 0;
}

static const struct devplug_config_key example_keys[] = {
    {"count", DEVPLUG_CONFIG_INT, 0, "number of devices (default 2)"},
    {"node", DEVPLUG_CONFIG_STRING, 0, "character device behind them (default /dev/null)"},
    {"exclusive", DEVPLUG_CONFIG_BOOL, 0, "one pod per device, released after it"},
    {NULL, 0, 0, NULL},
};

static const struct devplug_module example_module = {
    .struct_size = sizeof(struct devplug_module),
    .abi_major = DEVPLUG_MODULE_ABI_MAJOR,
    .abi_minor = DEVPLUG_MODULE_ABI_MINOR,
    .name = "example",
    .version = "1.0.0",
    .description = "example devices backed by one character device",
    .config_keys = example_keys,
    .udev_subsystems = NULL, /* e.g. {"pci", NULL} to be told of PCI hotplug */
    .create = example_create,
    .destroy = example_destroy,
    .list_devices = example_list_devices,
    /* allocate, preferred_allocation, pre_start, on_udev_event: optional. */
    .on_release = example_release, /* ABI 1.2; older agents never read it */
};

DEVPLUG_MODULE_EXPORT int devplug_module_entry_v1(uint32_t agent_abi_minor,
                                                  const struct devplug_module **ret_module) {
  (void)agent_abi_minor; /* this module needs nothing beyond ABI 1.0 */
  *ret_module = &example_module;
  return 0;
}
