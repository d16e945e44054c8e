/*
 * A configurable module for tests, built into several .so variants from this
 * one source (see tests/CMakeLists.txt):
 *
 *   fake_full        every optional hook; behaviour set by config keys
 *   fake_minimal     only the required members
 *   fake_noentry     no entry symbol
 *   fake_major2      descriptor claims ABI major 2
 *   fake_short       descriptor shorter than the required members
 *   fake_createfail  create() fails with a reason
 *   fake_unresolved  needs a symbol nothing provides (dlopen RTLD_NOW fails)
 *   fake_release     fake_full plus on_release() (ABI 1.2)
 *   fake_full_v2     fake_full, version 0.0.2 instead of 0.0.1
 *   fake_release_apart  fake_release declaring DEVPLUG_CONCURRENT_SLOW_CALLS
 *                    (ABI 1.7): pre_start() and on_release() on a lane of
 *                    their own (they read only configuration and append to
 *                    files, so they are safe beside the other calls)
 *   fake_release_lanes  fake_release declaring DEVPLUG_CONCURRENT_DEVICES
 *                    (ABI 1.8): those of different devices at the same time
 *   fake_release_onelane  the same with max_slow_calls = 1
 *
 * Keys (fake_full, fake_minimal):
 *   count (int, default 4)       devices fake-0 .. fake-<count-1>
 *   unhealthy (string array)     IDs reported Unhealthy
 *   numa (int, default -1)       NUMA node of every device
 *   bad_ids (bool)               also report an empty, a duplicate, a
 *                                64-character, a control-character and
 *                                four malformed-UTF-8 IDs (dropped) and
 *                                "café" (kept)
 *   fail_pre_start (string)      pre_start fails when given this ID
 *   env_prefix (string)          allocate() sets <prefix>_DEVICES
 *   default_for (string)         allocate() returns DEVPLUG_ALLOCATE_DEFAULT
 *                                when asked for exactly this ID
 *   hang_create (bool)           create() never returns
 *   hang_scan_after (int)        list_devices() call number N (1-based) and
 *                                every later one never return
 *   prestart_delay_ms (int)      pre_start() sleeps this long first
 *   log_host (bool)              create() logs the ABI 1.4 host fields
 *                                ("prestart_timeout_ms=N resource_index=N")
 *   allocate_delay_ms (int)      allocate() logs "allocate() sleeps now" and
 *                                sleeps this long first
 *   create_delay_ms (int)        create() sleeps this long first
 *   count_file (string)          each scan reads the device count from this
 *                                file (when it holds a number)
 *   fail_while (string)          list_devices() fails while this path exists
 *   sick_while (string)          fake-0 is Unhealthy ("sick") while this
 *                                path exists
 *   late_config_error (bool)     create() reports a bad "count" through
 *                                config_error() and returns an instance
 *   describe (bool)              ABI 1.9: fake-<i> is PCI function
 *                                0000:<i+1>:00.0 and has the attributes
 *                                model "fake", index i, even, firmware
 *                                "1.<i>.0" and capacity memory (i+1) GiB;
 *                                it also tries an "id" attribute and a
 *                                version "01.0", both refused
 *   share_of (int)               ABI 1.10: fake-<i> is one share of
 *                                device "shared-<i / share_of>"
 *
 * Unhealthy devices carry the reason "listed unhealthy" (ABI 1.2).
 *
 * Keys (fake_release):
 *   release_log (string)         on_release() appends "release <ids>" here;
 *                                with log_holder, pre_start() appends
 *                                "holder <id> <ns>/<pod>/<container>" (or
 *                                "holder <id> none <rc>") from pod_of()
 *   release_busy (string)        on_release() returns -EAGAIN while this
 *                                path exists
 *   release_fail (string)        on_release() fails (-EIO, "scrub failed")
 *                                while this path exists
 *   release_delay_ms (int)       on_release() appends "releasing <ids>" to
 *                                release_log and sleeps this long first
 *   release_block (string)       on_release() appends "releasing <ids>" and
 *                                waits while this path exists
 *   shared (bool)                opts out of release tracking
 *   log_holder (bool)            see release_log
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devplug/module.h"

struct devplug_instance {
  const struct devplug_host *host;
  int64_t hang_scan_after;
  int64_t scans;
  int64_t allocate_delay_ms;
  int64_t prestart_delay_ms;
  int64_t count;
  int64_t numa;
  const char *const *unhealthy;
  size_t n_unhealthy;
  int32_t bad_ids;
  const char *fail_pre_start;
  const char *env_prefix;
  const char *default_for;
  const char *count_file;
  const char *fail_while;
  const char *sick_while;
  const char *release_log;
  const char *release_busy;
  const char *release_fail;
  int64_t release_delay_ms;
  const char *release_block;
  int32_t describe;
  int64_t share_of;
  int32_t log_holder;
};

static void hang(void) {
  for (;;) sleep(1000);
}

__attribute__((unused)) static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

#ifdef FAKE_UNRESOLVED
extern int devplug_no_such_function(void);
#endif

static int fake_create(const struct devplug_host *host, struct devplug_instance **ret) {
#ifdef FAKE_UNRESOLVED
  if (devplug_no_such_function() < 0) return -EIO;
#endif
#ifdef FAKE_CREATE_FAILS
  /* Ends in bytes that are no UTF-8 (an overlong '.'): a module's error
     text is not checked, and it reaches logs, STATUS= and status JSON. */
  host->set_error(host, "the fake hardware is on fire \xC0\xAE");
  (void)ret;
  return -EIO;
