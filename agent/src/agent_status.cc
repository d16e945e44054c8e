// The agent's side of status: the view of every resource that
// ops/status_report.h turns into STATUS= and the status JSON, and the
// control socket's answers. Part of Agent; runs on the main loop.
#include <spdlog/spdlog.h>

#include "agent.h"
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
  for (const auto& r : resources_) v.resources.push_back(r->View(config_.module_dir));
  // A draining DRA side shows under its successor of the same name.
  for (const auto& d : draining_) {
    ops::ResourceView drained = d->View(config_.module_dir);
    for (ops::ResourceView& rv : v.resources)
      if (rv.name == drained.name && !rv.dra && drained.dra) rv.dra = std::move(drained.dra);
  }
  return v;
}

void Agent::UpdateStatus() {
  for (const auto& r : resources_) r->metrics()->Registered(r->registrar().registered());
  std::string status = ops::StatusLine(View());
  if (status != last_status_) {
    last_status_ = status;
    if (NotifiesManager()) sd::Notify("STATUS=" + status);
    spdlog::debug("status: {}", status);
    for (const auto& r : resources_)
      spdlog::trace("  {}: {}", r->cfg().name,
                    kubelet::Registrar::StateName(r->registrar().state()));
  }
  TellPredecessorIfServing();
}

void Agent::StartControl() {
  if (config_.control_socket.empty()) return;
  Status st = control_.Start(config_.control_socket, [mailbox = mailbox_](auto call) {
    mailbox->Post({Event::kControl, 0, 0, OkStatus(), nullptr, std::move(call)});
  });
  if (st.ok()) return;
  if (predecessor_fd_ >= 0)
    spdlog::info("control socket: the devplugd handing over to this one serves it until it exits");
  else
    spdlog::warn("no control socket: {}", st.message());
}

void Agent::OnControl(const std::shared_ptr<ops::ControlCall>& call) {
  StatusOr<ops::ControlQuery> q = ops::ParseControlQuery(call->request);
  std::string answer;
  if (!q.ok())
    answer = ops::ErrorJson(q.status().message());
  else if (q->kind == ops::ControlQuery::Kind::kHandover)
    return BeginHandover(call);  // answered once it is done
  else if (q->kind == ops::ControlQuery::Kind::kMetrics)
    answer = ops::MetricsJson(metrics_->Text());
  else
    answer = ops::StatusJson(View(), last_status_, q->devices, q->resource);
  call->reply.set_value(std::move(answer));
}

}  // namespace devplug
