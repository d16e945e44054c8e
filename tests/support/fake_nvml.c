/*
 * A scriptable stand-in for libnvidia-ml.so.1, loaded by the nvidia module
 * through the same dlopen() path as the real library. It exports the NVML
 * entry points the module uses, with NVML's C signatures and return codes.
 *
 * Like the driver's library it serialises every call behind one lock, held
 * for the whole of nvmlEventSetWait_v2 (so a call made while another thread
 * waits for events waits too), and counts nested nvmlInit_v2 calls: only
 * the first one reads the GPUs.
 *
 * $FAKE_NVML_DIR/gpus, read at the first nvmlInit_v2:
 *   gpu <uuid> <minor> <bus id as NVML writes it> <name, '_' for spaces>
 *   mem <i> <MiB>          total memory of GPU i (default 40960)
 *   nvlink <i> <j> <n>     n active NVLinks between GPU i and GPU j
 *   ancestor <i> <j> <level>  nvmlDeviceGetTopologyCommonAncestor (default 50)
 *   lost <i>               queries of GPU i return NVML_ERROR_GPU_IS_LOST
 *   initfail <rc>          nvmlInit_v2 fails with rc
 *
 * $FAKE_NVML_DIR/mig, read again at every nvmlDeviceGetMigMode (MIG can be
 * reconfigured while NVML is initialised):
 *   mode <i> <0|1>         current MIG mode of GPU i
 *   mig <i> <uuid> <gi> <ci> <gi slices> <ci slices> <MiB>   a MIG device
 *
 * Events: lines appended to $FAKE_NVML_DIR/events are delivered by
 * nvmlEventSetWait_v2 to every event set with GPU i registered, in order:
 *   xid <i> <code> [<gi> <ci>]   i = -1 for no device
 *   migchange <i>
 *
 * While $FAKE_NVML_DIR/hold exists, nvmlEventSetWait_v2 does not time out
 * (a wait the driver has not ended yet); a wait held past its timeout notes
 * "waitheld" once.
 *
 * Every nvmlInit_v2, nvmlShutdown, nvmlEventSetCreate and nvmlEventSetFree
 * appends its name to $FAKE_NVML_DIR/calls; $FAKE_NVML_DIR/references holds
 * the count of nvmlInit_v2 not yet matched by an nvmlShutdown, and the pid
 * of the process that counted.
 *
 * Variants: FAKE_NVML_NO_EVENTS leaves out the event API; FAKE_NVML_NO_UUID
 * leaves out nvmlDeviceGetUUID (a required symbol); FAKE_NVML_NO_MIG leaves
 * out the MIG calls (drivers before R450).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_GPUS 32
#define MAX_MIGS 128
#define MAX_LINKS 18
#define NO_INSTANCE 0xFFFFFFFFu

typedef int nvmlReturn_t;
enum {
  OK = 0,
  UNINIT = 1,
  INVALID = 2,
  NOT_SUPPORTED = 3,
  NOT_FOUND = 6,
  SMALL = 7,
  TIMEOUT = 10,
  LOST = 15
};

typedef struct {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

struct fake_gpu {
  char uuid[96];
  unsigned minor;
  char bus_id[32];
  char name[96];
  int lost;
  unsigned long long mem_mib;
  int links[MAX_GPUS]; /* NVLinks to each other GPU */
  int ancestor[MAX_GPUS];
  unsigned mig_mode;
};

struct fake_mig {
  int parent;
  char uuid[96];
  unsigned gi, ci, gi_slices, ci_slices;
  unsigned long long mem_mib;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_gpu gpus[MAX_GPUS];
static unsigned n_gpus;
static struct fake_mig migs[MAX_MIGS];
static unsigned n_migs;
static int initialized;

/* Every entry point runs under the library's one lock. */
#define LOCKED(call)             \
  do {                           \
    pthread_mutex_lock(&lock);   \
    nvmlReturn_t rc_ = (call);   \
    pthread_mutex_unlock(&lock); \
    return rc_;                  \
  } while (0)

static const char *dir(void) {
  const char *d = getenv("FAKE_NVML_DIR");
  return d ? d : ".";
}

static void note_call(const char *what) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/calls", dir());
  FILE *f = fopen(path, "a");
  if (f) {
    fprintf(f, "%s\n", what);
    fclose(f);
  }
}