#else
  struct devplug_instance *inst = calloc(1, sizeof(*inst));
  if (inst == NULL) return -ENOMEM;
  inst->host = host;
  inst->count = 4;
  inst->numa = -1;
  host->config_int(host, "count", &inst->count);
  host->config_int(host, "numa", &inst->numa);
  host->config_string_array(host, "unhealthy", &inst->unhealthy, &inst->n_unhealthy);
  host->config_bool(host, "bad_ids", &inst->bad_ids);
  host->config_bool(host, "describe", &inst->describe);
  host->config_int(host, "share_of", &inst->share_of);
  host->config_string(host, "fail_pre_start", &inst->fail_pre_start);
  host->config_string(host, "env_prefix", &inst->env_prefix);
  host->config_string(host, "default_for", &inst->default_for);
  host->config_int(host, "hang_scan_after", &inst->hang_scan_after);
  host->config_int(host, "allocate_delay_ms", &inst->allocate_delay_ms);
  host->config_int(host, "prestart_delay_ms", &inst->prestart_delay_ms);
  int32_t log_host = 0;
  host->config_bool(host, "log_host", &log_host);
  if (log_host && DEVPLUG_HAS_MEMBER(host, struct devplug_host, resource_index)) {
    char line[128];
    snprintf(line, sizeof(line), "prestart_timeout_ms=%lld resource_index=%d",
             (long long)host->prestart_timeout_ms, (int)host->resource_index);
    host->log(host, DEVPLUG_LOG_INFO, line);
  }
  host->config_string(host, "count_file", &inst->count_file);
  host->config_string(host, "fail_while", &inst->fail_while);
  host->config_string(host, "sick_while", &inst->sick_while);
  int64_t create_delay_ms = 0;
  host->config_int(host, "create_delay_ms", &create_delay_ms);
  if (create_delay_ms > 0) sleep_ms(create_delay_ms);
  host->config_string(host, "release_log", &inst->release_log);
  host->config_string(host, "release_busy", &inst->release_busy);
  host->config_string(host, "release_fail", &inst->release_fail);
  host->config_int(host, "release_delay_ms", &inst->release_delay_ms);
  host->config_string(host, "release_block", &inst->release_block);
  host->config_bool(host, "log_holder", &inst->log_holder);
  int32_t shared = 0;
  host->config_bool(host, "shared", &shared);
  if (shared && DEVPLUG_HAS_MEMBER(host, struct devplug_host, track_releases))
    host->track_releases(host, 0);
  int32_t late_config_error = 0;
  host->config_bool(host, "late_config_error", &late_config_error);
  if (late_config_error)
    host->config_error(host, "count", "is reported bad, yet create() succeeds");
  int32_t hang_create = 0;
  host->config_bool(host, "hang_create", &hang_create);
  if (hang_create) hang();
  if (inst->count < 0 || inst->count > 1000000) {
    host->config_error(host, "count", "must be between 0 and 1000000");
    free(inst);
    return -EINVAL;
  }
  *ret = inst;
  return 0;
#endif
}

static void fake_destroy(struct devplug_instance *inst) { free(inst); }

static int is_unhealthy(const struct devplug_instance *inst, const char *id) {
  if (inst->sick_while && strcmp(id, "fake-0") == 0 && access(inst->sick_while, F_OK) == 0)
    return 1;
  for (size_t i = 0; i < inst->n_unhealthy; i++)
    if (strcmp(inst->unhealthy[i], id) == 0) return 1;
  return 0;
}

