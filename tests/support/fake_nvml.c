/*
 * A scriptable stand-in for libnvidia-ml.so.1, loaded by the nvidia module
 * through the same dlopen() path as the real library. It exports the NVML
 * entry points the module uses, with NVML's C signatures and return codes,
 * and takes its GPUs from $FAKE_NVML_DIR/gpus, read at nvmlInit_v2():
 *
 *   gpu <uuid> <minor> <bus id as NVML writes it> <name, '_' for spaces>
 *   nvlink <i> <j> <n>     n active NVLinks between GPU i and GPU j
 *   ancestor <i> <j> <level>  nvmlDeviceGetTopologyCommonAncestor (default 50)
 *   lost <i>               queries of GPU i return NVML_ERROR_GPU_IS_LOST
 *   initfail <rc>          nvmlInit_v2 fails with rc
 *
 * Events: lines appended to $FAKE_NVML_DIR/events ("xid <i> <code>", i = -1
 * for no device) are delivered by nvmlEventSetWait_v2 to every event set
 * with GPU i registered, in order.
 *
 * Variants: FAKE_NVML_NO_EVENTS leaves out the event API; FAKE_NVML_NO_UUID
 * leaves out nvmlDeviceGetUUID (a required symbol).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_GPUS 32
#define MAX_LINKS 18

typedef int nvmlReturn_t;
enum { OK = 0, UNINIT = 1, INVALID = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6, SMALL = 7,
       TIMEOUT = 10, LOST = 15 };

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
  int links[MAX_GPUS];    /* NVLinks to each other GPU */
  int ancestor[MAX_GPUS];
};

static struct fake_gpu gpus[MAX_GPUS];
static unsigned n_gpus;
static int initialized;

static const char *dir(void) {
  const char *d = getenv("FAKE_NVML_DIR");
  return d ? d : ".";
}

static struct fake_gpu *gpu(void *handle) {
  struct fake_gpu *g = handle;
  if (!initialized || g < gpus || g >= gpus + n_gpus) return NULL;
  return g;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) {
  char path[4096], line[512];
  snprintf(path, sizeof(path), "%s/gpus", dir());
  FILE *f = fopen(path, "r");
  n_gpus = 0;
  memset(gpus, 0, sizeof(gpus));
  if (f == NULL) {
    initialized++;  /* no GPUs */
    return OK;
  }
  int fail = 0;
  while (fgets(line, sizeof(line), f)) {
    struct fake_gpu *g = &gpus[n_gpus];
    int i, j, n;
    if (n_gpus < MAX_GPUS &&
        sscanf(line, "gpu %95s %u %31s %95s", g->uuid, &g->minor, g->bus_id, g->name) == 4) {
      for (char *c = g->name; *c; c++)
        if (*c == '_') *c = ' ';
      for (int k = 0; k < MAX_GPUS; k++) g->ancestor[k] = 50;
      n_gpus++;
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
  return OK;
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
  if (!initialized) return UNINIT;
  initialized--;  /* NVML counts nested inits */
  return OK;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case OK: return "Success";
    case UNINIT: return "Uninitialized";
    case LOST: return "GPU is lost";
    case TIMEOUT: return "Timeout";
    case NOT_SUPPORTED: return "Not Supported";
    default: return "Unknown Error";
  }
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
  if (!initialized) return UNINIT;
  *count = n_gpus;
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **out) {
  if (!initialized) return UNINIT;
  if (i >= n_gpus) return INVALID;
  *out = &gpus[i];
  return OK;
}

#ifndef FAKE_NVML_NO_UUID
EXPORT nvmlReturn_t nvmlDeviceGetUUID(void *h, char *buf, unsigned int len) {
  struct fake_gpu *g = gpu(h);
  if (!g) return INVALID;
  if (g->lost) return LOST;
  if (strlen(g->uuid) + 1 > len) return SMALL;
  strcpy(buf, g->uuid);
  return OK;
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(void *h, unsigned int *minor) {
  struct fake_gpu *g = gpu(h);
  if (!g) return INVALID;
  if (g->lost) return LOST;
  *minor = g->minor;
  return OK;
}

static void fill_pci(const struct fake_gpu *g, nvmlPciInfo_t *p) {
  memset(p, 0, sizeof(*p));
  snprintf(p->busId, sizeof(p->busId), "%s", g->bus_id);
  snprintf(p->busIdLegacy, sizeof(p->busIdLegacy), "%s", g->bus_id + 4);
  sscanf(g->bus_id, "%x:%x:%x", &p->domain, &p->bus, &p->device);
  p->pciDeviceId = 0x20b010de;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *h, nvmlPciInfo_t *p) {
  struct fake_gpu *g = gpu(h);
  if (!g) return INVALID;
  if (g->lost) return LOST;
  fill_pci(g, p);
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(void *h, char *buf, unsigned int len) {
  struct fake_gpu *g = gpu(h);
  if (!g) return INVALID;
  if (g->lost) return LOST;
  snprintf(buf, len, "%s", g->name);
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(void *h, unsigned int link, int *active) {
  struct fake_gpu *g = gpu(h);
  if (!g) return INVALID;
  if (link >= MAX_LINKS) return INVALID;
  /* Links are numbered in order of the peers they reach. */
  unsigned k = 0;
  for (unsigned j = 0; j < n_gpus; j++) k += (unsigned)g->links[j];
  *active = link < k;
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(void *h, unsigned int link,
                                                        nvmlPciInfo_t *p) {
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

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(void *a, void *b, int *level) {
  struct fake_gpu *ga = gpu(a), *gb = gpu(b);
  if (!ga || !gb) return INVALID;
  *level = ga == gb ? 0 : ga->ancestor[gb - gpus];
  return OK;
}

#ifndef FAKE_NVML_NO_EVENTS
typedef struct {
  void *device;
  unsigned long long eventType, eventData;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

struct fake_set {
  long offset;                 /* bytes of the events file already delivered */
  unsigned long long mask[MAX_GPUS];
};

EXPORT nvmlReturn_t nvmlEventSetCreate(struct fake_set **out) {
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

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(void *h, unsigned long long types,
                                             struct fake_set *s) {
  struct fake_gpu *g = gpu(h);
  if (!g || !s) return INVALID;
  s->mask[g - gpus] |= types;
  return OK;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(struct fake_set *s, nvmlEventData_t *data,
                                        unsigned int timeout_ms) {
  if (!s || !data) return INVALID;
  char path[4096], line[256];
  snprintf(path, sizeof(path), "%s/events", dir());
  for (unsigned waited = 0;; waited += 5) {
    FILE *f = fopen(path, "r");
    if (f) {
      fseek(f, s->offset, SEEK_SET);
      while (fgets(line, sizeof(line), f)) {
        if (line[strlen(line) - 1] != '\n') break;  /* partly written */
        s->offset = ftell(f);
        int i;
        unsigned long long code;
        if (sscanf(line, "xid %d %llu", &i, &code) != 2) continue;
        if (i >= 0 && (i >= (int)n_gpus || !(s->mask[i] & 0x8))) continue;
        memset(data, 0, sizeof(*data));
        data->device = i >= 0 ? &gpus[i] : NULL;
        data->eventType = 0x8;
        data->eventData = code;
        fclose(f);
        return OK;
      }
      fclose(f);
    }
    if (waited >= timeout_ms) return TIMEOUT;
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

EXPORT nvmlReturn_t nvmlEventSetFree(struct fake_set *s) {
  free(s);
  return OK;
}
#endif
