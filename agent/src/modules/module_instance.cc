#include "modules/module_instance.h"

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>

#include <spdlog/spdlog.h>

#include "modules/abi_sinks.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define DEVPLUG_LEAK_ON_PURPOSE(p) __lsan_ignore_object(p)
#else
#define DEVPLUG_LEAK_ON_PURPOSE(p) ((void)(p))
#endif

namespace devplug::modules {

thread_local ModuleInstance::CallContext* ModuleInstance::current_call_ = nullptr;
thread_local ModuleInstance::CallContext ModuleInstance::lane_call_;

ModuleInstance::CallContext& ModuleInstance::Call() {
  if (current_call_ != nullptr && current_call_->owner == this) return *current_call_;
  return worker_call_;
}

ModuleInstance::ModuleInstance(std::shared_ptr<const LoadedModule> module,
                               config::ResourceConfig resource, Options options)
    : module_(std::move(module)),
      resource_(std::move(resource)),
      options_(std::move(options)),
      devices_(std::make_shared<const DeviceList>()) {
  worker_call_.owner = this;
  host_.struct_size = sizeof(host_);
  host_.abi_minor = DEVPLUG_MODULE_ABI_MINOR;
  host_.agent_data = this;
  host_.resource_name = resource_.name.c_str();
  host_.host_root = options_.host_root.c_str();
  host_.log = &HostLog;
  host_.devices_changed = &HostDevicesChanged;
  host_.set_error = &HostSetError;
  host_.config_error = &HostConfigError;
  host_.config_string = &HostString;
  host_.config_int = &HostInt;
  host_.config_bool = &HostBool;
  host_.config_string_array = &HostStringArray;
  host_.config_int_array = &HostIntArray;
  host_.pod_of = &HostPodOf;
  host_.track_releases = &HostTrackReleases;
  host_.use_pre_start = &HostUsePreStart;
  host_.config_value = &HostConfigValue;
  host_.config_member = &HostConfigMember;
  host_.watch_path = &HostWatchPath;
  host_.prestart_timeout_ms = options_.prestart_timeout.count();
  host_.resource_index = static_cast<int32_t>(options_.index);
  for (const auto& [key, value] : resource_.module_keys) {
    if (const auto* v = std::get_if<std::vector<std::string>>(&value.value)) {
      auto& arr = string_arrays_[key];
      for (const std::string& s : *v) arr.push_back(s.c_str());
    }
  }
}

std::unique_ptr<ModuleInstance> ModuleInstance::Launch(std::shared_ptr<const LoadedModule> module,
                                                       const config::ResourceConfig& resource,
                                                       Options options,
                                                       std::function<void(Status)> created) {
  std::unique_ptr<ModuleInstance> self(
      new ModuleInstance(std::move(module), resource, std::move(options)));
  self->worker_ = std::thread([p = self.get()] { p->WorkerLoop(); });
  if (self->slow_lane()) {
    // "dp+<module>": the lanes beside the worker "dp:<module>".
    self->lanes_ = std::make_unique<DeviceLanes>(std::string("dp+").append(self->module_->name()),
                                                 self->slow_lanes(), [p = self.get()] {
                                                   lane_call_ = CallContext();
                                                   lane_call_.owner = p;
                                                   current_call_ = &lane_call_;
                                                 });
  }
  self->Post([p = self.get(), created = std::move(created)] { created(p->CreateOnWorker()); });
  return self;
}

Status ModuleInstance::CreateOnWorker() {
  const std::string who = StrCat("resource \"", resource_.name, "\" (", resource_.where.file, ":",
                                 resource_.where.line, "): module \"", module_->name(), "\"");
  Call().error.clear();
  devplug_instance* inst = nullptr;
  const int rc = module_->descriptor().create(&host_, &inst);
  // Configuration problems are the operator's to fix: say so by code. A
  // module that reported one and still returned an instance is refused too
  // (that instance may run on a wrong value).
  if (!config_errors_.empty()) {
    if (rc >= 0 && inst != nullptr)
      DestroyModuleInstance(inst);
    else if (options_.watches)
      options_.watches->EndAll();
    return InvalidArgumentError(StrJoin(config_errors_, "\n"));
  }
  if (rc < 0 || inst == nullptr) {
    if (options_.watches) options_.watches->EndAll();  // watches it added
    std::string why =
        StrCat(who, " create failed: ",
               Call().error.empty() ? std::strerror(rc < 0 ? -rc : EINVAL) : Call().error);
    if (rc >= 0) why += " (no instance returned)";
    return FailedPreconditionError(why);
  }
  inst_ = inst;
  // The kubelet's first message must hold a complete scan: a resource whose
  // first scan fails does not start (the agent retries it later).
  if (Status scan = ScanOnWorker(ScanCause::kStart); !scan.ok()) {
    DestroyModuleInstance(inst_);
    inst_ = nullptr;
    return FailedPreconditionError(StrCat(who, " first scan failed: ", scan.message()));
  }
  return OkStatus();
}

void ModuleInstance::DestroyModuleInstance(devplug_instance* inst) {
  module_->descriptor().destroy(inst);
  if (options_.watches) options_.watches->EndAll();
}

StatusOr<std::unique_ptr<ModuleInstance>> ModuleInstance::Create(
    std::shared_ptr<const LoadedModule> module, const config::ResourceConfig& resource,
    Options options) {
  auto created = std::make_shared<std::promise<Status>>();
  std::future<Status> result = created->get_future();
  const auto timeout = options.start_timeout;
  auto self = Launch(std::move(module), resource, std::move(options),
                     [created](Status st) { created->set_value(std::move(st)); });
  if (result.wait_for(timeout) != std::future_status::ready) {
    // The worker is stuck inside the module and may come back at any time:
    // this object must outlive it, so it is leaked on purpose.
    const std::string why = self->GiveUpMessage();
    self->RequestStop();
    if (!self->WaitStopped(std::chrono::steady_clock::now())) (void)self.release();
    return UnavailableError(why);
  }
  Status st = result.get();
  if (!st.ok()) return st;  // the destructor stops the worker
  return self;
}

std::string ModuleInstance::GiveUpMessage() const {
  return StrCat("resource \"", resource_.name, "\": module \"", module_->name(),
                "\" did not finish create() and its first scan within ",
                options_.start_timeout.count(), " ms; giving it up");
}

void ModuleInstance::RequestStop() {
  if (!worker_.joinable()) return;
  std::lock_guard lock(mu_);
  if (stopping_) return;
  queue_.push_back([this] {
    // destroy() runs alone: after the calls queued on the slow lane.
    StopSlowLane();
    if (inst_ != nullptr) DestroyModuleInstance(inst_);
    inst_ = nullptr;
  });
  stopping_ = true;
  cv_.notify_one();
}

bool ModuleInstance::WaitStopped(std::chrono::steady_clock::time_point deadline) {
  if (!worker_.joinable()) return true;
  std::unique_lock lock(mu_);
  if (!exited_cv_.wait_until(lock, deadline, [&] { return worker_exited_; })) {
    abandoned_ = true;
    // The owner leaks this object (the thread may still use it).
    DEVPLUG_LEAK_ON_PURPOSE(this);
    lock.unlock();
    worker_.detach();
    return false;
  }
  lock.unlock();
  worker_.join();
  return true;
}

bool ModuleInstance::Stop(std::chrono::milliseconds timeout) {
  RequestStop();
  return WaitStopped(std::chrono::steady_clock::now() + timeout);
}

ModuleInstance::~ModuleInstance() {
  // No deadline: the owner chose not to give this instance up.
  if (worker_.joinable()) (void)Stop(std::chrono::hours(24 * 365));
}

void ModuleInstance::Post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

std::shared_ptr<const LaneWait> ModuleInstance::PostSlow(std::vector<std::string> devices,
                                                         std::function<void()> task) {
  if (!lanes_) {
    Post(std::move(task));
    return nullptr;
  }
  return lanes_->Post(std::move(devices), std::move(task));
}

void ModuleInstance::StopSlowLane() {
  if (lanes_) lanes_->Stop();
}

void ModuleInstance::WorkerLoop() {
  // "dp:<module>" in top -H, ps -L and gdb (15 characters at most).
  const std::string name = std::string("dp:").append(module_->name()).substr(0, 15);
  pthread_setname_np(pthread_self(), name.c_str());
  current_call_ = &worker_call_;
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      auto ready = [&] { return stopping_ || !queue_.empty(); };
      if (deferred_scan_at_) {
        // deferred_scan_at_ is worker-only state, read here on the worker.
        cv_.wait_until(lock, *deferred_scan_at_, ready);
      } else {
        cv_.wait(lock, ready);
      }
      if (queue_.empty()) {
        if (stopping_) {  // stopping and drained
          worker_exited_ = true;
          exited_cv_.notify_all();
          return;
        }
        // The rate-limit window of a deferred event scan is over.
        lock.unlock();
        if (deferred_scan_at_ && std::chrono::steady_clock::now() >= *deferred_scan_at_) {
          deferred_scan_at_.reset();
          last_event_scan_ = std::chrono::steady_clock::now();
          (void)ScanOnWorker(deferred_cause_);
        }
        continue;
      }
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void ModuleInstance::OnUdevEvents(std::vector<udev::Event> events) {
  if (events.empty()) return;
  {
    std::lock_guard lock(events_mu_);
    if (pending_events_.empty())
      pending_events_ = std::move(events);
    else
      pending_events_.insert(pending_events_.end(), std::make_move_iterator(events.begin()),
                             std::make_move_iterator(events.end()));
    if (events_queued_) return;
    events_queued_ = true;
  }
  Post([this] { ProcessEventsOnWorker(); });
}

void ModuleInstance::ProcessEventsOnWorker() {
  std::vector<udev::Event> events;
  {
    std::lock_guard lock(events_mu_);
    events.swap(pending_events_);
    events_queued_ = false;
  }
  if (inst_ == nullptr) return;
  bool scan = !module_->has_on_udev_event();
  if (!scan) {
    for (const udev::Event& e : events) {
      devplug_udev_event ev{};
      ev.struct_size = sizeof(ev);
      ev.action = e.action.c_str();
      ev.subsystem = e.subsystem.c_str();
      ev.devtype = e.devtype.empty() ? nullptr : e.devtype.c_str();
      ev.syspath = e.syspath.c_str();
      ev.sysname = e.sysname.c_str();
      ev.devnode = e.devnode.empty() ? nullptr : e.devnode.c_str();
      Call().error.clear();
      const int rc = module_->descriptor().on_udev_event(inst_, &ev);
      if (rc < 0)
        spdlog::debug("{}: on_udev_event({} {}): {}; rescanning", resource_.name, e.action,
                      e.syspath, Call().error.empty() ? std::strerror(-rc) : Call().error);
      if (rc != 0) scan = true;
    }
  }
  if (scan) EventScanOnWorker(ScanCause::kEvent);
}

void ModuleInstance::EventScanOnWorker(ScanCause cause) {
  if (deferred_scan_at_) return;  // a deferred scan will cover it
  const auto now = std::chrono::steady_clock::now();
  if (now - last_event_scan_ >= kMinEventScanInterval) {
    last_event_scan_ = now;
    (void)ScanOnWorker(cause);
  } else {
    deferred_scan_at_ = last_event_scan_ + kMinEventScanInterval;
    deferred_cause_ = cause;
  }
}

void ModuleInstance::OnPathChanged() {
  if (path_scan_queued_.exchange(true)) return;
  Post([this] {
    path_scan_queued_.store(false);
    if (inst_ != nullptr) EventScanOnWorker(ScanCause::kPath);
  });
}

void ModuleInstance::RequestRescan(ScanCause cause) {
  if (rescan_queued_.exchange(true)) return;
  Post([this, cause] {
    rescan_queued_.store(false);
    (void)ScanOnWorker(cause);
  });
}

Status ModuleInstance::ModuleError(std::string_view call, int rc) {
  std::string why = Call().error.empty() ? std::strerror(-rc) : Call().error;
  return Status(rc == -EINVAL ? StatusCode::kInvalidArgument : StatusCode::kInternal,
                StrCat(resource_.name, ": ", call, ": ", why));
}

namespace {
// Checks ids against `list`: every one known and healthy. Fills `unique`
// (request order, duplicates dropped).
Status CheckIds(const std::string& resource, const DeviceList& list,
                const std::vector<std::string>& ids, std::vector<std::string>* unique) {
  for (const std::string& id : ids) {
    auto it = std::lower_bound(list.begin(), list.end(), id,
                               [](const Device& d, const std::string& v) { return d.id < v; });
    if (it == list.end() || it->id != id)
      return InvalidArgumentError(StrCat(resource, ": unknown device ID \"", id, "\""));
    // Held back while a release runs: the kubelet may still offer it (it
    // has not seen the change yet), and an admission failure is final; the
    // release then runs at PreStart.
    if (!it->healthy && !it->held_back)
      return InvalidArgumentError(StrCat(resource, ": device \"", id, "\" is unhealthy"));
    if (std::find(unique->begin(), unique->end(), id) == unique->end()) unique->push_back(id);
  }
  if (unique->empty()) return InvalidArgumentError(StrCat(resource, ": no device IDs requested"));
  return OkStatus();
}
}  // namespace

bool ModuleInstance::PostCall(std::function<void()> run, std::function<bool()> wanted,
                              const std::function<void(Status)>& refuse,
                              std::vector<std::string>* lane,
                              std::shared_ptr<const LaneWait>* wait) {
  if (queued_calls_.fetch_add(1) >= kMaxQueuedCalls) {
    queued_calls_.fetch_sub(1);
    refuse(UnavailableError(StrCat(resource_.name, ": the module is busy (", kMaxQueuedCalls,
                                   " calls already wait for it)")));
    return false;
  }
  auto task = [this, run = std::move(run), wanted = std::move(wanted)] {
    queued_calls_.fetch_sub(1);
    if (wanted && !wanted()) return;  // answered meanwhile (timed out): skip the module
    run();
  };
  if (lane == nullptr) {
    Post(std::move(task));
    return true;
  }
  auto w = PostSlow(std::move(*lane), std::move(task));
  if (wait != nullptr) *wait = std::move(w);
  return true;
}

void ModuleInstance::Allocate(std::vector<std::string> ids,
                              std::function<void(StatusOr<Recipe>)> done,
                              std::function<bool()> wanted) {
  if (!module_->has_allocate()) {
    // No module code involved: answer from the published (immutable) list
    // on the caller's thread, without a hop to the worker.
    DeviceListPtr list = devices();
    std::vector<std::string> unique;
    if (Status st = CheckIds(resource_.name, *list, ids, &unique); !st.ok()) {
      done(st);
      return;
    }
    done(DefaultRecipe(*list, unique));
    return;
  }
  auto refuse = [done](Status st) { done(std::move(st)); };
  PostCall(
      [this, ids = std::move(ids), done = std::move(done)]() mutable {
        DeviceListPtr list = devices();
        std::vector<std::string> unique;
        if (Status st = CheckIds(resource_.name, *list, ids, &unique); !st.ok()) {
          done(st);
          return;
        }
        if (inst_ != nullptr) {
          Recipe built;
          RecipeSink sink(&built);
          auto cids = CStrings(unique);
          Call().error.clear();
          const int rc = module_->descriptor().allocate(inst_, cids.data(), unique.size(), &sink.c);
          if (rc < 0) {
            done(ModuleError("allocate", rc));
            return;
          }
          if (rc != DEVPLUG_ALLOCATE_DEFAULT) {
            Recipe normalized;
            normalized.Merge(built);
            done(std::move(normalized));
            return;
          }
        }
        done(DefaultRecipe(*list, unique));
      },
      std::move(wanted), refuse);
}

void ModuleInstance::PreferredAllocation(
    std::vector<std::string> available, std::vector<std::string> must_include, int32_t size,
    std::function<void(StatusOr<std::vector<std::string>>)> done, std::function<bool()> wanted) {
  auto refuse = [done](Status st) { done(std::move(st)); };
  PostCall(
      [this, available = std::move(available), must = std::move(must_include), size,
       done = std::move(done)] {
        if (!module_->has_preferred_allocation() || inst_ == nullptr) {
          done(UnimplementedError(StrCat(resource_.name, ": module has no preferred allocation")));
          return;
        }
        IdSink sink;
        auto a = CStrings(available);
        auto m = CStrings(must);
        Call().error.clear();
        const int rc = module_->descriptor().preferred_allocation(
            inst_, a.data(), available.size(), m.data(), must.size(), size, &sink.c);
        if (rc < 0) {
          done(ModuleError("preferred_allocation", rc));
          return;
        }
        done(std::move(sink.ids));
      },
      std::move(wanted), refuse);
}

std::shared_ptr<const LaneWait> ModuleInstance::PreStart(std::vector<std::string> ids,
                                                         std::function<void(Status)> done,
                                                         std::function<bool()> wanted) {
  auto refuse = done;
  const auto began = std::chrono::steady_clock::now();
  std::vector<std::string> devices = ids;
  std::shared_ptr<const LaneWait> lane_wait;
  PostCall(
      [this, ids = std::move(ids), done = std::move(done), wanted, began] {
        if (inst_ == nullptr) {
          done(OkStatus());
          return;
        }
        // Guarantee before reuse: a device handed to this container while the
        // agent still counted it as someone else's is released first.
        if (tracks_releases() && options_.releases) {
          for (;;) {
            bool wait = false;
            const std::vector<std::string> due = options_.releases->DueBeforeStart(ids, &wait);
            if (due.empty() && !wait) break;
            if (!wait) {
              std::string why;
              const int rc = RunRelease(due, &why, true);
              if (rc == 0) break;
              if (rc != -EAGAIN) {
                done(Status(
                    StatusCode::kInternal,
                    StrCat(resource_.name, ": release before the container starts failed: ", why)));
                return;
              }
            }
            // Still busy, or released elsewhere: ask again while the kubelet
            // waits for this call.
            if (wanted && !wanted()) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            if (wanted && !wanted()) return;
          }
        }
        if (!runs_pre_start()) {
          done(OkStatus());
          return;
        }
        auto c = CStrings(ids);
        Call().error.clear();
        Call().prestart_began = began;
        const int rc = module_->descriptor().pre_start(inst_, c.data(), ids.size());
        Call().prestart_began.reset();
        done(rc < 0 ? ModuleError("pre_start", rc) : OkStatus());
      },
      std::move(wanted), refuse, &devices, &lane_wait);
  return lane_wait;
}

bool ModuleInstance::runs_pre_start() const {
  return module_->has_pre_start() && use_pre_start_.load();
}

bool ModuleInstance::tracks_releases() const {
  return module_->has_on_release() && track_releases_.load();
}

int ModuleInstance::RunRelease(const std::vector<std::string>& ids, std::string* why,
                               bool before_start) {
  int rc = -ENODEV;
  if (inst_ == nullptr) {
    *why = "the module instance is stopped";
  } else {
    auto c = CStrings(ids);
    Call().error.clear();
    rc = module_->descriptor().on_release(inst_, c.data(), ids.size());
    if (rc > 0) rc = 0;
    *why = rc == 0 ? "" : Call().error.empty() ? std::strerror(-rc) : Call().error;
  }
  const std::string what = StrCat(resource_.name, ": release of ", StrJoin(ids, ","),
                                  before_start ? " (before a container start)" : "");
  if (rc == 0)
    spdlog::info("{}: done", what);
  else if (rc == -EAGAIN)
    spdlog::debug("{}: still busy ({}); asking again", what, *why);
  else
    spdlog::warn("{}: failed: {}", what, *why);
  if (options_.observer) options_.observer->Released(rc, ids.size());
  if (options_.releases) options_.releases->Released(ids, rc, *why, before_start);
  return rc;
}

void ModuleInstance::Release(std::vector<std::string> ids,
                             std::function<void(int rc, const std::string& why)> done) {
  std::vector<std::string> devices = ids;
  PostSlow(std::move(devices), [this, ids = std::move(ids), done = std::move(done)] {
    std::string why;
    const int rc = RunRelease(ids, &why, false);
    if (done) done(rc, why);
  });
}

}  // namespace devplug::modules