static int fake_list(struct devplug_instance *inst, struct devplug_device_sink *sink) {
  inst->scans++;
  if (inst->hang_scan_after > 0 && inst->scans >= inst->hang_scan_after) {
    inst->host->log(inst->host, DEVPLUG_LOG_INFO, "list_devices hangs now");
    hang();
  }
  if (inst->fail_while && access(inst->fail_while, F_OK) == 0) {
    inst->host->set_error(inst->host, "the fake bus is not ready");
    return -EAGAIN;
  }
  if (inst->count_file) {
    FILE *f = fopen(inst->count_file, "r");
    long long n;
    if (f && fscanf(f, "%lld", &n) == 1 && n >= 0) inst->count = n;
    if (f) fclose(f);
  }
  for (int64_t i = 0; i < inst->count; i++) {
    char id[32], node[64];
    struct devplug_recipe *r = NULL;
    snprintf(id, sizeof(id), "fake-%lld", (long long)i);
    snprintf(node, sizeof(node), "/dev/fake%lld", (long long)i);
    const int unhealthy = is_unhealthy(inst, id);
    int rc = sink->add_device(sink, id, unhealthy ? DEVPLUG_UNHEALTHY : DEVPLUG_HEALTHY,
                              (int32_t)inst->numa, &r);
    if (rc < 0) return rc;
    if (unhealthy && DEVPLUG_HAS_MEMBER(sink, struct devplug_device_sink, set_health_reason))
      sink->set_health_reason(sink, "listed unhealthy");
    r->add_device_node(r, node, NULL, NULL);
    r->add_env(r, "FAKE_VISIBLE", id);
    if (inst->share_of > 0) {
      char of[32];
      snprintf(of, sizeof(of), "shared-%lld", (long long)(i / inst->share_of));
      devplug_sink_set_share_of(sink, of);
    }
    if (inst->describe) {
      char pci[32], firmware[32];
      snprintf(pci, sizeof(pci), "0000:%02llx:00.0", (long long)(i + 1) & 0xff);
      snprintf(firmware, sizeof(firmware), "1.%lld.0", (long long)i);
      devplug_sink_set_pci_address(sink, pci);
      devplug_sink_set_attribute_string(sink, "model", "fake");
      devplug_sink_set_attribute_int(sink, "index", i);
      devplug_sink_set_attribute_bool(sink, "even", i % 2 == 0);
      devplug_sink_set_attribute_version(sink, "firmware", firmware);
      devplug_sink_set_capacity(sink, "memory", (uint64_t)(i + 1) << 30);
      devplug_sink_set_attribute_string(sink, "id", "mine");
      devplug_sink_set_attribute_version(sink, "old", "01.0");
    }
  }
  if (inst->bad_ids) {
    char long_id[65];
    memset(long_id, 'x', 64);
    long_id[64] = '\0';
    sink->add_device(sink, "", DEVPLUG_HEALTHY, -1, NULL);
    sink->add_device(sink, "fake-0", DEVPLUG_HEALTHY, -1, NULL);
    sink->add_device(sink, long_id, DEVPLUG_HEALTHY, -1, NULL);
    sink->add_device(sink, "tab\there", DEVPLUG_HEALTHY, -1, NULL);
    sink->add_device(sink, "bad-\xff-utf8", DEVPLUG_HEALTHY, -1, NULL);
    /* Lead bytes a naive decoder takes for well-formed: an overlong '.', a
     * surrogate, a code point above U+10FFFF. */
    sink->add_device(sink, "overlong-\xc0\xae", DEVPLUG_HEALTHY, -1, NULL);
    sink->add_device(sink, "surrogate-\xed\xa0\x80", DEVPLUG_HEALTHY, -1, NULL);
    sink->add_device(sink, "beyond-\xf4\x90\x80\x80", DEVPLUG_HEALTHY, -1, NULL);
    sink->add_device(sink, "caf\xc3\xa9", DEVPLUG_HEALTHY, -1, NULL); /* valid UTF-8: kept */
  }
  return 0;
}

