// The agent's side of status: the view of every resource that
// ops/status_report.h turns into STATUS= and the status JSON, and the
// control socket's answers. Part of Agent; runs on the main loop.
#include <spdlog/spdlog.h>

#include "agent.h"
#include "modules/loaded_module.h"
#include "util/systemd.h"

namespace devplug {

ops::AgentView Agent::View() const {
  ops::AgentView v;
  v.version = options_.version;
  v.abi = StrCat(DEVPLUG_MODULE_ABI_MAJOR, ".", DEVPLUG_MODULE_ABI_MINOR);
  v.since = started_at_;
  v.started = started_;
  v.kubelet_socket = KubeletSocketIdentity().has_value();
  v.release_problem = releases_.problem();
  v.reload_error = reload_error_;
  for (const auto& r : resources_) {
    ops::ResourceView rv;
    rv.name = r->cfg.name;
    rv.module = r->module ? std::string(r->module->name()) : r->cfg.module;
    rv.module_version = r->module ? std::string(r->module->version()) : std::string();
    rv.module_file = r->module ? r->module->path()
                               : modules::ResolveModulePath(r->cfg.module, config_.module_dir);
    rv.socket = r->socket_path;
    rv.registration = r->cfg.registration;
    rv.running = r->instance != nullptr;
    rv.starting = r->starting != nullptr;
    rv.failed = !r->failure.ok();
    rv.failure = r->failure.message();
    rv.retrying = r->start_at.has_value();
    const kubelet::Registrar& reg = *r->registrar;
    rv.state = reg.state();
    rv.registered = reg.registered();
    rv.registered_since = reg.registered_since();
    rv.kubelet_status = reg.kubelet_status();
    rv.last_error = reg.last_error();
    rv.kubelet_connected =
        rv.registered && reg.registration() != 0 && r->hub->kubelet_stream() == reg.registration();
    if (r->instance) rv.devices = r->instance->devices();
    rv.release_tracking = Tracking(*r);
    rv.tracker = r->tracker.get();
    rv.cdi = r->cdi.get();
    v.resources.push_back(std::move(rv));
  }
  return v;
}

void Agent::UpdateStatus() {
  for (const auto& r : resources_) r->metrics->Registered(r->registrar->registered());
  std::string status = ops::StatusLine(View());
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
    answer = ops::ErrorJson(q.status().message());
  else if (q->kind == ops::ControlQuery::Kind::kMetrics)
    answer = ops::MetricsJson(metrics_->Text());
  else
    answer = ops::StatusJson(View(), last_status_, q->devices, q->resource);
  call->reply.set_value(std::move(answer));
}

}  // namespace devplug
