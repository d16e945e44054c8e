// The part of NVIDIA's Management Library (NVML) the nvidia module uses,
// declared here from NVIDIA's public API reference (no NVIDIA header is
// needed to build), and loaded at run time with dlopen(): the driver's
// libnvidia-ml.so.1 is never a link dependency.
#pragma once

#include <memory>
#include <string>

namespace devplug::nvidia::nvml {

using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorUnknown = 999;

struct DeviceSt;
using Device = DeviceSt*;  // nvmlDevice_t
struct EventSetSt;
using EventSet = EventSetSt*;  // nvmlEventSet_t

// nvmlPciInfo_t
struct PciInfo {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;  // device ID << 16 | vendor ID
  unsigned int pciSubSystemId;
  char busId[32];  // "00000000:3B:00.0"
};

// nvmlEventData_t
struct EventData {
  Device device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID for kEventXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// nvmlEventType bits
inline constexpr unsigned long long kEventSingleBitEccError = 0x1;
inline constexpr unsigned long long kEventDoubleBitEccError = 0x2;
inline constexpr unsigned long long kEventXidCriticalError = 0x8;
inline constexpr unsigned long long kEventMigConfigChange = 0x100;

// nvmlEventData_t.gpuInstanceId / computeInstanceId when the event is not
// attributable to one MIG instance.
inline constexpr unsigned kNoInstance = 0xFFFFFFFFu;
// nvmlDeviceGetMigMode's current mode: NVML_DEVICE_MIG_ENABLE.
inline constexpr unsigned kMigEnable = 1;

// nvmlMemory_t (nvmlDeviceGetMemoryInfo), bytes.
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlDeviceAttributes_t (nvmlDeviceGetAttributes_v2).
struct DeviceAttributes {
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  unsigned int gpuInstanceSliceCount;
  unsigned int computeInstanceSliceCount;
  unsigned long long memorySizeMB;  // MiB
};

// nvmlGpuTopologyLevel_t
inline constexpr int kTopologyInternal = 0;
inline constexpr int kTopologySingle = 10;      // one PCIe switch
inline constexpr int kTopologyMultiple = 20;    // several PCIe switches
inline constexpr int kTopologyHostBridge = 30;  // the same host bridge
inline constexpr int kTopologyNode = 40;        // the same NUMA node
inline constexpr int kTopologySystem = 50;      // across NUMA nodes

inline constexpr unsigned kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned kNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned kNvLinkMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS

// The entry points, resolved by name. Required ones are non-null after a
// successful Open(); optional ones may be null.
struct Api {
  // required
  Return (*Init)();                                         // nvmlInit_v2
  Return (*Shutdown)();                                     // nvmlShutdown
  Return (*DeviceGetCount)(unsigned int*);                  // nvmlDeviceGetCount_v2
  Return (*DeviceGetHandleByIndex)(unsigned int, Device*);  // nvmlDeviceGetHandleByIndex_v2
  Return (*DeviceGetUUID)(Device, char*, unsigned int);     // nvmlDeviceGetUUID
  Return (*DeviceGetMinorNumber)(Device, unsigned int*);    // nvmlDeviceGetMinorNumber
  Return (*DeviceGetPciInfo)(Device, PciInfo*);             // nvmlDeviceGetPciInfo_v3
  // optional
  const char* (*ErrorString)(Return);                                    // nvmlErrorString
  Return (*DeviceGetName)(Device, char*, unsigned int);                  // nvmlDeviceGetName
  Return (*EventSetCreate)(EventSet*);                                   // nvmlEventSetCreate
  Return (*DeviceRegisterEvents)(Device, unsigned long long, EventSet);  // nvmlDeviceRegisterEvents
  Return (*EventSetWait)(EventSet, EventData*, unsigned int);            // nvmlEventSetWait_v2
  Return (*EventSetFree)(EventSet);                                      // nvmlEventSetFree
  Return (*DeviceGetNvLinkState)(Device, unsigned int, int*);            // nvmlDeviceGetNvLinkState
  Return (*DeviceGetNvLinkRemotePciInfo)(Device, unsigned int, PciInfo*);  // ..._v2
  Return (*DeviceGetTopologyCommonAncestor)(Device, Device, int*);
  // MIG (drivers from R450 on)
  Return (*DeviceGetMemoryInfo)(Device, Memory*);                    // nvmlDeviceGetMemoryInfo
  Return (*DeviceGetMigMode)(Device, unsigned int*, unsigned int*);  // current, pending
  Return (*DeviceGetMaxMigDeviceCount)(Device, unsigned int*);
  Return (*DeviceGetMigDeviceHandleByIndex)(Device, unsigned int, Device*);
  Return (*DeviceGetGpuInstanceId)(Device, unsigned int*);
  Return (*DeviceGetComputeInstanceId)(Device, unsigned int*);
  Return (*DeviceGetAttributes)(Device, DeviceAttributes*);  // nvmlDeviceGetAttributes_v2

  bool has_events() const {
    return EventSetCreate && DeviceRegisterEvents && EventSetWait && EventSetFree;
  }
  bool has_nvlink() const { return DeviceGetNvLinkState && DeviceGetNvLinkRemotePciInfo; }
  bool has_mig() const {
    return DeviceGetMemoryInfo && DeviceGetMigMode && DeviceGetMaxMigDeviceCount &&
           DeviceGetMigDeviceHandleByIndex && DeviceGetGpuInstanceId &&
           DeviceGetComputeInstanceId && DeviceGetAttributes;
  }
};

// A loaded libnvidia-ml. Never unloaded: a session ends on a thread of its
// own (session.h), and its dlclose() would race the next session's dlopen()
// of the same library; the driver's library is loaded once per process.
// Callers call Shutdown() themselves for every successful Init().
class Library {
 public:
  // dlopen(path) and resolve the table. nullptr with *why set when the
  // library is missing or lacks a required entry point.
  static std::unique_ptr<Library> Open(const std::string& path, std::string* why);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const Api& api() const { return api_; }
  // "NVML error 15 (GPU is lost)"
  std::string Error(Return rc) const;

 private:
  Library() = default;
  void* handle_ = nullptr;
  Api api_{};
};

// "0000:3b:00.0" from NVML's "00000000:3B:00.0"; "" if unparsable.
std::string NormalizeBusId(const char* bus_id);

}  // namespace devplug::nvidia::nvml
