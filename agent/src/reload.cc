// The SIGHUP reload (docs/design.md, "Reload, status, metrics"), resource by resource: stage
// the added and changed resources, commit once every one is created, or keep
// the old configuration whole. Part of Agent; runs on the main loop.
#include <sys/stat.h>

#include <algorithm>
#include <ctime>

#include <spdlog/spdlog.h>

#include "agent.h"
#include "modules/conflicts.h"
#include "modules/loaded_module.h"
#include "ops/log.h"
#include "util/systemd.h"

namespace devplug {
namespace {

using std::chrono::milliseconds;

// A changed resource registers again this long after its old stream ended,
// so that the kubelet has seen the end before the new registration: a
// kubelet that handles the old stream's end late drops a registration that
// came first (kubelet-contract §3.7). The same wait as after any stream end.
constexpr milliseconds kReloadRegisterDelay{1000};

// The same resource, as far as serving it goes (where it is written in the
// files does not matter).
bool SameResource(const config::ResourceConfig& a, const config::ResourceConfig& b) {
  if (a.name != b.name || a.module != b.module || a.socket != b.socket ||
      a.registration != b.registration || a.required != b.required || a.cdi != b.cdi ||
      a.cdi_dir != b.cdi_dir || a.cdi_only != b.cdi_only ||
      a.module_keys.size() != b.module_keys.size())
    return false;
  for (const auto& [key, value] : a.module_keys) {
    auto it = b.module_keys.find(key);
    if (it == b.module_keys.end() || !it->second.tree || !value.tree ||
        !config::SameValue(*it->second.tree, *value.tree))
      return false;
  }
  return true;
}

}  // namespace

// ---- reload -------------------------------------------------------------------------------

void Agent::BeginReload(const char* why) {
  if (reload_) {
    // Applied once the one under way ends (its files may predate this).
    if (!reload_again_)
      spdlog::info("{}: a reload is already under way; reloading again once it ends", why);
    reload_again_ = why;
    return;
  }
  config_watch_.Taken();
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  sd::Notify(StrCat("RELOADING=1\nMONOTONIC_USEC=", static_cast<uint64_t>(ts.tv_sec) * 1'000'000 +
                                                        static_cast<uint64_t>(ts.tv_nsec / 1000)));
  spdlog::info("{}: reloading the configuration", why);
  if (!options_.reload) {
    FailReload("this devplugd runs a built-in configuration and cannot reload it");
    return;
  }
  StatusOr<config::AgentConfig> next = options_.reload();
  if (!next.ok()) {
    FailReload(next.status().message());
    return;
  }
  // What only a restart can change (every socket, watch and event source
  // hangs on it).
  std::vector<std::string> errors;
  auto fixed = [&](const char* key, const std::string& now, const std::string& then) {
    if (now == then) return;
    auto it = next->agent_keys.find(key);
    const config::SourceLocation where =
        it != next->agent_keys.end() ? it->second : config::SourceLocation{next->files.front(), 0};
    errors.push_back(
        config::Located(where, StrCat("agent.", key),
                        StrCat("changed from \"", now, "\" to \"", then, "\": needs a restart")));
  };
  fixed("plugin_dir", config_.plugin_dir, next->plugin_dir);
  fixed("plugins_registry_dir", config_.plugins_registry_dir, next->plugins_registry_dir);
  fixed("module_dir", config_.module_dir, next->module_dir);
  fixed("host_root", config_.host_root, next->host_root);
  fixed("udev_source", std::string(config::UdevSourceName(config_.udev_source)),
        std::string(config::UdevSourceName(next->udev_source)));
  fixed("control_socket", config_.control_socket, next->control_socket);
  fixed("metrics_address", config_.metrics_address, next->metrics_address);
  if (!errors.empty()) {
    FailReload(StrJoin(errors, "\n"));
    return;
  }
  auto pending = std::make_unique<PendingReload>();
  pending->config = std::move(*next);
  for (size_t i = 0; i < pending->config.resources.size(); ++i) {
    const config::ResourceConfig& cfg = pending->config.resources[i];
    auto old = std::find_if(resources_.begin(), resources_.end(),
                            [&](const auto& r) { return r->cfg.name == cfg.name; });
    // Modules see prestart_timeout at create() (host->prestart_timeout_ms)
    // and may check their own timeouts against it: a change re-creates
    // the instances that take PreStartContainer calls.
    const bool prestart_changed =
        old != resources_.end() && pending->config.prestart_timeout != config_.prestart_timeout &&
        (*old)->module && ((*old)->module->has_pre_start() || (*old)->module->has_on_release());
    if (old != resources_.end() && SameResource((*old)->cfg, cfg) && !prestart_changed) {
      // Unchanged, unless its module file was replaced on disk.
      const Resource& o = **old;
      const auto now = modules::LoadedModule::Identify(
          modules::ResolveModulePath(cfg.module, config_.module_dir));
      if (!o.module || (now && *now == o.module->file_id())) continue;
      spdlog::info("resource \"{}\": module file {} was replaced", cfg.name, o.module->path());
    }
    auto r = NewResource(cfg, i, /*staged=*/true);
    if (Status st = LoadModule(*r); !st.ok()) errors.push_back(st.message());
    pending->staged.push_back(std::move(r));
  }
  if (!errors.empty()) {
    FailReload(StrJoin(errors, "\n"));
    return;
  }
  pending->deadline = Clock::now() + pending->config.start_timeout;
  reload_ = std::move(pending);
  // Their create() and first scan run while everything else keeps serving,
  // under the new configuration. A restarted resource shares its
  // predecessor's release tracker from the start: what it holds back is
  // held back in the new instance's first list too, and a release still
  // running in the old instance reports to it.
  for (auto& r : reload_->staged) {
    auto old = std::find_if(resources_.begin(), resources_.end(),
                            [&](const auto& o) { return o->cfg.name == r->cfg.name; });
    if (old != resources_.end()) r->handed_out = (*old)->handed_out;
    Launch(*r, reload_->config, old != resources_.end() ? (*old)->tracker : nullptr);
  }
  FinishReload();
}

void Agent::FinishReload() {
  if (!reload_) return;
  const auto now = Clock::now();
  const bool creating = std::any_of(reload_->staged.begin(), reload_->staged.end(),
                                    [](const auto& r) { return r->starting != nullptr; });
  if (creating && now < reload_->deadline) return;
  std::vector<std::string> errors;
  for (auto& r : reload_->staged) {
    if (r->starting) {  // past the deadline: given up, as at start
      r->failure = UnavailableError(r->starting->GiveUpMessage());
      r->starting->RequestStop();
      (void)modules::StopOrAbandon(r->starting, now);
      r->starting.reset();
      ++r->launch;
    }
    if (!r->failure.ok()) errors.push_back(r->failure.message());
  }
  if (!errors.empty()) {
    std::vector<std::unique_ptr<Resource>> staged = std::move(reload_->staged);
    reload_.reset();
    for (auto& r : staged) Retire(std::move(r));
    FailReload(StrJoin(errors, "\n"));
    return;
  }
  CommitReload();
}

void Agent::UpdateConfigWatch() {
  if (!config_.watch_config || options_.config_path.empty()) {
    if (config_watch_.active()) spdlog::info("no longer watching the configuration files");
    config_watch_.Stop();
    return;
  }
  if (config_watch_.active()) return;
  if (Status st = config_watch_.Start(options_.config_path); !st.ok())
    spdlog::warn("watch_config: {}; reload with SIGHUP instead", st.message());
  else
    spdlog::info("watching {} and its conf.d/ for changes", options_.config_path);
}

void Agent::FailReload(const std::string& why) {
  const std::string first = why.substr(0, why.find('\n'));
  spdlog::error("reload failed, the old configuration keeps running:");
  for (size_t at = 0; at <= why.size();) {
    const size_t nl = std::min(why.find('\n', at), why.size());
    spdlog::error("  {}", why.substr(at, nl - at));
    at = nl + 1;
  }
  reload_error_ = first;
  metrics_->Reload(false);
  UpdateStatus();
  sd::Notify("READY=1");
}

void Agent::CommitReload() {
  std::vector<std::unique_ptr<Resource>> staged = std::move(reload_->staged);
  // From here on config_ is the new configuration: the servers,
  // registrations and trackers of new resources take its values.
  const config::AgentConfig previous = std::exchange(config_, std::move(reload_->config));
  reload_.reset();

  std::vector<std::unique_ptr<Resource>> serving;
  std::vector<std::string> added, changed, removed, unchanged;
  for (size_t i = 0; i < config_.resources.size(); ++i) {
    const config::ResourceConfig& cfg = config_.resources[i];
    auto take = [&](std::vector<std::unique_ptr<Resource>>& from) -> std::unique_ptr<Resource> {
      auto it = std::find_if(from.begin(), from.end(),
                             [&](const auto& r) { return r && r->cfg.name == cfg.name; });
      if (it == from.end()) return nullptr;
      std::unique_ptr<Resource> r = std::move(*it);
      from.erase(it);
      return r;
    };
    std::unique_ptr<Resource> fresh = take(staged), old = take(resources_);
    if (!fresh) {  // unchanged: not touched at all
      old->index = i;
      old->cfg = cfg;  // the same, written elsewhere perhaps
      unchanged.push_back(cfg.name);
      serving.push_back(std::move(old));
      continue;
    }
    fresh->staged = false;
    fresh->failure = OkStatus();
    // Its spec replaces the old resource's before the kubelet hears of it.
    if (fresh->cdi) fresh->cdi->Activate();
    if (fresh->tracker && !fresh->instance->tracks_releases()) fresh->tracker.reset();
    // An added resource's first List is the truth about what is held (a
    // carried tracker has seen one already; one more costs nothing).
    if (Tracking(*fresh)) SchedulePodList(true);
    // Release state the new instance cannot carry on (its module has no
    // on_release, or it opted out): say what is given up.
    if (old && old->tracker && old->tracker != fresh->tracker) {
      const std::vector<std::string> dropped = old->tracker->SetEnabled(false);
      if (!dropped.empty())
        spdlog::warn(
            "resource \"{}\": the new module instance does not release devices; {} "
            "will not be released",
            cfg.name, StrJoin(dropped, ","));
    }
    metrics_->Adopt(fresh->metrics, old ? old->metrics : nullptr);
    if (old) {
      changed.push_back(cfg.name);
      // The old stream ends first; the new registration follows once the
      // kubelet has seen that end.
      // (At the same path the new server's socket replaces it.)
      if (old->socket_path != fresh->socket_path)
        Withdraw(*old);
      else
        StopServer(*old);
      Retire(std::move(old));
      fresh->registrar->StartAfter(kReloadRegisterDelay);
    } else {
      added.push_back(cfg.name);
      fresh->registrar->Start();
    }
    // Uevents reach it only from now on: one scan sees what changed since
    // its first one.
    fresh->instance->RequestRescan(ops::ScanCause::kEvent);
    spdlog::info("resource \"{}\": module \"{}\" {} from {}", fresh->cfg.name,
                 fresh->module->name(), fresh->module->version(), fresh->module->path());
    serving.push_back(std::move(fresh));
  }
  for (auto& old : resources_) {
    removed.push_back(old->cfg.name);
    Withdraw(*old);
    Retire(std::move(old));
  }
  resources_ = std::move(serving);
  RemoveStaleSpecs(&previous);
  ApplyAgentKeys(previous);
  UpdateHotplug();
  std::vector<std::pair<std::string, DeviceListPtr>> lists;
  for (const auto& r : resources_)
    if (r->instance) lists.emplace_back(r->cfg.name, r->instance->devices());
  for (const std::string& w : FindRecipeConflicts(lists)) spdlog::warn("{}", w);
  auto names = [](const std::vector<std::string>& v) {
    return v.empty() ? std::string("none") : StrJoin(v, ", ");
  };
  spdlog::info("reloaded: {} unchanged; added: {}; changed: {}; removed: {}", unchanged.size(),
               names(added), names(changed), names(removed));
  reload_error_.clear();
  UpdateConfigWatch();
  metrics_->Reload(true);
  UpdateStatus();
  sd::Notify("READY=1");
}

void Agent::ApplyAgentKeys(const config::AgentConfig& previous) {
  if (config_.log_level != previous.log_level) {
    SetLogLevel(config_.log_level);
    spdlog::info("log level: {}", config::LogLevelName(config_.log_level));
  }
  if (config_.resync_interval != previous.resync_interval) {
    next_resync_.reset();
    if (config_.resync_interval.count() > 0) next_resync_ = Clock::now() + config_.resync_interval;
  }
  for (auto& r : resources_) {
    if (r->service) {
      r->service->set_call_timeout(config_.call_timeout);
      r->service->set_prestart_timeout(config_.prestart_timeout);
    }
    ApplyTracking(*r);
  }
  pods_->set_socket(config_.pod_resources_socket);
  releases_.SetPoll(config_.pod_resources_poll);
}

void Agent::ApplyTracking(Resource& r) {
  // The one place a tracker's settings change, and only for a resource that
  // serves: a staged one may share its running predecessor's tracker.
  if (!r.tracker || !r.instance || r.staged) return;
  r.tracker->set_timing(Timing(config_));
  const bool on = config_.pod_resources_poll.count() > 0;
  if (on == r.tracker->enabled()) return;
  const std::vector<std::string> dropped = r.tracker->SetEnabled(on);
  if (on) {
    spdlog::info("resource \"{}\": tracking device releases through {}", r.cfg.name,
                 pods_->socket());
    SchedulePodList(true);  // the first List is the truth about what is held
  } else {
    spdlog::warn(
        "resource \"{}\": release tracking is off (pod_resources_poll = \"0s\"){}", r.cfg.name,
        dropped.empty() ? std::string() : StrCat("; not released: ", StrJoin(dropped, ",")));
  }
  OnTrackerChanged(r);  // devices held back are offered again, or the reverse
}

void Agent::Retire(std::unique_ptr<Resource> r) {
  metrics_->Remove(r->metrics);
  for (auto* inst : {&r->instance, &r->starting})
    if (*inst) (*inst)->RequestStop();
  // A module may take a while to destroy(): a thread waits for it, so the
  // main loop keeps serving. Stuck past the deadline, the instance and what
  // it may still touch (the resource's hub) are left to it.
  const auto deadline = Clock::now() + config_.start_timeout;
  std::erase_if(retiring_, [](Retiring& t) {
    if (!t.done->load()) return false;
    t.thread.join();
    return true;
  });
  auto done = std::make_shared<std::atomic<bool>>(false);
  retiring_.push_back({std::thread([r = std::move(r), deadline, done]() mutable {
                         bool stuck = false;
                         for (auto* inst : {&r->instance, &r->starting}) {
                           if (!modules::StopOrAbandon(*inst, deadline)) {
                             spdlog::error("resource \"{}\": module did not stop; abandoning it",
                                           r->cfg.name);
                             stuck = true;
                           }
                         }
                         if (stuck) (void)r.release();
                         r.reset();
                         done->store(true);
                       }),
                       done});
}

}  // namespace devplug
