#include "ops/status_report.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "util/utc_time.h"

namespace devplug::ops {
namespace {

using nlohmann::json;

// JSON text for the control socket. Module errors and health reasons are
// made printable UTF-8 where they enter the agent, but a module's name and
// version strings come straight from its descriptor, and nlohmann's dump()
// throws on malformed UTF-8: such bytes become U+FFFD instead.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The state a resource is in, as the status JSON names it.
const char* StateText(const ResourceView& r) {
  using State = kubelet::Registrar::State;
  switch (r.state) {
    case State::kDown:
      return r.starting ? "starting" : r.failed ? "left out" : "not serving";
    case State::kWaitingKubelet:
      return r.registration == RegistrationMode::kPluginWatcher ? "waiting for the kubelet's probe"
                                                                : "waiting for the kubelet";
    case State::kRegistering:
      return "registering";
    case State::kRegistered:
      return r.superseded ? "registered; standing by (a newer devplugd serves it)" : "registered";
    case State::kRetryWait:
      return "registering soon";
    case State::kStandby:
      return "standing by (a newer devplugd serves it)";
  }
  return "?";
}

size_t Healthy(const DeviceListPtr& list) {
  if (!list) return 0;
  return std::count_if(list->begin(), list->end(), [](const Device& d) { return d.healthy; });
}

json DeviceJson(const ResourceView& r, const Device& d) {
  json dev = {{"id", d.id},
              {"health", d.healthy ? "Healthy" : "Unhealthy"},
              {"reason", d.health_reason},
              {"numa", d.Nodes()},
              {"holder", nullptr},
              {"release_state", nullptr}};
  // What DRA publishes beyond the ID (ABI 1.9), where the module says.
  if (!d.pci_address.empty()) dev["pci"] = d.pci_address;
  if (!d.pcie_root.empty()) dev["pcie_root"] = d.pcie_root;
  if (!d.share_of.empty()) dev["share_of"] = d.share_of;  // ABI 1.10
  for (const DeviceAttribute& a : d.attributes) {
    using T = DeviceAttribute::Type;
    json& into = dev[a.type == T::kCapacity ? "capacity" : "attributes"];
    if (a.type == T::kString || a.type == T::kVersion)
      into[a.name] = a.text;
    else if (a.type == T::kBool)
      into[a.name] = a.number != 0;
    else
      into[a.name] = a.number;
  }
  if (r.release_tracking && r.tracker) {
    if (auto v = r.tracker->View(d.id)) {
      dev["release_state"] = std::string(lifecycle::ReleaseTracker::StateName(v->state));
      if (v->holder)
        dev["holder"] = {{"namespace", v->holder->pod_namespace},
                         {"pod", v->holder->pod_name},
                         {"container", v->holder->container}};
    }
  }
  return dev;
}

json ResourceJson(const ResourceView& r, bool devices) {
  static const DeviceList kNone;
  const DeviceList& list = r.devices ? *r.devices : kNone;
  json kubelet_status = nullptr;  // plugin watcher: the kubelet's own word
  if (r.kubelet_status)
    kubelet_status = {
        {"registered", r.kubelet_status->ok()},
        {"error", r.kubelet_status->ok() ? json(nullptr) : json(r.kubelet_status->message())}};
  json res = {
      {"name", r.name},
      {"module", r.module},
      {"module_version", r.module_version},
      {"module_file", r.module_file},
      {"socket", r.socket},
      {"registration", config::RegistrationModeName(r.registration)},
      {"kubelet_status", std::move(kubelet_status)},
      // Its module instance runs: devplugctl status --ready waits for it
      // to be registered.
      {"running", r.running},
      {"registered", r.registered},
      {"state", StateText(r)},
      {"registered_since", r.registered_since ? json(UtcTime(*r.registered_since)) : json(nullptr)},
      {"kubelet_connected", r.kubelet_connected},
      {"devices_total", list.size()},
      {"devices_healthy", Healthy(r.devices)},
      {"release_tracking", r.release_tracking},
      {"last_error", r.failed ? r.failure : r.last_error},
      {"cdi", nullptr},
      {"dra", nullptr}};
  if (r.dra) {
    json claims = json::array();
    for (const DraView::Claim& c : r.dra->prepared) {
      json devices = json::array();
      for (const DraView::Device& d : c.devices)
        devices.push_back(
            {{"request", d.request}, {"device", d.device}, {"id", d.id}, {"cdi_ids", d.cdi_ids}});
      claims.push_back(
          {{"uid", c.uid}, {"namespace", c.ns}, {"name", c.name}, {"devices", std::move(devices)}});
    }
    const std::string& error = r.dra->slice_error;
    res["dra"] = {{"driver", r.dra->driver},
                  {"pool", r.dra->pool},
                  {"generation", r.dra->generation},
                  {"slice_syncs", r.dra->slice_syncs},
                  {"slice_error", error.empty() ? json(nullptr) : json(error)},
                  {"cdi_dir", r.dra->cdi_dir},
                  {"cdi_written_to", r.dra->cdi_written_to},
                  {"prepared", std::move(claims)},
                  {"releasing", r.dra->releasing},
                  {"withheld", r.dra->withheld},
                  {"draining", r.dra->draining}};
  }
  if (r.cdi)
    res["cdi"] = {
        {"mode", r.cdi->mode},      {"spec", r.cdi->spec},   {"written_to", r.cdi->written_to},
        {"kind", r.cdi->kind},      {"named", r.cdi->named}, {"allocations", r.cdi->allocations},
        {"problem", r.cdi->problem}};
  if (devices) {
    json devs = json::array();
    for (const Device& d : list) devs.push_back(DeviceJson(r, d));
    res["devices"] = std::move(devs);
  }
  return res;
}

}  // namespace

std::string StatusLine(const AgentView& view) {
  const size_t total = view.resources.size();
  size_t registered = 0, running = 0, starting = 0, retried = 0;
  std::vector<std::string> idle;
  for (const ResourceView& r : view.resources) {
    if (r.registered) ++registered;
    if (r.running) {
      ++running;
      // Running and offering nothing usable: on a fresh node that is the
      // hint to look at the journal and the configuration.
      if (Healthy(r.devices) == 0) idle.push_back(r.name);
    } else if (r.starting && !r.failed) {
      ++starting;  // its first start, under way: no failure yet
    } else if (r.starting || r.retrying) {
      ++retried;
    }
  }
  std::string status = StrCat("registered ", registered, "/", total, " resources");
  if (starting > 0) StrAppend(&status, "; ", starting, " starting");
  if (running + starting < total) {
    StrAppend(&status, "; ", total - running - starting, " failed");
    if (retried > 0) StrAppend(&status, " (", retried, " retrying)");
  }
  if (registered < running && !view.kubelet_socket) StrAppend(&status, "; waiting for kubelet");
  if (!idle.empty())
    StrAppend(&status, "; no healthy devices: ", StrJoin(idle, ", "), " (see the journal)");
  if (!view.release_problem.empty())
    StrAppend(&status, "; release tracking waits: ", view.release_problem);
  if (!view.reload_error.empty())
    StrAppend(&status, "; reload failed (old configuration kept): ", view.reload_error);
  return status;
}

std::string StatusJson(const AgentView& view, const std::string& status, bool devices,
                       const std::string& only) {
  json agent = {
      {"version", view.version},
      {"abi", view.abi},
      {"since", UtcTime(view.since)},
      {"status", status},
      // devplugctl status --ready waits for it.
      {"started", view.started},
      {"reload_error", view.reload_error.empty() ? json(nullptr) : json(view.reload_error)}};
  json resources = json::array();
  bool found = only.empty();
  for (const ResourceView& r : view.resources) {
    if (!only.empty() && r.name != only) continue;
    found = true;
    resources.push_back(ResourceJson(r, devices || !only.empty()));
  }
  if (!found) return ErrorJson(StrCat("no resource \"", only, "\""));
  return Dump(json{{"agent", std::move(agent)}, {"resources", std::move(resources)}});
}

std::string ErrorJson(const std::string& message) { return Dump(json{{"error", message}}); }

std::string MetricsJson(const std::string& text) { return Dump(json{{"metrics", text}}); }

}  // namespace devplug::ops
