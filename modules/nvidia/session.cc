#include "session.h"

#include <dlfcn.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "devplug/common/cxx_module.h"
#include "devplug/common/fs.h"
#include "mig.h"

namespace devplug::nvidia {

using Clock = std::chrono::steady_clock;
using devplug::common::ModuleError;

namespace {

// Keeps this module loaded for the rest of the process (a dlclose() no
// longer unmaps it), so that a thread of its own may outlive its last
// instance. False when the loader does not know the module by its file name.
bool KeepModuleLoaded() {
  static const bool kept = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&KeepModuleLoaded), &info) == 0 || info.dli_fname == nullptr)
      return false;
    // By name, among the objects already loaded: the file itself may be gone
    // (the agent loads a replaced module through a link it then removes).
    return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) != nullptr;
  }();
  return kept;
}

// The threads that end sessions, detached: one that finished is gone at
// once (a fork, or a leak check, never finds it unjoined). At a normal exit
// the ones still running are waited for (each within one event wait);
// devplugd's own exit does not run this and leaves them to the process's
// end. Never freed, so that a thread still ending after that wait finds it.
class Enders;
// Made by the first session that ends on its own thread, once the module is
// kept loaded: never unmapped, so still reachable at exit.
std::atomic<Enders*> g_enders{nullptr};

class Enders {
 public:
  static Enders& Get() {
    static Enders* enders = [] {
      auto* e = new Enders;
      g_enders.store(e);
      return e;
    }();
    return *enders;
  }
  void Run(std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      ++running_;
    }
    std::thread([this, fn = std::move(fn)] {
      fn();
      std::lock_guard lock(mu_);
      --running_;
      cv_.notify_all();
    }).detach();
  }
  void Wait(std::chrono::milliseconds at_most) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, at_most, [&] { return running_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0;
};

// At a normal exit (tests, sanitizer builds), after main returns; nothing
// to wait for (and nothing made) where no session ended on its own thread,
// as when the module is unloaded.
struct WaitForEnders {
  ~WaitForEnders() {
    if (Enders* e = g_enders.load()) e->Wait(std::chrono::seconds(5));
  }
} wait_for_enders;

}  // namespace

std::shared_ptr<Session> Session::Acquire(const std::string& library, std::string* why) {
  // Instances (and so sessions) are destroyed before the module is
  // unloaded, when these go.
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<Session>> registry;
  auto* sessions = &registry;
  std::lock_guard lock(mu);
  for (auto it = sessions->begin(); it != sessions->end();)
    it = it->second.expired() ? sessions->erase(it) : std::next(it);
  if (auto it = sessions->find(library); it != sessions->end())
    if (auto s = it->second.lock()) return s;
  auto lib = nvml::Library::Open(library, why);
  if (!lib) return nullptr;
  std::shared_ptr<Session> s(new Session(library, std::move(lib)), &Session::End);
  if (!s->Init(why)) return nullptr;
  (*sessions)[library] = s;
  return s;
}

Session::Session(std::string path, std::unique_ptr<nvml::Library> lib)
    : path_(std::move(path)), lib_(std::move(lib)) {}

Session::~Session() {
  std::lock_guard lock(api_mu_);
  StopEvents();
  Shutdown();
}

void Session::End(Session* s) {
  bool watching = false;
  {
    std::lock_guard lock(s->api_mu_);
    watching = s->events_.joinable();
  }
  if (watching && KeepModuleLoaded()) {
    {
      std::lock_guard lock(s->gate_mu_);
      s->stop_events_ = true;  // the thread leaves after the wait under way
    }
    s->gate_cv_.notify_all();
    Enders::Get().Run([s] { delete s; });
    return;
  }
  delete s;
}

bool Session::Init(std::string* why) {
  const nvml::Return rc = lib_->api().Init();
  if (rc != nvml::kSuccess) {
    *why = "nvmlInit_v2: " + lib_->Error(rc);
    return false;
  }
  up_ = true;
  return true;
}

void Session::Shutdown() {
  if (up_) lib_->api().Shutdown();
  up_ = false;
  handles_.clear();
}

void Session::Subscribe(Listener* l) {
  std::lock_guard lock(listeners_mu_);
  listeners_.push_back(l);
}

void Session::Unsubscribe(Listener* l) {
  std::lock_guard lock(listeners_mu_);
  std::erase(listeners_, l);
}

void Session::Broadcast(int32_t level, const std::string& msg) {
  // One line, through whichever instance is first: it is one process's NVML.
  std::lock_guard lock(listeners_mu_);
  if (!listeners_.empty()) listeners_.front()->Log(level, "NVML: " + msg);
}

