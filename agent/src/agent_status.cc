// What devplugd tells about itself: STATUS= for systemd, the control
// socket's status JSON (docs/design.md, "Reload, status, metrics") and metrics answers. Part of
// Agent; runs on the main loop.
#include <algorithm>
#include <ctime>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "agent.h"
#include "modules/loaded_module.h"
#include "util/systemd.h"

namespace devplug {
namespace {

using nlohmann::json;

// JSON text for the control socket. Module errors and health reasons are
// made printable UTF-8 where they enter the agent, but a module's name and
// version strings come straight from its descriptor, and nlohmann's dump()
// throws on malformed UTF-8: such bytes become U+FFFD instead.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string Iso8601(std::chrono::system_clock::time_point t) {
  const std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The state a resource is in, as the status JSON names it.
const char* StateText(kubelet::Registrar::State s, RegistrationMode mode, bool starting,
                      bool failed) {
  using State = kubelet::Registrar::State;
  switch (s) {
    case State::kDown:
      return starting ? "starting" : failed ? "left out" : "not serving";
    case State::kWaitingKubelet:
      return mode == RegistrationMode::kPluginWatcher ? "waiting for the kubelet's probe"
                                                      : "waiting for the kubelet";
    case State::kRegistering:
      return "registering";
    case State::kRegistered:
      return "registered";
    case State::kRetryWait:
      return "registering soon";
  }
  return "?";
}

}  // namespace

void Agent::UpdateStatus() {
  size_t registered = 0, running = 0;
  for (const auto& r : resources_) {
    if (r->registrar->registered()) ++registered;
    if (r->instance) ++running;
    r->metrics->Registered(r->registrar->registered());
  }
  std::string status = StrCat("registered ", registered, "/", resources_.size(), " resources");
  if (running < resources_.size()) {
    const size_t retried = std::count_if(resources_.begin(), resources_.end(), [](const auto& r) {
      return !r->instance && (r->starting || r->start_at);
    });
    StrAppend(&status, "; ", resources_.size() - running, " failed");
    if (retried > 0) StrAppend(&status, " (", retried, " retrying)");
  }
  if (registered < running && !KubeletSocketIdentity()) StrAppend(&status, "; waiting for kubelet");
  // Say which resources offer nothing usable: on a fresh node that is the
  // hint to look at the journal and the configuration.
  std::vector<std::string> idle;
  for (const auto& r : resources_) {
    if (!r->instance) continue;
    const DeviceListPtr list = r->instance->devices();
    if (std::none_of(list->begin(), list->end(), [](const Device& d) { return d.healthy; }))
      idle.push_back(r->cfg.name);
  }
  if (!idle.empty())
    StrAppend(&status, "; no healthy devices: ", StrJoin(idle, ", "), " (see the journal)");
  if (!releases_.problem().empty())
    StrAppend(&status, "; release tracking waits: ", releases_.problem());
  if (!reload_error_.empty())
    StrAppend(&status, "; reload failed (old configuration kept): ", reload_error_);
  if (status != last_status_) {
    last_status_ = status;
    sd::Notify("STATUS=" + status);
    spdlog::debug("status: {}", status);
    for (const auto& r : resources_)
      spdlog::trace("  {}: {}", r->cfg.name, kubelet::Registrar::StateName(r->registrar->state()));
  }
}

void Agent::OnControl(const std::shared_ptr<ops::ControlCall>& call) {
  StatusOr<ops::ControlQuery> q = ops::ParseControlQuery(call->request);
  std::string answer;
  if (!q.ok())
    answer = Dump(json{{"error", q.status().message()}});
  else if (q->kind == ops::ControlQuery::Kind::kMetrics)
    answer = Dump(json{{"metrics", metrics_->Text()}});
  else
    answer = StatusJson(q->devices, q->resource);
  call->reply.set_value(std::move(answer));
}

std::string Agent::StatusJson(bool devices, const std::string& only) const {
  json agent = {{"version", options_.version},
                {"abi", StrCat(DEVPLUG_MODULE_ABI_MAJOR, ".", DEVPLUG_MODULE_ABI_MINOR)},
                {"since", Iso8601(started_at_)},
                {"status", last_status_},
                // Every resource's first start attempt has ended (created,
                // failed or given up): devplugctl status --ready waits for it.
                {"started", started_},
                {"reload_error", reload_error_.empty() ? json(nullptr) : json(reload_error_)}};
  json resources = json::array();
  bool found = only.empty();
  for (const auto& r : resources_) {
    if (!only.empty() && r->cfg.name != only) continue;
    found = true;
    const DeviceListPtr list =
        r->instance ? r->instance->devices() : std::make_shared<const DeviceList>();
    const size_t healthy =
        std::count_if(list->begin(), list->end(), [](const Device& d) { return d.healthy; });
    const kubelet::Registrar& reg = *r->registrar;
    const bool registered = reg.registered();
    const char* state =
        StateText(reg.state(), reg.mode(), r->starting != nullptr, !r->failure.ok());
    // Plugin watcher: the kubelet's own word on the registration.
    json kubelet_status = nullptr;
    if (const auto& said = reg.kubelet_status())
      kubelet_status = {{"registered", said->ok()},
                        {"error", said->ok() ? json(nullptr) : json(said->message())}};
    json res = {
        {"name", r->cfg.name},
        {"module", r->module ? std::string(r->module->name()) : r->cfg.module},
        {"module_version", r->module ? std::string(r->module->version()) : std::string()},
        {"module_file", r->module ? r->module->path()
                                  : modules::ResolveModulePath(r->cfg.module, config_.module_dir)},
        {"socket", r->socket_path},
        {"registration", config::RegistrationModeName(r->cfg.registration)},
        {"kubelet_status", std::move(kubelet_status)},
        {"registered", registered},
        {"state", state},
        {"registered_since",
         reg.registered_since() ? json(Iso8601(*reg.registered_since())) : json(nullptr)},
        {"kubelet_connected",
         registered && reg.registration() != 0 && r->hub->kubelet_stream() == reg.registration()},
        {"devices_total", list->size()},
        {"devices_healthy", healthy},
        {"release_tracking", Tracking(*r)},
        {"last_error", !r->failure.ok() ? r->failure.message() : reg.last_error()},
        {"cdi", nullptr}};
    if (r->cdi)
      res["cdi"] = {{"mode", std::string(config::CdiModeName(r->cdi->mode()))},
                    {"spec", r->cdi->dir() + "/" + r->cdi->file_name()},
                    {"kind", r->cdi->kind().str()},
                    {"named", r->cdi->named()},
                    {"allocations", r->cdi->allocations()},
                    {"problem", r->cdi->problem()}};
    if (devices || !only.empty()) {
      json devs = json::array();
      for (const Device& d : *list) {
        json dev = {{"id", d.id},
                    {"health", d.healthy ? "Healthy" : "Unhealthy"},
                    {"reason", d.health_reason},
                    {"numa", d.Nodes()},
                    {"holder", nullptr},
                    {"release_state", nullptr}};
        if (Tracking(*r)) {
          if (auto v = r->tracker->View(d.id)) {
            dev["release_state"] = std::string(lifecycle::ReleaseTracker::StateName(v->state));
            if (v->holder)
              dev["holder"] = {{"namespace", v->holder->pod_namespace},
                               {"pod", v->holder->pod_name},
                               {"container", v->holder->container}};
          }
        }
        devs.push_back(std::move(dev));
      }
      res["devices"] = std::move(devs);
    }
    resources.push_back(std::move(res));
  }
  if (!found) return Dump(json{{"error", StrCat("no resource \"", only, "\"")}});
  return Dump(json{{"agent", std::move(agent)}, {"resources", std::move(resources)}});
}

}  // namespace devplug