#ifndef FAKE_MINIMAL
static int fake_allocate(struct devplug_instance *inst, const char *const *ids, size_t n,
                         struct devplug_recipe *resp) {
  if (inst->allocate_delay_ms > 0) {
    inst->host->log(inst->host, DEVPLUG_LOG_INFO, "allocate() sleeps now");
    sleep_ms(inst->allocate_delay_ms);
  }
  if (inst->default_for && n == 1 && strcmp(ids[0], inst->default_for) == 0)
    return DEVPLUG_ALLOCATE_DEFAULT;
  char key[128];
  snprintf(key, sizeof(key), "%s_DEVICES", inst->env_prefix ? inst->env_prefix : "FAKE");
  for (size_t i = 0; i < n; i++) resp->add_env(resp, key, ids[i]);
  resp->add_mount(resp, "/var/lib/fake", "/fake", 1);
  resp->add_annotation(resp, "fake.example/count", n == 1 ? "1" : "many");
  resp->add_cdi_device(resp, "fake.example/dev=all");
  return 0;
}

/* Must-include first, then the rest in order, up to size. */
static int fake_preferred(struct devplug_instance *inst, const char *const *available,
                          size_t n_available, const char *const *must, size_t n_must, int32_t size,
                          struct devplug_id_sink *ret) {
  (void)inst;
  int32_t taken = 0;
  for (size_t i = 0; i < n_must && taken < size; i++, taken++) ret->add_id(ret, must[i]);
  for (size_t i = 0; i < n_available && taken < size; i++) {
    int dup = 0;
    for (size_t j = 0; j < n_must; j++)
      if (strcmp(available[i], must[j]) == 0) dup = 1;
    if (!dup) {
      ret->add_id(ret, available[i]);
      taken++;
    }
  }
  return 0;
}

static void append_line(const char *path, const char *line) {
  if (path == NULL) return;
  FILE *f = fopen(path, "a");
  if (f == NULL) return;
  fprintf(f, "%s\n", line);
  fclose(f);
}