static struct fake_gpu *gpu(void *handle) {
  struct fake_gpu *g = handle;
  if (!initialized || g < gpus || g >= gpus + n_gpus) return NULL;
  return g;
}

static struct fake_mig *mig(void *handle) {
  struct fake_mig *m = handle;
  if (!initialized || m < migs || m >= migs + n_migs) return NULL;
  return m;
}

static void read_mig(void) {
  char path[4096], line[512];
  snprintf(path, sizeof(path), "%s/mig", dir());
  n_migs = 0;
  for (unsigned i = 0; i < n_gpus; i++) gpus[i].mig_mode = 0;
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  while (fgets(line, sizeof(line), f)) {
    int i;
    unsigned mode;
    struct fake_mig *m = &migs[n_migs];
    if (sscanf(line, "mode %d %u", &i, &mode) == 2 && i >= 0 && i < (int)n_gpus) {
      gpus[i].mig_mode = mode;
    } else if (n_migs < MAX_MIGS &&
               sscanf(line, "mig %d %95s %u %u %u %u %llu", &m->parent, m->uuid, &m->gi, &m->ci,
                      &m->gi_slices, &m->ci_slices, &m->mem_mib) == 7 &&
               m->parent >= 0 && m->parent < (int)n_gpus) {
      n_migs++;
    }
  }
  fclose(f);
}

static void note_references(int n) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/references", dir());
  FILE *f = fopen(path, "w");
  if (f) {
    fprintf(f, "%d %d\n", n, (int)getpid());
    fclose(f);
  }
}

static nvmlReturn_t init_(void);

static nvmlReturn_t init(void) {
  nvmlReturn_t rc = init_();
  note_references(initialized);
  return rc;
}

static nvmlReturn_t init_(void) {
  note_call("init");
  if (initialized) { /* nested: a reference only */
    initialized++;
    return OK;
  }
  char path[4096], line[512];
  snprintf(path, sizeof(path), "%s/gpus", dir());
  FILE *f = fopen(path, "r");
  n_gpus = 0;
  n_migs = 0;
  memset(gpus, 0, sizeof(gpus));
  if (f == NULL) {
    initialized++; /* no GPUs */
    return OK;
  }
  int fail = 0;
  while (fgets(line, sizeof(line), f)) {
    struct fake_gpu *g = &gpus[n_gpus];
    int i, j, n;
    unsigned long long mib;
    if (n_gpus < MAX_GPUS &&
        sscanf(line, "gpu %95s %u %31s %95s", g->uuid, &g->minor, g->bus_id, g->name) == 4) {
      for (char *c = g->name; *c; c++)
        if (*c == '_') *c = ' ';
      for (int k = 0; k < MAX_GPUS; k++) g->ancestor[k] = 50;
      g->mem_mib = 40960;
      n_gpus++;
    } else if (sscanf(line, "mem %d %llu", &i, &mib) == 2 && i >= 0 && i < MAX_GPUS) {
      gpus[i].mem_mib = mib;
    } else if (sscanf(line, "nvlink %d %d %d", &i, &j, &n) == 3 && i >= 0 && j >= 0 &&
               i < MAX_GPUS && j < MAX_GPUS) {
      gpus[i].links[j] += n;
      gpus[j].links[i] += n;
    } else if (sscanf(line, "ancestor %d %d %d", &i, &j, &n) == 3 && i >= 0 && j >= 0 &&
               i < MAX_GPUS && j < MAX_GPUS) {
      gpus[i].ancestor[j] = n;
      gpus[j].ancestor[i] = n;
    } else if (sscanf(line, "lost %d", &i) == 1 && i >= 0 && i < MAX_GPUS) {
      gpus[i].lost = 1;
    } else if (sscanf(line, "initfail %d", &n) == 1) {
      fail = n;
    }
  }
  fclose(f);
  if (fail) return fail;
  initialized++;
  read_mig();
  return OK;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { LOCKED(init()); }

static nvmlReturn_t shutdown_(void) {
  note_call("shutdown");
  if (!initialized) return UNINIT;
  initialized--;
  note_references(initialized);
  return OK;
}

EXPORT nvmlReturn_t nvmlShutdown(void) { LOCKED(shutdown_()); }

EXPORT const char *nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case OK:
      return "Success";
    case UNINIT:
      return "Uninitialized";
    case LOST:
      return "GPU is lost";
    case TIMEOUT:
      return "Timeout";
    case NOT_SUPPORTED:
      return "Not Supported";
    case NOT_FOUND:
      return "Not Found";
    default:
      return "Unknown Error";
  }
}

