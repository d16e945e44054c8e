#include "reload.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace devplug {
namespace {

// A changed resource registers again this long after its old stream ended,
// so that the kubelet has seen the end before the new registration: a
// kubelet that handles the old stream's end late drops a registration that
// came first (kubelet-contract §3.7). The same wait as after any stream end.
constexpr std::chrono::milliseconds kReloadRegisterDelay{1000};

}  // namespace

bool Reload::SameResource(const config::ResourceConfig& a, const config::ResourceConfig& b) {
  if (a.name != b.name || a.module != b.module || a.socket != b.socket ||
      a.registration != b.registration || a.required != b.required || a.cdi != b.cdi ||
      a.cdi_dir != b.cdi_dir || a.cdi_only != b.cdi_only || a.api != b.api ||
      a.driver != b.driver || a.taint_effect != b.taint_effect ||
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

StatusOr<Reload::Plan> Reload::Make(
    const config::AgentConfig& now, const config::AgentConfig& next,
    const std::vector<Current>& running,
    const std::function<std::optional<FileId>(const std::string& path)>& identify) {
  // What only a restart can change: every socket, watch and event source
  // hangs on it.
  std::vector<std::string> errors;
  auto fixed = [&](const char* key, const std::string& was, const std::string& is) {
    if (was == is) return;
    auto it = next.agent_keys.find(key);
    const config::SourceLocation where =
        it != next.agent_keys.end()
            ? it->second
            : config::SourceLocation{next.files.empty() ? std::string() : next.files.front(), 0};
    errors.push_back(
        config::Located(where, StrCat("agent.", key),
                        StrCat("changed from \"", was, "\" to \"", is, "\": needs a restart")));
  };
  fixed("plugin_dir", now.plugin_dir, next.plugin_dir);
  fixed("plugins_registry_dir", now.plugins_registry_dir, next.plugins_registry_dir);
  fixed("module_dir", now.module_dir, next.module_dir);
  fixed("host_root", now.host_root, next.host_root);
  fixed("udev_source", std::string(config::UdevSourceName(now.udev_source)),
        std::string(config::UdevSourceName(next.udev_source)));
  fixed("control_socket", now.control_socket, next.control_socket);
  fixed("metrics_address", now.metrics_address, next.metrics_address);
  // DRA: the pool every slice names, and the client each resource holds.
  // (Unset until a resource needed it: nothing hangs on it yet.)
  if (!now.node_name.empty()) fixed("node_name", now.node_name, next.node_name);
  fixed("api_server", now.api_server, next.api_server);
  fixed("api_ca_file", now.api_ca_file, next.api_ca_file);
  fixed("api_token_file", now.api_token_file, next.api_token_file);
  fixed("api_client_cert", now.api_client_cert, next.api_client_cert);
  fixed("api_client_key", now.api_client_key, next.api_client_key);
  fixed("api_kubeconfig", now.api_kubeconfig, next.api_kubeconfig);
  fixed("dra_state_dir", now.dra_state_dir, next.dra_state_dir);
  if (!errors.empty()) return InvalidArgumentError(StrJoin(errors, "\n"));

  Plan plan;
  for (size_t i = 0; i < next.resources.size(); ++i) {
    const config::ResourceConfig& cfg = next.resources[i];
    auto old = std::find_if(running.begin(), running.end(),
                            [&](const Current& c) { return c.cfg.name == cfg.name; });
    if (old != running.end() && SameResource(old->cfg, cfg)) {
      // Modules see prestart_timeout at create() (host->prestart_timeout_ms)
      // and may check their own timeouts against it: a change re-creates
      // the instances that take PreStartContainer calls.
      const bool prestart_changed =
          next.prestart_timeout != now.prestart_timeout && old->takes_prestart;
      // Unchanged, unless its module file was replaced on disk (a module
      // not loaded yet is loaded from the file there at its next retry).
      const std::optional<FileId> file =
          old->module_file ? identify(modules::ResolveModulePath(cfg.module, now.module_dir))
                           : std::nullopt;
      const bool replaced = old->module_file && !(file && *file == *old->module_file);
      if (!prestart_changed && !replaced) continue;
      if (!prestart_changed) plan.replaced.push_back(cfg.name);
    }
    plan.stage.push_back(i);
  }
  return plan;
}

Resource* Reload::Find(uint64_t id) const {
  for (const auto& r : staged_)
    if (r->id() == id) return r.get();
  return nullptr;
}

bool Reload::Ready(Clock::time_point now) const {
  return now >= deadline_ ||
         std::none_of(staged_.begin(), staged_.end(), [](const auto& r) { return r->starting(); });
}

std::vector<std::string> Reload::Errors() {
  std::vector<std::string> errors;
  for (auto& r : staged_) {
    r->GiveUp();  // past the deadline: as at start
    if (!r->failure().ok()) errors.push_back(r->failure().message());
  }
  return errors;
}

Reload::Outcome Reload::Commit(const config::AgentConfig& next, ResourceSet& running,
                               ops::Metrics& metrics, Clock::time_point retire_by) {
  ResourceSet::List staged = std::move(staged_);
  auto retire = [&](std::unique_ptr<Resource> r) {
    metrics.Remove(r->metrics());
    running.Retire(std::move(r), retire_by);
  };
  Outcome out;
  ResourceSet::List serving;
  for (size_t i = 0; i < next.resources.size(); ++i) {
    const config::ResourceConfig& cfg = next.resources[i];
    std::unique_ptr<Resource> fresh = ResourceSet::Take(staged, cfg.name),
                              old = running.Take(cfg.name);
    if (!fresh) {  // unchanged: not touched at all
      old->Renumber(i, cfg);
      out.unchanged.push_back(cfg.name);
      serving.push_back(std::move(old));
      continue;
    }
    fresh->Commit();
    // An added resource's first List is the truth about what is held (a
    // carried tracker has seen one already; one more costs nothing).
    if (fresh->tracking()) out.list_now = true;
    if (old) old->HandOver(*fresh);
    metrics.Adopt(fresh->metrics(), old ? old->metrics() : nullptr);
    if (old && old->cfg().api == ServingApi::kDra && cfg.api == ServingApi::kDevicePlugin) {
      out.changed.push_back(cfg.name);
      // Its slices go now, before the device plugin registers; it still
      // prepares the claims allocated from them until the hand-off closes
      // it, and the device plugin registers after that, its claims'
      // devices Unhealthy in its first list (Agent::StartDrainHandoff).
      old->Drain(/*open=*/true);
      fresh->SetClaimed(old->Claimed());
      out.draining.push_back(std::move(old));
    } else if (old) {
      out.changed.push_back(cfg.name);
      // The old stream ends first; the new registration follows once the
      // kubelet has seen that end. (At the same path the new server's
      // socket replaces it.)
      if (old->socket_path() != fresh->socket_path())
        old->Withdraw();
      else
        old->StopServer();
      retire(std::move(old));
      fresh->registrar().StartAfter(kReloadRegisterDelay);
    } else {
      out.added.push_back(cfg.name);
      fresh->registrar().Start();
    }
    // Uevents reach it only from now on: one scan sees what changed since
    // its first one.
    fresh->instance()->RequestRescan(ops::ScanCause::kEvent);
    spdlog::info("resource \"{}\": module \"{}\" {} from {}", cfg.name, fresh->module()->name(),
                 fresh->module()->version(), fresh->module()->path());
    serving.push_back(std::move(fresh));
  }
  for (auto& old : running.TakeAll()) {
    out.removed.push_back(old->cfg().name);
    old->Withdraw();
    retire(std::move(old));
  }
  for (auto& r : serving) running.Add(std::move(r));
  return out;
}

void Reload::Abandon(ResourceSet& running, ops::Metrics& metrics, Clock::time_point retire_by) {
  for (auto& r : std::exchange(staged_, {})) {
    metrics.Remove(r->metrics());
    running.Retire(std::move(r), retire_by);
  }
}

}  // namespace devplug