void Session::Invalidate(bool reinit) {
  // Instances that hear the same uevent before the rediscovery it causes
  // fold into one; later ones cost one more (rare: GPU resets, re-binds).
  std::lock_guard lock(state_mu_);
  dirty_ = true;
  if (reinit) reinit_ = true;
}

std::shared_ptr<const Inventory> Session::Current(Listener& caller) {
  // Let the event thread know before queuing for the library.
  struct Want {
    Session* s;
    explicit Want(Session* session) : s(session) {
      std::lock_guard lock(s->gate_mu_);
      s->api_wanted_++;
    }
    ~Want() {
      {
        std::lock_guard lock(s->gate_mu_);
        s->api_wanted_--;
      }
      s->gate_cv_.notify_all();
    }
  } want(this);
  std::lock_guard api_lock(api_mu_);
  bool reinit = false;
  const auto started = Clock::now();
  {
    std::lock_guard lock(state_mu_);
    if (inventory_ && !dirty_ && !reinit_ && started - taken_ < kMaxAge) return inventory_;
    reinit = reinit_ || !up_;
    reinit_ = false;
    dirty_ = false;
  }
  try {
    if (reinit) {
      // Fresh handles and event registrations.
      StopEvents();
      Shutdown();
      std::string why;
      if (!Init(&why)) throw ModuleError(EIO, "NVML re-initialisation failed: " + why);
    }
    std::shared_ptr<Inventory> inv = Discover(caller);
    {
      std::lock_guard lock(state_mu_);
      inventory_ = inv;
      taken_ = started;
    }
    if (!events_.joinable()) StartEvents(caller);
    return inv;
  } catch (...) {
    std::lock_guard lock(state_mu_);
    dirty_ = true;
    if (!up_) reinit_ = true;
    throw;
  }
}

std::shared_ptr<Inventory> Session::Discover(Listener& caller) {
  const nvml::Api& api = lib_->api();
  auto inv = std::make_shared<Inventory>();
  const bool mig_api = api.has_mig();
  unsigned count = 0;
  nvml::Return rc = api.DeviceGetCount(&count);
  if (rc != nvml::kSuccess) throw ModuleError(EIO, "nvmlDeviceGetCount_v2: " + lib_->Error(rc));
  std::map<std::string, nvml::Device> handles;
  std::map<unsigned, std::string> index;  // NVML index -> UUID
  for (unsigned i = 0; i < count; i++) {
    nvml::Device dev = nullptr;
    if ((rc = api.DeviceGetHandleByIndex(i, &dev)) != nvml::kSuccess) {
      caller.Log(DEVPLUG_LOG_WARN, "GPU index " + std::to_string(i) + ": " + lib_->Error(rc));
      continue;
    }
    char uuid[nvml::kUuidBufferSize] = {};
    if ((rc = api.DeviceGetUUID(dev, uuid, sizeof(uuid))) != nvml::kSuccess) {
      caller.Log(DEVPLUG_LOG_WARN,
                 "GPU index " + std::to_string(i) + ": no UUID: " + lib_->Error(rc));
      // A GPU that fell off the bus answers nothing, not even its UUID:
      // the one seen at this index before is reported lost, not gone.
      if (rc == nvml::kErrorGpuIsLost && inventory_) {
        auto prev = by_index_.find(i);
        auto known =
            prev == by_index_.end() ? inventory_->gpus.end() : inventory_->gpus.find(prev->second);
        if (known != inventory_->gpus.end()) {
          GpuInfo g = known->second;
          g.lost = true;
          g.problem = "has fallen off the bus (" + lib_->Error(rc) + ")";
          g.mig_enabled = false;
          g.migs.clear();
          index[i] = g.uuid;
          inv->gpus[g.uuid] = std::move(g);
        }
      }
      continue;
    }
    GpuInfo g;
    g.uuid = uuid;
    nvml::PciInfo pci{};
    if (api.DeviceGetPciInfo(dev, &pci) == nvml::kSuccess) g.pci = nvml::NormalizeBusId(pci.busId);
    unsigned minor = 0;
    if ((rc = api.DeviceGetMinorNumber(dev, &minor)) == nvml::kSuccess)
      g.minor = minor;
    else
      g.problem = "NVML cannot tell its device minor: " + lib_->Error(rc);
    if (rc == nvml::kErrorGpuIsLost) {
      g.problem = "has fallen off the bus (" + lib_->Error(rc) + ")";
      g.lost = true;
    }
    char name[nvml::kNameBufferSize] = {};
    if (api.DeviceGetName && api.DeviceGetName(dev, name, sizeof(name)) == nvml::kSuccess)
      g.model = name;
    if (nvml::Memory mem{};
        !g.lost && api.DeviceGetMemoryInfo && api.DeviceGetMemoryInfo(dev, &mem) == nvml::kSuccess)
      g.memory = mem.total;
    if (mig_api && !g.lost) {
      unsigned current = 0, pending = 0;
      // NOT_SUPPORTED: a GPU without MIG.
      if (api.DeviceGetMigMode(dev, &current, &pending) == nvml::kSuccess &&
          current == nvml::kMigEnable) {
        g.mig_enabled = true;
        ListMig(g, dev, caller);
      }
    }
    handles[g.uuid] = dev;
    index[i] = g.uuid;
    inv->gpus[g.uuid] = std::move(g);
  }
  BuildTopology(*inv, handles);
  handles_ = std::move(handles);
  by_index_ = std::move(index);
  return inv;
}