static nvmlReturn_t get_count(unsigned int *count) {
  if (!initialized) return UNINIT;
  *count = n_gpus;
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { LOCKED(get_count(count)); }

static nvmlReturn_t handle_by_index(unsigned int i, void **out) {
  if (!initialized) return UNINIT;
  if (i >= n_gpus) return INVALID;
  *out = &gpus[i];
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **out) {
  LOCKED(handle_by_index(i, out));
}

#ifndef FAKE_NVML_NO_UUID
static nvmlReturn_t get_uuid(void *h, char *buf, unsigned int len) {
  const char *uuid = NULL;
  struct fake_gpu *g = gpu(h);
  struct fake_mig *m = mig(h);
  if (g) {
    if (g->lost) return LOST;
    uuid = g->uuid;
  } else if (m) {
    uuid = m->uuid;
  } else {
    return INVALID;
  }
  if (strlen(uuid) + 1 > len) return SMALL;
  strcpy(buf, uuid);
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(void *h, char *buf, unsigned int len) {
  LOCKED(get_uuid(h, buf, len));
}
#endif

static nvmlReturn_t get_minor(void *h, unsigned int *minor) {
  struct fake_gpu *g = gpu(h);
  if (!g) return mig(h) ? NOT_SUPPORTED : INVALID;
  if (g->lost) return LOST;
  *minor = g->minor;
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(void *h, unsigned int *minor) {
  LOCKED(get_minor(h, minor));
}

static void fill_pci(const struct fake_gpu *g, nvmlPciInfo_t *p) {
  memset(p, 0, sizeof(*p));
  snprintf(p->busId, sizeof(p->busId), "%s", g->bus_id);
  snprintf(p->busIdLegacy, sizeof(p->busIdLegacy), "%s", g->bus_id + 4);
  sscanf(g->bus_id, "%x:%x:%x", &p->domain, &p->bus, &p->device);
  p->pciDeviceId = 0x20b010de;
}

static nvmlReturn_t get_pci(void *h, nvmlPciInfo_t *p) {
  struct fake_gpu *g = gpu(h);
  if (!g) return INVALID;
  if (g->lost) return LOST;
  fill_pci(g, p);
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *h, nvmlPciInfo_t *p) { LOCKED(get_pci(h, p)); }

static nvmlReturn_t get_name(void *h, char *buf, unsigned int len) {
  struct fake_gpu *g = gpu(h);
  if (!g) return INVALID;
  if (g->lost) return LOST;
  snprintf(buf, len, "%s", g->name);
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(void *h, char *buf, unsigned int len) {
  LOCKED(get_name(h, buf, len));
}

static nvmlReturn_t nvlink_state(void *h, unsigned int link, int *active) {
  struct fake_gpu *g = gpu(h);
  if (!g) return INVALID;
  if (link >= MAX_LINKS) return INVALID;
  /* Links are numbered in order of the peers they reach. */
  unsigned k = 0;
  for (unsigned j = 0; j < n_gpus; j++) k += (unsigned)g->links[j];
  *active = link < k;
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(void *h, unsigned int link, int *active) {
  LOCKED(nvlink_state(h, link, active));
}

static nvmlReturn_t nvlink_remote(void *h, unsigned int link, nvmlPciInfo_t *p) {
  struct fake_gpu *g = gpu(h);
  if (!g) return INVALID;
  unsigned k = 0;
  for (unsigned j = 0; j < n_gpus; j++) {
    if (link < k + (unsigned)g->links[j]) {
      fill_pci(&gpus[j], p);
      return OK;
    }
    k += (unsigned)g->links[j];
  }
  return INVALID;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(void *h, unsigned int link,
                                                        nvmlPciInfo_t *p) {
  LOCKED(nvlink_remote(h, link, p));
}

static nvmlReturn_t common_ancestor(void *a, void *b, int *level) {
  struct fake_gpu *ga = gpu(a), *gb = gpu(b);
  if (!ga || !gb) return INVALID;
  *level = ga == gb ? 0 : ga->ancestor[gb - gpus];
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(void *a, void *b, int *level) {
  LOCKED(common_ancestor(a, b, level));
}

#ifndef FAKE_NVML_NO_MIG
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
  unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount,
      sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
  unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

static nvmlReturn_t memory_info(void *h, nvmlMemory_t *mem) {
  struct fake_gpu *g = gpu(h);
  struct fake_mig *m = mig(h);
  if (!g && !m) return INVALID;
  if (g && g->lost) return LOST;
  memset(mem, 0, sizeof(*mem));
  mem->total = (g ? g->mem_mib : m->mem_mib) << 20;
  mem->free = mem->total;
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *mem) {
  LOCKED(memory_info(h, mem));
}

static nvmlReturn_t mig_mode(void *h, unsigned int *current, unsigned int *pending) {
  struct fake_gpu *g = gpu(h);
  if (!g) return INVALID;
  if (g->lost) return LOST;
  read_mig();
  *current = *pending = g->mig_mode;
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(void *h, unsigned int *current, unsigned int *pending) {
  LOCKED(mig_mode(h, current, pending));
}

static nvmlReturn_t max_mig(void *h, unsigned int *count) {
  struct fake_gpu *g = gpu(h);
  if (!g) return INVALID;
  if (!g->mig_mode) return NOT_SUPPORTED;
  *count = 7;
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(void *h, unsigned int *count) {
  LOCKED(max_mig(h, count));
}

static nvmlReturn_t mig_by_index(void *h, unsigned int index, void **out) {
  struct fake_gpu *g = gpu(h);
  if (!g) return INVALID;
  if (!g->mig_mode) return NOT_SUPPORTED;
  if (index >= 7) return INVALID;
  unsigned k = 0;
  for (unsigned i = 0; i < n_migs; i++) {
    if (&gpus[migs[i].parent] != g) continue;
    if (k++ == index) {
      *out = &migs[i];
      return OK;
    }
  }
  return NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(void *h, unsigned int index, void **out) {
  LOCKED(mig_by_index(h, index, out));
}

static nvmlReturn_t gi_id(void *h, unsigned int *id) {
  struct fake_mig *m = mig(h);
  if (!m) return gpu(h) ? NOT_SUPPORTED : INVALID;
  *id = m->gi;
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(void *h, unsigned int *id) { LOCKED(gi_id(h, id)); }

static nvmlReturn_t ci_id(void *h, unsigned int *id) {
  struct fake_mig *m = mig(h);
  if (!m) return gpu(h) ? NOT_SUPPORTED : INVALID;
  *id = m->ci;
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(void *h, unsigned int *id) {
  LOCKED(ci_id(h, id));
}

static nvmlReturn_t attributes(void *h, nvmlDeviceAttributes_t *a) {
  struct fake_mig *m = mig(h);
  if (!m) return gpu(h) ? NOT_SUPPORTED : INVALID;
  memset(a, 0, sizeof(*a));
  a->multiprocessorCount = 14 * m->ci_slices;
  a->gpuInstanceSliceCount = m->gi_slices;
  a->computeInstanceSliceCount = m->ci_slices;
  a->memorySizeMB = m->mem_mib;
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(void *h, nvmlDeviceAttributes_t *a) {
  LOCKED(attributes(h, a));
}
#endif

#ifndef FAKE_NVML_NO_EVENTS
typedef struct {
  void *device;
  unsigned long long eventType, eventData;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

struct fake_set {
  long offset; /* bytes of the events file already delivered */
  unsigned long long mask[MAX_GPUS];
};

static nvmlReturn_t set_create(struct fake_set **out) {
  note_call("eventsetcreate");
  if (!initialized) return UNINIT;
  struct fake_set *s = calloc(1, sizeof(*s));
  if (!s) return 999;
  /* Only events written after the set exists are delivered. */
  char path[4096];
  snprintf(path, sizeof(path), "%s/events", dir());
  FILE *f = fopen(path, "r");
  if (f) {
    fseek(f, 0, SEEK_END);
    s->offset = ftell(f);
    fclose(f);
  }
  *out = s;
  return OK;
}

EXPORT nvmlReturn_t nvmlEventSetCreate(struct fake_set **out) { LOCKED(set_create(out)); }

static nvmlReturn_t register_events(void *h, unsigned long long types, struct fake_set *s) {
  struct fake_gpu *g = gpu(h);
  if (!g || !s) return INVALID;
  if ((types & 0x100) && !g->mig_mode) return NOT_SUPPORTED;
  s->mask[g - gpus] |= types;
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(void *h, unsigned long long types,
                                             struct fake_set *s) {
  LOCKED(register_events(h, types, s));
}

/* Holds the library's lock for the whole wait, as the driver's does. */
static nvmlReturn_t set_wait(struct fake_set *s, nvmlEventData_t *data, unsigned int timeout_ms) {
  if (!s || !data) return INVALID;
  char path[4096], hold[4096], line[256];
  snprintf(path, sizeof(path), "%s/events", dir());
  snprintf(hold, sizeof(hold), "%s/hold", dir());
  int noted_hold = 0;
  for (unsigned waited = 0;; waited += 5) {
    FILE *f = fopen(path, "r");
    if (f) {
      fseek(f, s->offset, SEEK_SET);
      while (fgets(line, sizeof(line), f)) {
        if (line[strlen(line) - 1] != '\n') break; /* partly written */
        s->offset = ftell(f);
        int i, n;
        unsigned long long code, type;
        unsigned gi = NO_INSTANCE, ci = NO_INSTANCE;
        if ((n = sscanf(line, "xid %d %llu %u %u", &i, &code, &gi, &ci)) >= 2) {
          type = 0x8;
          if (n < 4) gi = ci = NO_INSTANCE;
        } else if (sscanf(line, "migchange %d", &i) == 1) {
          type = 0x100;
          code = 0;
        } else {
          continue;
        }
        if (i >= 0 && (i >= (int)n_gpus || !(s->mask[i] & type))) continue;
        memset(data, 0, sizeof(*data));
        data->device = i >= 0 ? &gpus[i] : NULL;
        data->eventType = type;
        data->eventData = code;
        data->gpuInstanceId = gi;
        data->computeInstanceId = ci;
        fclose(f);
        return OK;
      }
      fclose(f);
    }
    if (waited >= timeout_ms) {
      if (access(hold, F_OK) != 0) return TIMEOUT;
      if (!noted_hold) note_call("waitheld");
      noted_hold = 1;
    }
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(struct fake_set *s, nvmlEventData_t *data,
                                        unsigned int timeout_ms) {
  LOCKED(set_wait(s, data, timeout_ms));
}

static nvmlReturn_t set_free(struct fake_set *s) {
  note_call("eventsetfree");
  free(s);
  return OK;
}

EXPORT nvmlReturn_t nvmlEventSetFree(struct fake_set *s) { LOCKED(set_free(s)); }
#endif
