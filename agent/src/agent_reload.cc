// The agent's side of a reload (reload.h decides what changes): stage the
// added and changed resources, then commit them (and retire what they
// replace) or keep the old configuration whole. Runs on the main loop.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "agent.h"
#include "kube/kubeconfig.h"
#include "modules/conflicts.h"
#include "modules/loaded_module.h"
#include "ops/log.h"
#include "util/systemd.h"

namespace devplug {
namespace {

// `cfg`'s resource of that name, or null.
const config::ResourceConfig* Named(const config::AgentConfig& cfg, const std::string& name) {
  for (const auto& r : cfg.resources)
    if (r.name == name) return &r;
  return nullptr;
}

// What a hand-off between the APIs talks to the API server with: `cfg`'s
// credentials, and a node name to name its Node and pool by.
StatusOr<kube::Credentials> HandoffCredentials(const config::AgentConfig& cfg) {
  if (cfg.node_name.empty()) return FailedPreconditionError("no node name");
  return kube::ChooseCredentials(cfg);
}

// The devices of `name` that pods hold through the device plugin API, as
// `pods` lists them: module ID -> "ns/pod".
std::map<std::string, std::string> HeldBy(const kubelet::PodSnapshot& pods,
                                          const std::string& name) {
  std::map<std::string, std::string> held;
  if (auto it = pods.holders.find(name); it != pods.holders.end())
    for (const auto& [id, h] : it->second) held[id] = StrCat(h.pod_namespace, "/", h.pod_name);
  return held;
}

}  // namespace

void Agent::BeginReload(const char* why) {
  if (reload_ || reload_waits_) {
    // Applied once the one under way ends (its files may predate this).
    if (!reload_again_)
      spdlog::info("{}: a reload is already under way; reloading again once it ends", why);
    reload_again_ = why;
    return;
  }
  config_watch_.Taken();
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  if (NotifiesManager())
    sd::Notify(StrCat(
        "RELOADING=1\nMONOTONIC_USEC=",
        static_cast<uint64_t>(ts.tv_sec) * 1'000'000 + static_cast<uint64_t>(ts.tv_nsec / 1000)));
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
  StageReload(std::move(*next), nullptr);
}

void Agent::StageReload(config::AgentConfig next, const HoldersAnswer* holders) {
  std::vector<Reload::Current> running;
  for (const auto& r : resources_) {
    Reload::Current c{r->cfg(), std::nullopt, false};
    if (const auto& m = r->module()) {
      c.module_file = m->file_id();
      c.takes_prestart = m->has_pre_start() || m->has_on_release();
    }
    running.push_back(std::move(c));
  }
  StatusOr<Reload::Plan> plan =
      Reload::Make(config_, next, running, modules::LoadedModule::Identify);
  if (!plan.ok()) {
    FailReload(plan.status().message());
    return;
  }
  if (std::string why = OrphanedClaims(next, *plan); !why.empty()) {
    FailReload(why);
    return;
  }
  if (!holders && !MovedToDra(next).empty()) {
    // Who holds their devices, asked now: a List of a moment ago may miss
    // a pod admitted since.
    reload_waits_ = std::make_unique<config::AgentConfig>(std::move(next));
    pods_->Fetch(std::chrono::milliseconds(0),
                 [mailbox = mailbox_](StatusOr<kubelet::PodSnapshotPtr> s) {
                   mailbox->Post({Event::kReloadHolders, 0, 0, s.ok() ? OkStatus() : s.status(),
                                  s.ok() ? *s : nullptr});
                 });
    return;
  }
  withhold_at_commit_.clear();
  if (holders) {
    if (std::string why = HeldThroughDevicePlugin(next, *holders, &withhold_at_commit_);
        !why.empty()) {
      FailReload(why);
      return;
    }
  }
  for (const auto& r : resources_)
    if (std::count(plan->replaced.begin(), plan->replaced.end(), r->cfg().name) > 0)
      spdlog::info("resource \"{}\": module file {} was replaced", r->cfg().name,
                   r->module()->path());
  std::vector<std::string> errors;
  std::vector<std::unique_ptr<Resource>> staged;
  auto running_of = [&](const std::string& name) { return resources_.ByName(name); };
  for (size_t i : plan->stage) {
    auto r = NewResource(next.resources[i], i, /*staged=*/true);
    if (Status st = r->LoadModule(running_of(r->cfg().name)); !st.ok())
      errors.push_back(st.message());
    staged.push_back(std::move(r));
  }
  if (!errors.empty()) {
    FailReload(StrJoin(errors, "\n"));
    return;
  }
  const auto deadline = Clock::now() + next.start_timeout;
  reload_ = std::make_unique<Reload>(std::move(next), std::move(staged), deadline);
  // Their create() and first scan run while everything else keeps serving,
  // under the new configuration. A restarted resource shares its
  // predecessor's release state from the start: what it holds back is held
  // back in the new instance's first list too, and a release still running
  // in the old instance reports to it.
  for (auto& r : reload_->staged()) r->Launch(reload_->config(), running_of(r->cfg().name));
  FinishReload();
}

std::string Agent::OrphanedClaims(const config::AgentConfig& next, const Reload::Plan& plan) const {
  std::vector<std::string> errors;
  for (const auto& d : draining_) {
    // Its successor keeps the claimed devices from the kubelet; a change of
    // it (or a move back to DRA, whose driver would read the checkpoint
    // this one still writes) waits until the claims are gone.
    const std::string& name = d->cfg().name;
    const bool staged = std::any_of(plan.stage.begin(), plan.stage.end(),
                                    [&](size_t i) { return next.resources[i].name == name; });
    const bool kept = Named(next, name) != nullptr;
    if (!staged && kept) continue;
    const std::vector<std::string> claims = d->front_end().Holders();
    errors.push_back(StrCat("resource \"", name, "\": the new configuration ",
                            kept ? "changes" : "removes", " it while DRA driver \"",
                            d->cfg().driver, "\" still drains ", claims.size(),
                            " claim(s) prepared before its move to the device "
                            "plugin API: ",
                            StrJoin(claims, ", "), "; apply it once their pods are gone"));
  }
  for (const auto& r : resources_) {
    const std::vector<std::string> claims = r->front_end().Holders();
    if (claims.empty()) continue;
    const config::ResourceConfig* after = Named(next, r->cfg().name);
    std::string change;
    // A move to the device plugin API drains instead (Reload::Commit).
    if (!after)
      change = "removes the resource";
    else if (after->api == ServingApi::kDra && after->driver != r->cfg().driver)
      change = StrCat("renames its DRA driver to \"", after->driver, "\"");
    if (change.empty()) continue;
    // Its checkpoint would be read by nobody: the claims' devices would be
    // published as free and prepared for another claim, and unprepare
    // would never reach a driver that knows them.
    errors.push_back(StrCat("resource \"", r->cfg().name, "\": the new configuration ", change,
                            ", while DRA driver \"", r->cfg().driver, "\" has ", claims.size(),
                            " prepared claim(s): ", StrJoin(claims, ", "),
                            "; apply it once their pods are gone"));
  }
  return StrJoin(errors, "\n");
}

std::vector<std::string> Agent::MovedToDra(const config::AgentConfig& next) const {
  std::vector<std::string> out;
  for (const auto& r : resources_) {
    if (r->cfg().api != ServingApi::kDevicePlugin) continue;
    const config::ResourceConfig* after = Named(next, r->cfg().name);
    if (after && after->api == ServingApi::kDra) out.push_back(r->cfg().name);
  }
  return out;
}

std::string Agent::HeldThroughDevicePlugin(const config::AgentConfig& next,
                                           const HoldersAnswer& holders, Withheld* withhold) const {
  std::vector<std::string> errors;
  for (const std::string& name : MovedToDra(next)) {
    // Its slices would publish every device as free: one a pod holds
    // through the device plugin API would be allocated to a claim as well.
    if (!holders.status.ok() || !holders.pods) {
      errors.push_back(StrCat("resource \"", name,
                              "\": the new configuration serves it through DRA, and which pods "
                              "hold its devices through the device plugin API is not known "
                              "(PodResources: ",
                              holders.status.message(), "); apply it when the kubelet answers"));
      continue;
    }
    std::map<std::string, std::string> held = HeldBy(*holders.pods, name);
    if (held.empty()) continue;
    std::map<std::string, std::vector<std::string>> by_pod;  // "ns/pod" -> its device IDs
    for (const auto& [id, pod] : held) by_pod[pod].push_back(id);
    const size_t count = held.size();
    if (next.pod_resources_poll.count() > 0) {
      (*withhold)[name] = std::move(held);
      continue;
    }
    std::vector<std::string> pods;
    for (const auto& [pod, ids] : by_pod)
      pods.push_back(StrCat(pod, " (", StrJoin(ids, ", "), ")"));
    errors.push_back(StrCat(
        "resource \"", name, "\": the new configuration serves it through DRA, while pods hold ",
        count, " of its device(s) through the device plugin API: ", StrJoin(pods, ", "),
        "; with pod_resources_poll = \"0s\" nothing would tell when they are gone: apply it "
        "once their pods are gone"));
  }
  return StrJoin(errors, "\n");
}

void Agent::WithholdListed(const Status& status, const kubelet::PodSnapshotPtr& pods) {
  bool any = false;
  for (auto& r : resources_) {
    if (status.ok() && (r->front_end().Withholding() || r->front_end().AwaitsHolders())) {
      r->Withhold(HeldBy(*pods, r->cfg().name));
    } else if (!status.ok() && r->front_end().AwaitsHolders()) {
      // As before this was asked: a kubelet that does not answer holds
      // back no slice. A failed List changes nothing already withheld.
      spdlog::info(
          "resource \"{}\": DRA: which pods hold its devices through the device plugin API "
          "is not known ({}): every device is offered",
          r->cfg().name, status.message());
      r->Withhold({});
    }
    any |= r->front_end().Withholding();
  }
  // Asked again one period later while a device is still withheld.
  if (any) releases_.Schedule(Clock::now(), false);
}

void Agent::StartDrainHandoff(Resource& drained) {
  const uint64_t id = drained.id();
  auto post = [mailbox = mailbox_, id](Status st, std::chrono::milliseconds took) {
    Event ev{Event::kDrainHandoff, id, static_cast<uint64_t>(took.count()), std::move(st), nullptr};
    mailbox->Post(std::move(ev));
  };
  auto creds = HandoffCredentials(config_);
  if (!creds.ok()) {
    // Closed at once (after the prepares already asked for): a claim
    // allocated from the last slices is refused.
    spdlog::warn(
        "resource \"{}\": DRA: moved to the device plugin API without a hand-off ({}): a claim "
        "allocated from the last slices is not prepared",
        drained.cfg().name, creds.status().message());
    drain_handoffs_[id] = nullptr;  // the side stays until then
    drained.front_end().CloseDrain([post] { post(OkStatus(), std::chrono::milliseconds(0)); });
    return;
  }
  DraHandoff::Options o;
  o.credentials = std::move(*creds);
  o.node = config_.node_name;
  o.driver = drained.cfg().driver;
  o.resource = drained.cfg().name;
  o.call_timeout = config_.call_timeout;
  front_end::FrontEnd& fe = drained.front_end();
  drain_handoffs_[id] = std::make_unique<DraHandoff>(
      std::move(o), fe.PreparedNames(),
      [&fe](std::function<void()> done) { fe.CloseDrain(std::move(done)); },
      [post](DraHandoff::Result r) { post(r.status, r.took); });
}

void Agent::OnDrainHandoff(const Event& ev) {
  auto it = std::find_if(draining_.begin(), draining_.end(),
                         [&](const auto& d) { return d->id() == ev.resource; });
  drain_handoffs_.erase(ev.resource);
  if (it == draining_.end()) return;
  Resource& d = **it;
  if (ev.status.ok())
    spdlog::info(
        "resource \"{}\": DRA: handed off to the device plugin API {} ms after the slices went; "
        "{} claim(s) prepared, no new one from now on",
        d.cfg().name, ev.number, d.front_end().Holders().size());
  else
    spdlog::warn(
        "resource \"{}\": DRA: hand-off to the device plugin API incomplete after {} ms: {}; "
        "no new claim is prepared from now on",
        d.cfg().name, ev.number, ev.status.message());
  if (Resource* successor = resources_.ByName(d.cfg().name)) {
    successor->SetClaimed(d.Claimed());
    successor->registrar().Start();
  }
  UpdateDrains();
  UpdateStatus();
}

void Agent::UpdateDrains() {
  for (auto it = draining_.begin(); it != draining_.end();) {
    Resource& d = **it;
    if (Resource* successor = resources_.ByName(d.cfg().name)) successor->SetClaimed(d.Claimed());
    if (!d.front_end().Holders().empty() || drain_handoffs_.count(d.id())) {
      ++it;
      continue;
    }
    spdlog::info(
        "resource \"{}\": DRA: the last claim prepared before the move to the device plugin API "
        "is unprepared; driver {} leaves this node",
        d.cfg().name, d.cfg().driver);
    std::unique_ptr<Resource> done = std::move(*it);
    it = draining_.erase(it);
    done->Withdraw();
    resources_.Retire(std::move(done), Clock::now() + config_.start_timeout);
  }
}

void Agent::FinishReload() {
  if (!reload_ || handoff_ || !reload_->Ready(Clock::now())) return;
  const std::vector<std::string> errors = reload_->Errors();
  if (!errors.empty()) {
    std::unique_ptr<Reload> failed = std::move(reload_);
    failed->Abandon(resources_, *metrics_, Clock::now() + config_.start_timeout);
    FailReload(StrJoin(errors, "\n"));
    return;
  }
  if (StartHandoff()) return;
  CommitReload();
}

bool Agent::StartHandoff() {
  if (handed_off_) return false;
  const config::AgentConfig& next = reload_->config();
  std::vector<std::string> names = MovedToDra(next);
  if (names.empty()) return false;
  auto creds = HandoffCredentials(next);
  if (!creds.ok()) {
    spdlog::warn(
        "moving {} to DRA without a hand-off ({}): a pod the scheduler sends through the device "
        "plugin API before the kubelet posts the Node's allocatable fails admission",
        StrJoin(names, ", "), creds.status().message());
    return false;
  }
  DevicePluginHandoff::Options o;
  o.credentials = std::move(*creds);
  o.node = next.node_name;
  o.names = std::move(names);
  o.call_timeout = next.call_timeout;
  spdlog::info("moving {} to DRA: handing off from the device plugin API first",
               StrJoin(o.names, ", "));
  handoff_ = std::make_unique<DevicePluginHandoff>(
      std::move(o), pods_, [mailbox = mailbox_](DevicePluginHandoff::Result r) {
        Event ev{Event::kReloadHandoff, static_cast<uint64_t>(r.admitted_waited),
                 static_cast<uint64_t>(r.took.count()), r.status, r.pods};
        mailbox->Post(std::move(ev));
      });
  return true;
}

void Agent::OnHandoff(const Event& ev) {
  if (!handoff_ || !reload_) return;
  const std::vector<std::string> names = handoff_->options().names;
  handoff_.reset();
  handed_off_ = true;
  if (ev.status.ok())
    spdlog::info(
        "moving {} to DRA: handed off in {} ms; the kubelet admitted the {} pod(s) the device "
        "plugin API was sent meanwhile",
        StrJoin(names, ", "), ev.number, ev.resource);
  else
    spdlog::warn("moving {} to DRA: hand-off incomplete after {} ms: {}", StrJoin(names, ", "),
                 ev.number, ev.status.message());
  // The pods admitted while it waited hold devices too: withheld from the
  // first slice on.
  if (ev.pods)
    for (const std::string& name : names)
      for (auto& [id, pod] : HeldBy(*ev.pods, name)) withhold_at_commit_[name][id] = pod;
  FinishReload();
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

void Agent::UpdateNodeLabelWatch() {
  std::string why;
  std::optional<NodeLabelWatch::Options> want = NodeLabelWatchOptions(config_, &why);
  if (node_watch_ && want && node_watch_->options() == *want) return;
  if (node_watch_) {
    // Its thread may be in a list (up to call_timeout): it ends on its own,
    // and is joined when the agent goes.
    node_watch_->Cancel();
    retired_node_watches_.push_back(std::move(node_watch_));
    if (!want) spdlog::info("no longer watching the node's label");
  }
  if (!want) {
    if (!why.empty() && config::UsesNodeLabel(config_))
      spdlog::warn(
          "node {}'s label {} is not watched ({}): a change of it takes effect at the "
          "next reload",
          config_.node_name, config_.api_label, why);
    return;
  }
  spdlog::info("watching node {}'s label {}", want->node, want->label);
  node_watch_ = std::make_unique<NodeLabelWatch>(
      std::move(*want), [mailbox = mailbox_](const std::optional<std::string>& value) {
        Event ev{Event::kNodeLabel, 0, 0, OkStatus(), nullptr};
        ev.label = value;
        mailbox->Post(std::move(ev));
      });
}

void Agent::OnNodeLabel(const std::optional<std::string>& value) {
  if (!node_watch_ || !config::UsesNodeLabel(config_)) return;
  // What runs was chosen by this value already.
  if (config_.api_label_read && config_.api_label_value == value) return;
  spdlog::info("node {}'s label {} is now {} (the running configuration read {})",
               config_.node_name, config_.api_label, value ? StrCat("\"", *value, "\"") : "unset",
               !config_.api_label_read   ? std::string("no label: the Node was not read")
               : config_.api_label_value ? StrCat("\"", *config_.api_label_value, "\"")
                                         : std::string("unset"));
  BeginReload("the node's label changed");
}

void Agent::FailReload(const std::string& why) {
  handed_off_ = false;
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
  if (NotifiesManager()) sd::Notify("READY=1");
}

void Agent::CommitReload() {
  handed_off_ = false;
  std::unique_ptr<Reload> reload = std::move(reload_);
  // Before the new DRA sides serve: their first slices leave these out.
  bool withholding = false;
  for (auto& r : reload->staged()) {
    auto it = withhold_at_commit_.find(r->cfg().name);
    if (it == withhold_at_commit_.end() || r->cfg().api != ServingApi::kDra) continue;
    r->Withhold(it->second);
    withholding |= r->front_end().Withholding();
  }
  withhold_at_commit_.clear();
  // From here on config_ is the new configuration: the servers,
  // registrations and trackers of new resources take its values.
  const config::AgentConfig previous = std::exchange(config_, reload->TakeConfig());
  Reload::Outcome out =
      reload->Commit(config_, resources_, *metrics_, Clock::now() + config_.start_timeout);
  for (auto& d : out.draining) {
    StartDrainHandoff(*d);
    draining_.push_back(std::move(d));
  }
  RemoveStaleSpecs(&previous);
  ApplyAgentKeys(previous);
  // A List at once: a pod the device plugin admitted since the one the
  // reload asked for is withheld too, before the first slice is written
  // (it waits for the Node's allocatable to read 0).
  if (out.list_now || withholding) SchedulePodList(true);
  UpdateHotplug();
  std::vector<std::pair<std::string, DeviceListPtr>> lists;
  for (const auto& r : resources_)
    if (r->instance()) lists.emplace_back(r->cfg().name, r->instance()->devices());
  for (const std::string& w : FindRecipeConflicts(lists)) spdlog::warn("{}", w);
  auto names = [](const std::vector<std::string>& v) {
    return v.empty() ? std::string("none") : StrJoin(v, ", ");
  };
  spdlog::info("reloaded: {} unchanged; added: {}; changed: {}; removed: {}", out.unchanged.size(),
               names(out.added), names(out.changed), names(out.removed));
  reload_error_.clear();
  UpdateConfigWatch();
  UpdateNodeLabelWatch();
  metrics_->Reload(true);
  UpdateStatus();
  if (NotifiesManager()) sd::Notify("READY=1");
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
  pods_->set_socket(config_.pod_resources_socket);
  // The poll first: a resource whose tracking turns on asks for a List at
  // once, which a poll of "0s" would not schedule.
  releases_.SetPoll(config_.pod_resources_poll);
  bool list_now = false;
  for (auto& r : resources_) list_now |= r->ApplyAgentKeys(config_, releases_);
  if (list_now) SchedulePodList(true);
}

}  // namespace devplug