static int fake_pre_start(struct devplug_instance *inst, const char *const *ids, size_t n) {
  if (inst->prestart_delay_ms > 0) sleep_ms(inst->prestart_delay_ms);
  if (inst->log_holder && DEVPLUG_HAS_MEMBER(inst->host, struct devplug_host, pod_of)) {
    for (size_t i = 0; i < n; i++) {
      struct devplug_pod pod;
      memset(&pod, 0, sizeof(pod));
      pod.struct_size = sizeof(pod);
      char line[512];
      int rc = inst->host->pod_of(inst->host, ids[i], &pod);
      if (rc == 0)
        snprintf(line, sizeof(line), "holder %s %s/%s/%s", ids[i], pod.pod_namespace, pod.pod_name,
                 pod.container);
      else
        snprintf(line, sizeof(line), "holder %s none %d", ids[i], rc);
      append_line(inst->release_log, line);
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (inst->fail_pre_start && strcmp(ids[i], inst->fail_pre_start) == 0) {
      inst->host->set_error(inst->host, "device refused to reset");
      return -EIO;
    }
  }
  return 0;
}
#endif

#ifdef FAKE_RELEASE
static int fake_release(struct devplug_instance *inst, const char *const *ids, size_t n) {
  if (inst->release_delay_ms > 0 || inst->release_block) {
    char started[1024] = "releasing ";
    for (size_t i = 0; i < n; i++) {
      if (i) strncat(started, ",", sizeof(started) - strlen(started) - 1);
      strncat(started, ids[i], sizeof(started) - strlen(started) - 1);
    }
    append_line(inst->release_log, started);
    if (inst->release_delay_ms > 0) sleep_ms(inst->release_delay_ms);
    while (inst->release_block && access(inst->release_block, F_OK) == 0) sleep_ms(10);
  }
  if (inst->release_busy && access(inst->release_busy, F_OK) == 0) {
    inst->host->set_error(inst->host, "the card is still busy");
    return -EAGAIN;
  }
  if (inst->release_fail && access(inst->release_fail, F_OK) == 0) {
    inst->host->set_error(inst->host, "scrub failed");
    return -EIO;
  }
  char line[1024] = "release ";
  for (size_t i = 0; i < n; i++) {
    if (i) strncat(line, ",", sizeof(line) - strlen(line) - 1);
    strncat(line, ids[i], sizeof(line) - strlen(line) - 1);
  }
  append_line(inst->release_log, line);
  return 0;
}
#endif

static const struct devplug_config_key fake_keys[] = {
    {"count", DEVPLUG_CONFIG_INT, 0, "number of devices"},
    {"numa", DEVPLUG_CONFIG_INT, 0, "NUMA node"},
    {"unhealthy", DEVPLUG_CONFIG_STRING_ARRAY, 0, "unhealthy IDs"},
    {"bad_ids", DEVPLUG_CONFIG_BOOL, 0, "report invalid IDs too"},
    {"fail_pre_start", DEVPLUG_CONFIG_STRING, 0, "pre_start fails for this ID"},
    {"env_prefix", DEVPLUG_CONFIG_STRING, 0, "env prefix of allocate()"},
    {"default_for", DEVPLUG_CONFIG_STRING, 0, "allocate() defers for this ID"},
    {"hang_create", DEVPLUG_CONFIG_BOOL, 0, "create() never returns"},
    {"hang_scan_after", DEVPLUG_CONFIG_INT, 0, "list_devices() call N never returns"},
    {"allocate_delay_ms", DEVPLUG_CONFIG_INT, 0, "allocate() sleeps first"},
    {"prestart_delay_ms", DEVPLUG_CONFIG_INT, 0, "pre_start() sleeps first"},
    {"log_host", DEVPLUG_CONFIG_BOOL, 0, "create() logs the ABI 1.4 host fields"},
    {"create_delay_ms", DEVPLUG_CONFIG_INT, 0, "create() sleeps first"},
    {"count_file", DEVPLUG_CONFIG_STRING, 0, "file holding the device count"},
    {"fail_while", DEVPLUG_CONFIG_STRING, 0, "scans fail while this path exists"},
    {"sick_while", DEVPLUG_CONFIG_STRING, 0, "fake-0 is Unhealthy while this path exists"},
    {"late_config_error", DEVPLUG_CONFIG_BOOL, 0, "config_error() in a create() that succeeds"},
    {"release_log", DEVPLUG_CONFIG_STRING, 0, "file on_release() and pre_start() write to"},
    {"release_busy", DEVPLUG_CONFIG_STRING, 0, "on_release() is busy while this path exists"},
    {"release_fail", DEVPLUG_CONFIG_STRING, 0, "on_release() fails while this path exists"},
    {"release_delay_ms", DEVPLUG_CONFIG_INT, 0, "on_release() sleeps first"},
    {"release_block", DEVPLUG_CONFIG_STRING, 0, "on_release() waits while this path exists"},
    {"shared", DEVPLUG_CONFIG_BOOL, 0, "opt out of release tracking"},
    {"log_holder", DEVPLUG_CONFIG_BOOL, 0, "pre_start() logs pod_of() answers"},
    {"describe", DEVPLUG_CONFIG_BOOL, 0, "PCI address and attributes (ABI 1.9)"},
    {"share_of", DEVPLUG_CONFIG_INT, 0, "shares per shared device (ABI 1.10)"},
    {NULL, 0, 0, NULL},
};

static const struct devplug_module fake_module = {
#ifdef FAKE_SHORT
    .struct_size = offsetof(struct devplug_module, destroy),
#else
    .struct_size = sizeof(struct devplug_module),
#endif
#ifdef FAKE_MAJOR2
    .abi_major = 2,
#else
    .abi_major = DEVPLUG_MODULE_ABI_MAJOR,
#endif
    .abi_minor = DEVPLUG_MODULE_ABI_MINOR,
    .name = "fake",
#ifdef FAKE_VERSION
    .version = FAKE_VERSION,
#else
    .version = "0.0.1",
#endif
    .description = "test module",
    .config_keys = fake_keys,
    .udev_subsystems = NULL,
    .create = fake_create,
    .destroy = fake_destroy,
    .list_devices = fake_list,
#ifndef FAKE_MINIMAL
    .allocate = fake_allocate,
    .preferred_allocation = fake_preferred,
    .pre_start = fake_pre_start,
#endif
#ifdef FAKE_RELEASE
    .on_release = fake_release,
#endif
#if defined(FAKE_CONCURRENT_DEVICES)
    .concurrency = DEVPLUG_CONCURRENT_SLOW_CALLS | DEVPLUG_CONCURRENT_DEVICES,
#elif defined(FAKE_CONCURRENT)
    .concurrency = DEVPLUG_CONCURRENT_SLOW_CALLS,
#endif
#ifdef FAKE_MAX_SLOW_CALLS
    .max_slow_calls = FAKE_MAX_SLOW_CALLS,
#endif
};

#ifndef FAKE_NO_ENTRY
DEVPLUG_MODULE_EXPORT int devplug_module_entry_v1(uint32_t agent_abi_minor,
                                                  const struct devplug_module **ret) {
  (void)agent_abi_minor;
  *ret = &fake_module;
  return 0;
}
#else
/* Exports something, but not the entry point. */
DEVPLUG_MODULE_EXPORT int devplug_module_entry_v0(void) { return (int)fake_module.abi_major; }
#endif
