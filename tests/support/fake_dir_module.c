/*
 * A test module whose devices are the entries of a directory, rescanned on
 * every uevent of its subsystems (it has no on_udev_event hook, so the agent
 * rescans for each matching event).
 *
 * Keys: dir (string, required): the directory, under host_root;
 *       prefix (string): only entries whose name starts with it.
 * Devices: one per entry, ID = entry name; Unhealthy when the entry is a
 * regular file whose content starts with "bad".
 * Subsystems: net, pci.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "devplug/module.h"

struct devplug_instance {
  const struct devplug_host *host;
  char dir[4096];
  const char *prefix;
};

static int dir_create(const struct devplug_host *host, struct devplug_instance **ret) {
  const char *dir = NULL;
  if (host->config_string(host, "dir", &dir) < 0 || dir[0] != '/') {
    host->config_error(host, "dir", "must be an absolute path");
    return -EINVAL;
  }
  struct devplug_instance *inst = calloc(1, sizeof(*inst));
  if (inst == NULL) return -ENOMEM;
  inst->host = host;
  inst->prefix = "";
  host->config_string(host, "prefix", &inst->prefix);
  snprintf(inst->dir, sizeof(inst->dir), "%s%s",
           strcmp(host->host_root, "/") ? host->host_root : "", dir);
  *ret = inst;
  return 0;
}

static void dir_destroy(struct devplug_instance *inst) { free(inst); }

static int dir_list(struct devplug_instance *inst, struct devplug_device_sink *sink) {
  DIR *d = opendir(inst->dir);
  if (d == NULL) return 0; /* no directory, no devices */
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || strncmp(e->d_name, inst->prefix, strlen(inst->prefix)) != 0)
      continue;
    char path[8192], buf[4] = {0};
    struct stat st;
    int healthy = 1;
    snprintf(path, sizeof(path), "%s/%s", inst->dir, e->d_name);
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
      FILE *f = fopen(path, "r");
      if (f != NULL) {
        if (fread(buf, 1, 3, f) == 3 && strcmp(buf, "bad") == 0) healthy = 0;
        fclose(f);
      }
    }
    sink->add_device(sink, e->d_name, healthy ? DEVPLUG_HEALTHY : DEVPLUG_UNHEALTHY,
                     DEVPLUG_NO_NUMA_NODE, NULL);
  }
  closedir(d);
  return 0;
}

static const struct devplug_config_key dir_keys[] = {
    {"dir", DEVPLUG_CONFIG_STRING, DEVPLUG_CONFIG_REQUIRED, "directory whose entries are devices"},
    {"prefix", DEVPLUG_CONFIG_STRING, 0, "entry name prefix"},
    {NULL, 0, 0, NULL},
};

static const char *const dir_subsystems[] = {"net", "pci", NULL};

static const struct devplug_module dir_module = {
    .struct_size = sizeof(struct devplug_module),
    .abi_major = DEVPLUG_MODULE_ABI_MAJOR,
    .abi_minor = DEVPLUG_MODULE_ABI_MINOR,
    .name = "fake-dir",
    .version = "0.0.1",
    .description = "directory entries as devices",
    .config_keys = dir_keys,
    .udev_subsystems = dir_subsystems,
    .create = dir_create,
    .destroy = dir_destroy,
    .list_devices = dir_list,
};

DEVPLUG_MODULE_EXPORT int devplug_module_entry_v1(uint32_t agent_abi_minor,
                                                  const struct devplug_module **ret) {
  (void)agent_abi_minor;
  *ret = &dir_module;
  return 0;
}
