#include "modules/module_instance.h"

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>

#include <spdlog/spdlog.h>

#include "modules/abi_sinks.h"
#include "util/sanitizers.h"

#if defined(DEVPLUG_ASAN)
#include <sanitizer/lsan_interface.h>
#define DEVPLUG_LEAK_ON_PURPOSE(p) __lsan_ignore_object(p)
#else
#define DEVPLUG_LEAK_ON_PURPOSE(p) ((void)(p))
#endif

namespace devplug::modules {

ModuleInstance::ModuleInstance(std::shared_ptr<const LoadedModule> module,
                               config::ResourceConfig resource, Options options)
    : module_(std::move(module)),
      resource_(std::move(resource)),
      options_(std::move(options)),
      host_(*module_, resource_,
            HostAdapter::Options{options_.host_root, options_.index, options_.prestart_timeout,
                                 options_.pods, options_.watches,
                                 [this] { RequestRescan(ScanCause::kModule); }}),
      publisher_(resource_.name, options_.lists, options_.releases, options_.withholds,
                 options_.observer),
      worker_(std::string("dp:").append(module_->name()), {}, [this] { DeferredScanOnWorker(); }) {}

std::unique_ptr<ModuleInstance> ModuleInstance::Launch(std::shared_ptr<const LoadedModule> module,
                                                       const config::ResourceConfig& resource,
                                                       Options options,
                                                       std::function<void(Status)> created) {
  std::unique_ptr<ModuleInstance> self(
      new ModuleInstance(std::move(module), resource, std::move(options)));
  self->worker_.Start();
  if (self->slow_lane()) {
    // "dp+<module>": the lanes beside the worker "dp:<module>".
    self->lanes_ = std::make_unique<DeviceLanes>(std::string("dp+").append(self->module_->name()),
                                                 self->slow_lanes(),
                                                 [p = self.get()] { p->host_.BindLane(); });
  }
  self->Post([p = self.get(), created = std::move(created)] { created(p->CreateOnWorker()); });
  return self;
}

Status ModuleInstance::CreateOnWorker() {
  const std::string who = StrCat("resource \"", resource_.name, "\" (", resource_.where.file, ":",
                                 resource_.where.line, "): module \"", module_->name(), "\"");
  host_.BeginCall();
  devplug_instance* inst = nullptr;
  const int rc = module_->descriptor().create(host_.host(), &inst);
  // Configuration problems are the operator's to fix: say so by code. A
  // module that reported one and still returned an instance is refused too
  // (that instance may run on a wrong value).
  if (!host_.config_errors().empty()) {
    if (rc >= 0 && inst != nullptr)
      DestroyModuleInstance(inst);
    else
      host_.EndWatches();
    return InvalidArgumentError(StrJoin(host_.config_errors(), "\n"));
  }
  if (rc < 0 || inst == nullptr) {
    host_.EndWatches();  // watches it added
    std::string why = StrCat(who, " create failed: ", host_.Why(rc < 0 ? rc : -EINVAL));
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
  host_.EndWatches();
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
    (void)StopOrAbandon(self, std::chrono::steady_clock::now());
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
  if (!worker_.running()) return;
  worker_.RequestStop([this] {
    // destroy() runs alone: after the calls queued on the lanes.
    if (lanes_) lanes_->Stop();
    if (inst_ != nullptr) DestroyModuleInstance(inst_);
    inst_ = nullptr;
  });
}

bool ModuleInstance::WaitStopped(std::chrono::steady_clock::time_point deadline) {
  if (worker_.WaitStopped(deadline)) return true;
  // The worker is stuck in a module call: no more change notices, and the
  // owner leaks this object (the thread may still use it).
  publisher_.Silence();
  DEVPLUG_LEAK_ON_PURPOSE(this);
  return false;
}

bool ModuleInstance::Stop(std::chrono::milliseconds timeout) {
  RequestStop();
  return WaitStopped(std::chrono::steady_clock::now() + timeout);
}

ModuleInstance::~ModuleInstance() {
  // No deadline: the owner chose not to give this instance up.
  if (worker_.running()) (void)Stop(std::chrono::hours(24 * 365));
}

bool StopOrAbandon(std::unique_ptr<ModuleInstance>& instance,
                   std::chrono::steady_clock::time_point deadline) {
  if (!instance) return true;
  if (instance->WaitStopped(deadline)) return true;
  (void)instance.release();  // its thread may still use it
  return false;
}

std::shared_ptr<const LaneWait> ModuleInstance::PostSlow(std::vector<std::string> devices,
                                                         std::function<void()> task) {
  if (!lanes_) {
    Post(std::move(task));
    return nullptr;
  }
  return lanes_->Post(std::move(devices), std::move(task));
}

void ModuleInstance::OnUdevEvents(std::vector<udev::Event> events) {
  if (events.empty()) return;
  {
    MutexLock lock(events_mu_);
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
    MutexLock lock(events_mu_);
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
      host_.BeginCall();
      const int rc = module_->descriptor().on_udev_event(inst_, &ev);
      if (rc < 0)
        spdlog::debug("{}: on_udev_event({} {}): {}; rescanning", resource_.name, e.action,
                      e.syspath, host_.Why(rc));
      if (rc != 0) scan = true;
    }
  }
  if (scan) EventScanOnWorker(ScanCause::kEvent);
}

void ModuleInstance::EventScanOnWorker(ScanCause cause) {
  if (worker_.wake_at()) return;  // a deferred scan will cover it
  const auto now = std::chrono::steady_clock::now();
  if (now - last_event_scan_ >= kMinEventScanInterval) {
    last_event_scan_ = now;
    (void)ScanOnWorker(cause);
  } else {
    worker_.WakeAt(last_event_scan_ + kMinEventScanInterval);
    deferred_cause_ = cause;
  }
}

void ModuleInstance::DeferredScanOnWorker() {
  last_event_scan_ = std::chrono::steady_clock::now();
  (void)ScanOnWorker(deferred_cause_);
}

Status ModuleInstance::ScanOnWorker(ScanCause cause) {
  if (inst_ == nullptr) return OkStatus();
  if (options_.observer) options_.observer->Scanned(cause);
  DeviceSink sink(options_.host_root);
  sink.list.reserve(devices()->size());  // usually the same size again
  host_.BeginCall();
  const int rc = module_->descriptor().list_devices(inst_, &sink.c);
  scans_.fetch_add(1);
  if (rc < 0) {
    const std::string why = host_.Why(rc);
    if (publisher_.published())
      spdlog::warn("{}: list_devices failed: {}; keeping the previous device list", resource_.name,
                   why);
    return UnavailableError(why);
  }
  for (const std::string& p : sink.problems)
    spdlog::warn("{}: module {} reported {}, ignoring that device", resource_.name, module_->path(),
                 p);
  for (const std::string& p : sink.attribute_problems)
    spdlog::warn("{}: module {} reported {}; the device goes on without it", resource_.name,
                 module_->path(), p);
  std::sort(sink.list.begin(), sink.list.end(),
            [](const Device& a, const Device& b) { return a.id < b.id; });
  return publisher_.Scanned(std::move(sink.list), tracks_releases());
}

void ModuleInstance::Republish() { publisher_.Republish(tracks_releases()); }

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
  std::string why = host_.Why(rc);
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
          host_.BeginCall();
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
        host_.BeginCall();
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
        host_.BeginCall();
        host_.Call().prestart_began = began;
        const int rc = module_->descriptor().pre_start(inst_, c.data(), ids.size());
        host_.Call().prestart_began.reset();
        done(rc < 0 ? ModuleError("pre_start", rc) : OkStatus());
      },
      std::move(wanted), refuse, &devices, &lane_wait);
  return lane_wait;
}

bool ModuleInstance::runs_pre_start() const {
  return module_->has_pre_start() && host_.use_pre_start();
}

bool ModuleInstance::tracks_releases() const {
  return module_->has_on_release() && host_.track_releases();
}

int ModuleInstance::RunRelease(const std::vector<std::string>& ids, std::string* why,
                               bool before_start) {
  int rc = -ENODEV;
  if (inst_ == nullptr) {
    *why = "the module instance is stopped";
  } else {
    auto c = CStrings(ids);
    host_.BeginCall();
    rc = module_->descriptor().on_release(inst_, c.data(), ids.size());
    if (rc > 0) rc = 0;
    *why = rc == 0 ? "" : host_.Why(rc);
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
