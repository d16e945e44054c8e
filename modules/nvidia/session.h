// One NVML session per process, shared by every nvidia instance that loads
// the same library: one nvmlInit, one discovery shared by all instances,
// and one event thread for every GPU, dispatching to the instances.
//
// Why: the driver's NVML serialises its calls behind one lock, held across
// nvmlEventSetWait. With an init and an event thread per instance, the
// second instance's discovery waited behind the first one's event waits
// (measured on an H100: 450 ms to register two resources against 55 ms for
// one), and every stop waited out a wait.
//
// The last instance's destroy() does not wait for the event thread either:
// the wait under way (up to kEventWaitMs, the driver's lock held meanwhile)
// would be most of devplugd's exit (measured on an H100: 31-45 ms of a
// 35-52 ms exit). The session ends on a thread of the module's own, which
// frees the event set and shuts NVML down once that wait returns; the module
// is then kept loaded for good, so that thread never runs unmapped code.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nvml.h"

namespace devplug::nvidia {

struct MigDevice {
  std::string uuid;     // "MIG-…"
  unsigned gi = 0;      // GPU instance ID
  unsigned ci = 0;      // compute instance ID
  std::string profile;  // "1g.10gb"; "" when NVML could not describe it
  uint64_t memory = 0;  // bytes; 0 when NVML could not say
};

struct GpuInfo {
  std::string uuid;
  std::string pci;  // "0000:3b:00.0"
  std::string model;
  uint64_t memory = 0;  // bytes; 0 when NVML could not say (or procfs found it)
  unsigned minor = 0;
  std::string problem;  // why it cannot be used; "" when fine
  bool lost = false;    // NVML_ERROR_GPU_IS_LOST
  bool mig_enabled = false;
  std::vector<MigDevice> migs;  // when mig_enabled
  std::string mig_problem;      // listing its MIG devices failed
};

// One discovery.
struct Inventory {
  std::map<std::string, GpuInfo> gpus;  // by UUID
  // Between the GPUs that are not MIG-enabled, by index in topo_ids: NVLink
  // counts and PCIe common-ancestor levels.
  std::vector<std::string> topo_ids;
  std::vector<std::vector<int>> links, levels;
};

class Session {
 public:
  // What an instance hears from the session. Calls come from the event
  // thread (OnXid, OnChange) or the calling instance's thread (Log during
  // Current()); they must not call back into the session.
  class Listener {
   public:
    virtual ~Listener() = default;
    // A critical XID on GPU `uuid` ("" when the event named no GPU: all of
    // them); gi/ci are nvml::kNoInstance unless it names one MIG instance.
    virtual void OnXid(const std::string& uuid, unsigned gi, unsigned ci, int64_t xid) = 0;
    // Something changed that a rescan would see (MIG reconfiguration, an
    // event wait that failed).
    virtual void OnChange() = 0;
    virtual void Log(int32_t level, const std::string& msg) = 0;
  };

  // The process's session for `library`, opened and initialised on first
  // use. nullptr with *why when the library cannot be loaded or nvmlInit
  // fails. Dropping the last reference returns at once (see above).
  static std::shared_ptr<Session> Acquire(const std::string& library, std::string* why);
  // Stops the event thread (after its wait under way) and shuts NVML down.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const nvml::Api& api() const { return lib_->api(); }

  void Subscribe(Listener* l);
  // After it returns, `l` is not called any more.
  void Unsubscribe(Listener* l);

  // A discovery no older than kMaxAge and taken after the last
  // Invalidate(); rediscovers (after re-initialising NVML when asked) when
  // there is none. Throws ModuleError when NVML cannot count the GPUs.
  // Warnings go to `caller`.
  std::shared_ptr<const Inventory> Current(Listener& caller);

  // The next Current() rediscovers; with reinit, after a fresh nvmlInit
  // (new handles and event registrations: a GPU was reset or re-bound).
  void Invalidate(bool reinit);

  // How long one nvmlEventSetWait may block: a discovery waits at most this
  // long for the event thread, and so does the end of a session (on its own
  // thread).
  static constexpr unsigned kEventWaitMs = 40;
  static constexpr std::chrono::milliseconds kMaxAge{1000};

 private:
  Session(std::string path, std::unique_ptr<nvml::Library> lib);
  // The deleter of Acquire's pointers: ends `s` on another thread when its
  // event thread runs (and the module could be kept loaded), else here.
  static void End(Session* s);
  bool Init(std::string* why);
  void Shutdown();
  std::shared_ptr<Inventory> Discover(Listener& caller);
  void BuildTopology(Inventory& inv, const std::map<std::string, nvml::Device>& handles);
  void ListMig(GpuInfo& g, nvml::Device dev, Listener& caller);
  void StartEvents(Listener& caller);
  void StopEvents();
  void WatchEvents(nvml::EventSet set, std::map<nvml::Device, std::string> handles);
  void Broadcast(int32_t level, const std::string& msg);

  const std::string path_;
  std::unique_ptr<nvml::Library> lib_;

  std::mutex api_mu_;  // discovery, (re)initialisation, the event thread's start and stop
  bool up_ = false;    // nvmlInit succeeded and not shut down
  std::map<std::string, nvml::Device> handles_;  // of the latest discovery, by UUID
  std::map<unsigned, std::string> by_index_;     // of the latest discovery: NVML index -> UUID
  bool warned_no_events_ = false;

  std::mutex state_mu_;  // what Invalidate() and the event thread touch
  bool reinit_ = false;
  bool dirty_ = false;
  std::shared_ptr<const Inventory> inventory_;
  std::chrono::steady_clock::time_point taken_;

  std::thread events_;
  std::atomic<bool> stop_events_{false};
  // The driver's NVML lock is not fair: the event thread, back in
  // nvmlEventSetWait as soon as one wait ends, could starve a discovery.
  // It waits at this gate while a discovery wants the library.
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  int api_wanted_ = 0;

  std::mutex listeners_mu_;
  std::vector<Listener*> listeners_;
};

}  // namespace devplug::nvidia