void Session::ListMig(GpuInfo& g, nvml::Device dev, Listener& caller) {
  const nvml::Api& api = lib_->api();
  auto fail = [&](const std::string& what, nvml::Return rc) {
    const std::string msg = what + ": " + lib_->Error(rc);
    if (g.mig_problem.empty()) g.mig_problem = msg;
    caller.Log(DEVPLUG_LOG_WARN, g.uuid + ": " + msg);
  };
  nvml::Memory mem{};
  nvml::Return rc = api.DeviceGetMemoryInfo(dev, &mem);
  if (rc != nvml::kSuccess) {
    fail("nvmlDeviceGetMemoryInfo", rc);
    mem.total = 0;
  }
  unsigned max = 0;
  if ((rc = api.DeviceGetMaxMigDeviceCount(dev, &max)) != nvml::kSuccess)
    return fail("nvmlDeviceGetMaxMigDeviceCount", rc);
  for (unsigned i = 0; i < max; i++) {
    nvml::Device mig = nullptr;
    rc = api.DeviceGetMigDeviceHandleByIndex(dev, i, &mig);
    if (rc == nvml::kErrorNotFound) continue;  // no MIG device at this index
    if (rc != nvml::kSuccess) {
      fail("nvmlDeviceGetMigDeviceHandleByIndex(" + std::to_string(i) + ")", rc);
      continue;
    }
    MigDevice m;
    char uuid[nvml::kUuidBufferSize] = {};
    if ((rc = api.DeviceGetUUID(mig, uuid, sizeof(uuid))) != nvml::kSuccess) {
      fail("MIG device " + std::to_string(i) + ": no UUID", rc);
      continue;
    }
    m.uuid = uuid;
    if ((rc = api.DeviceGetGpuInstanceId(mig, &m.gi)) != nvml::kSuccess ||
        (rc = api.DeviceGetComputeInstanceId(mig, &m.ci)) != nvml::kSuccess) {
      fail(m.uuid + ": instance IDs", rc);
      continue;
    }
    nvml::DeviceAttributes attrs{};
    if ((rc = api.DeviceGetAttributes(mig, &attrs)) == nvml::kSuccess) {
      m.profile = MigProfileName(attrs.gpuInstanceSliceCount, attrs.computeInstanceSliceCount,
                                 attrs.memorySizeMB, mem.total);
      m.memory = attrs.memorySizeMB << 20;
    } else
      fail(m.uuid + ": nvmlDeviceGetAttributes_v2", rc);
    g.migs.push_back(std::move(m));
  }
}

