#include "nvml.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdio>
#include <cstring>

namespace devplug::nvidia::nvml {

std::unique_ptr<Library> Library::Open(const std::string& path, std::string* why) {
  dlerror();
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    *why = "cannot load " + path + ": " + (e ? e : "unknown error");
    return nullptr;
  }
  std::unique_ptr<Library> lib(new Library());
  lib->handle_ = h;
  Api& a = lib->api_;
  std::string missing;
  auto bind = [&](auto& fn, const char* name, bool required) {
    void* sym = dlsym(h, name);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
    if (sym == nullptr && required) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  bind(a.Init, "nvmlInit_v2", true);
  bind(a.Shutdown, "nvmlShutdown", true);
  bind(a.DeviceGetCount, "nvmlDeviceGetCount_v2", true);
  bind(a.DeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2", true);
  bind(a.DeviceGetUUID, "nvmlDeviceGetUUID", true);
  bind(a.DeviceGetMinorNumber, "nvmlDeviceGetMinorNumber", true);
  bind(a.DeviceGetPciInfo, "nvmlDeviceGetPciInfo_v3", true);
  bind(a.ErrorString, "nvmlErrorString", false);
  bind(a.DeviceGetName, "nvmlDeviceGetName", false);
  bind(a.EventSetCreate, "nvmlEventSetCreate", false);
  bind(a.DeviceRegisterEvents, "nvmlDeviceRegisterEvents", false);
  bind(a.EventSetWait, "nvmlEventSetWait_v2", false);
  bind(a.EventSetFree, "nvmlEventSetFree", false);
  bind(a.DeviceGetNvLinkState, "nvmlDeviceGetNvLinkState", false);
  bind(a.DeviceGetNvLinkRemotePciInfo, "nvmlDeviceGetNvLinkRemotePciInfo_v2", false);
  bind(a.DeviceGetTopologyCommonAncestor, "nvmlDeviceGetTopologyCommonAncestor", false);
  bind(a.DeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo", false);
  bind(a.DeviceGetMigMode, "nvmlDeviceGetMigMode", false);
  bind(a.DeviceGetMaxMigDeviceCount, "nvmlDeviceGetMaxMigDeviceCount", false);
  bind(a.DeviceGetMigDeviceHandleByIndex, "nvmlDeviceGetMigDeviceHandleByIndex", false);
  bind(a.DeviceGetGpuInstanceId, "nvmlDeviceGetGpuInstanceId", false);
  bind(a.DeviceGetComputeInstanceId, "nvmlDeviceGetComputeInstanceId", false);
  bind(a.DeviceGetAttributes, "nvmlDeviceGetAttributes_v2", false);
  if (!missing.empty()) {
    *why = path + " lacks " + missing + " (driver too old?)";
    return nullptr;
  }
  return lib;
}

// The handle is left open on purpose (nvml.h).
Library::~Library() = default;

std::string Library::Error(Return rc) const {
  std::string s = "NVML error " + std::to_string(rc);
  if (api_.ErrorString) {
    if (const char* e = api_.ErrorString(rc)) s += std::string(" (") + e + ")";
  }
  return s;
}

std::string NormalizeBusId(const char* bus_id) {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  char tail = 0;
  if (bus_id == nullptr ||
      std::sscanf(bus_id, "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &tail) != 4 || bus > 0xff ||
      dev > 0x1f || fn > 7)
    return {};
  char out[24];
  std::snprintf(out, sizeof(out), "%04x:%02x:%02x.%x", domain, bus, dev, fn);
  return out;
}

}  // namespace devplug::nvidia::nvml