void Session::BuildTopology(Inventory& inv, const std::map<std::string, nvml::Device>& handles) {
  const nvml::Api& api = lib_->api();
  std::vector<std::pair<const GpuInfo*, nvml::Device>> order;
  for (const auto& [uuid, g] : inv.gpus) {
    auto h = handles.find(uuid);
    if (g.problem.empty() && !g.mig_enabled && h != handles.end())
      order.emplace_back(&g, h->second);
  }
  const size_t n = order.size();
  if (n == 0) return;
  inv.links.assign(n, std::vector<int>(n, 0));
  inv.levels.assign(n, std::vector<int>(n, nvml::kTopologySystem));
  for (const auto& [g, h] : order) inv.topo_ids.push_back(g->uuid);
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < n; j++) {
      int level = nvml::kTopologySystem;
      if (i != j && api.DeviceGetTopologyCommonAncestor &&
          api.DeviceGetTopologyCommonAncestor(order[i].second, order[j].second, &level) ==
              nvml::kSuccess)
        inv.levels[i][j] = level;
    }
    if (!api.has_nvlink()) continue;
    for (unsigned link = 0; link < nvml::kNvLinkMaxLinks; link++) {
      int active = 0;
      if (api.DeviceGetNvLinkState(order[i].second, link, &active) != nvml::kSuccess || !active)
        continue;
      nvml::PciInfo remote{};
      if (api.DeviceGetNvLinkRemotePciInfo(order[i].second, link, &remote) != nvml::kSuccess)
        continue;
      const std::string peer = nvml::NormalizeBusId(remote.busId);
      for (size_t j = 0; j < n; j++)
        if (j != i && order[j].first->pci == peer) inv.links[i][j]++;
    }
  }
}

void Session::StartEvents(Listener& caller) {
  const nvml::Api& api = lib_->api();
  if (handles_.empty()) return;  // a new GPU comes with a uevent, and a re-initialisation
  if (!api.has_events()) {
    if (!warned_no_events_)
      caller.Log(DEVPLUG_LOG_WARN, path_ + " has no event API: XIDs cannot be watched");
    warned_no_events_ = true;
    return;
  }
  nvml::EventSet set = nullptr;
  nvml::Return rc = api.EventSetCreate(&set);
  if (rc != nvml::kSuccess) {
    caller.Log(DEVPLUG_LOG_WARN,
               "nvmlEventSetCreate: " + lib_->Error(rc) + "; XIDs are not watched");
    return;
  }
  std::map<nvml::Device, std::string> by_handle;
  for (const auto& [uuid, dev] : handles_) {
    by_handle[dev] = uuid;
    rc = api.DeviceRegisterEvents(dev, nvml::kEventXidCriticalError, set);
    if (rc != nvml::kSuccess)
      caller.Log(DEVPLUG_LOG_WARN, uuid + ": XID events not available: " + lib_->Error(rc));
    // GPUs without MIG refuse this one; that is fine.
    (void)api.DeviceRegisterEvents(dev, nvml::kEventMigConfigChange, set);
  }
  stop_events_ = false;
  events_ = std::thread([this, set, by_handle] { WatchEvents(set, by_handle); });
}

void Session::StopEvents() {
  if (!events_.joinable()) return;
  {
    std::lock_guard lock(gate_mu_);
    stop_events_ = true;
  }
  gate_cv_.notify_all();
  events_.join();
  stop_events_ = false;
}

void Session::WatchEvents(nvml::EventSet set, std::map<nvml::Device, std::string> handles) {
  const nvml::Api& api = lib_->api();
  while (!stop_events_) {
    {
      std::unique_lock lock(gate_mu_);
      gate_cv_.wait(lock, [&] { return api_wanted_ == 0 || stop_events_; });
    }
    if (stop_events_) break;
    nvml::EventData ev{};
    const nvml::Return rc = api.EventSetWait(set, &ev, kEventWaitMs);
    if (rc == nvml::kErrorTimeout) continue;
    if (rc != nvml::kSuccess) {
      // GPU_IS_LOST and friends: a rediscovery finds out which.
      Broadcast(DEVPLUG_LOG_WARN, "nvmlEventSetWait_v2: " + lib_->Error(rc));
      {
        std::lock_guard lock(state_mu_);
        dirty_ = true;
      }
      {
        std::lock_guard lock(listeners_mu_);
        for (Listener* l : listeners_) l->OnChange();
      }
      for (int i = 0; i < 20 && !stop_events_; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(kEventWaitMs));
      continue;
    }
    std::string uuid;
    if (ev.device != nullptr) {
      auto it = handles.find(ev.device);
      if (it == handles.end()) continue;
      uuid = it->second;
    }
    if (ev.eventType & nvml::kEventMigConfigChange) {
      {
        std::lock_guard lock(state_mu_);
        dirty_ = true;
      }
      std::lock_guard lock(listeners_mu_);
      for (Listener* l : listeners_) l->OnChange();
    }
    if (ev.eventType & nvml::kEventXidCriticalError) {
      std::lock_guard lock(listeners_mu_);
      for (Listener* l : listeners_)
        l->OnXid(uuid, ev.gpuInstanceId, ev.computeInstanceId, static_cast<int64_t>(ev.eventData));
    }
  }
  api.EventSetFree(set);
}

}  // namespace devplug::nvidia
