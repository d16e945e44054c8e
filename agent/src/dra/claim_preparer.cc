#include "dra/claim_preparer.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>

#include <spdlog/spdlog.h>

#include "cdi/resource_cdi.h"
#include "cdi/spec.h"
#include "cdi/spec_dir.h"
#include "dra/claim_status.h"
#include "dra/device_metadata.h"
#include "dra/resource_slice.h"
#include "modules/module_call.h"
#include "util/utc_time.h"

namespace devplug::dra {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A request's name as part of a CDI device name ([A-Za-z0-9_.:-]): a
// subrequest's "main/large" becomes "main.large".
std::string CdiDeviceName(const std::string& request) {
  std::string out = request;
  for (char& ch : out)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '.' && ch != ':' &&
        ch != '-')
      ch = '.';
  return out;
}

std::string ClaimPath(const ClaimRef& c) {
  return StrCat("/apis/resource.k8s.io/v1/namespaces/", c.ns, "/resourceclaims/", c.name);
}

// How long a start waits for its turn on the shared files.
constexpr std::chrono::milliseconds kStartTurn{1000};

std::string Seconds(Clock::duration d) {
  return StrCat(std::chrono::duration_cast<std::chrono::milliseconds>(d).count() / 1000, " s");
}

}  // namespace

// ---- making and stopping -------------------------------------------------------------------

StatusOr<std::unique_ptr<ClaimPreparer>> ClaimPreparer::Make(Options options) {
  auto kind = cdi::KindOf(options.resource);
  if (!kind.ok()) return kind.status();
  auto checkpoint = Checkpoint::Load(options.checkpoint, options.node);
  if (!checkpoint.ok()) return checkpoint.status();
  std::unique_ptr<ClaimPreparer> p(
      new ClaimPreparer(std::move(options), std::move(*checkpoint), *kind));
  // Two devplugd serve the node during a rolling update: they take turns
  // on the checkpoint, the specs and the metadata files.
  auto shared = FileLock::Open(p->options_.checkpoint + ".lock");
  if (shared.ok())
    p->shared_ = std::move(*shared);
  else
    spdlog::warn(
        "resource \"{}\": DRA: {}; a devplugd started beside this one (a rolling update) "
        "would not take turns with it",
        p->options_.resource, shared.status().message());
  FileLockHold turn(p->shared_, Clock::now() + kStartTurn);
  MutexLock lock(p->mu_);
  if (!turn.status().ok()) {
    // The other one prepares (a slow pre_start): its claims are its own
    // to write; a reboot, which empties the spec folder, left no other.
    spdlog::info(
        "resource \"{}\": DRA: another devplugd serving this node is busy with {}; its spec "
        "and metadata files are left as they are",
        p->options_.resource, p->shared_.path());
    p->UpdateHoldersLocked();
    return p;
  }
  if (std::string why = p->RefreshLocked(); !why.empty()) return DataLossError(why);
  // A reboot empties /var/run/cdi; the claims stay prepared for their pods.
  size_t rewritten = 0;
  p->UpdateHoldersLocked();
  for (const auto& [uid, c] : p->checkpoint_.claims()) {
    for (const auto& [file, content] : c.metadata) {
      if (access((p->Dir() + "/" + file).c_str(), F_OK) == 0) continue;
      if (Status st = WriteMetadataFile(p->Dir(), file, content); !st.ok())
        spdlog::error("resource \"{}\": DRA: the device metadata of claim {}/{} ({}): {}",
                      p->options_.resource, c.ns, c.name, uid, st.message());
    }
    if (c.spec_file.empty()) continue;
    const std::string path = p->Dir() + "/" + c.spec_file;
    if (access(path.c_str(), F_OK) == 0) continue;
    if (Status st = cdi::WriteSpecFile(p->Dir(), c.spec_file, c.spec); !st.ok())
      spdlog::error("resource \"{}\": DRA: the CDI spec of claim {}/{} ({}): {}",
                    p->options_.resource, c.ns, c.name, uid, st.message());
    else
      ++rewritten;
  }
  // The metadata of claims no longer prepared (a crash between the removal
  // of a claim and of its files) goes.
  std::set<std::string> prepared;
  for (const auto& [uid, c] : p->checkpoint_.claims()) prepared.insert(uid);
  SweepMetadata(p->Dir(), p->options_.driver,
                [&](const std::string& uid) { return prepared.count(uid) > 0; });
  if (!p->checkpoint_.claims().empty())
    spdlog::info("resource \"{}\": DRA: {} prepared claim(s) from {}{}", p->options_.resource,
                 p->checkpoint_.claims().size(), p->options_.checkpoint,
                 rewritten ? StrCat("; ", rewritten, " CDI spec(s) written again") : "");
  return p;
}

ClaimPreparer::ClaimPreparer(Options options, Checkpoint checkpoint, cdi::Kind kind)
    : options_(std::move(options)),
      kind_(std::move(kind)),
      reads_("dra:claims", {}, {}),
      calls_("dra:calls", {}, {}),
      checkpoint_(std::move(checkpoint)) {}

ClaimPreparer::~ClaimPreparer() {
  RequestStop();
  (void)WaitStopped(Clock::time_point::max());
}

void ClaimPreparer::Start() {
  reads_.Start();
  calls_.Start();
}

void ClaimPreparer::RequestStop() {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  // The calls a read hands on still run: "dra:calls" ends after the reads.
  reads_.RequestStop([this] { calls_.RequestStop({}); });
}

void ClaimPreparer::SetDraining(bool closed) {
  MutexLock lock(mu_);
  draining_ = true;
  closed_ = closed_ || closed;
}

void ClaimPreparer::CloseDrain(std::function<void()> done) {
  // A prepare reads its claim on "dra:reads" and hands on to "dra:calls":
  // through both, this runs after every prepare asked for before it.
  reads_.Post([this, done = std::move(done)]() mutable {
    calls_.Post([this, done = std::move(done)] {
      {
        MutexLock lock(mu_);
        closed_ = true;
      }
      done();
    });
  });
}

void ClaimPreparer::NotifyDraining() {
  {
    MutexLock lock(mu_);
    if (!draining_) return;
  }
  if (options_.claims_changed) options_.claims_changed();
}

bool ClaimPreparer::WaitStopped(Clock::time_point deadline) {
  const bool reads = reads_.WaitStopped(deadline);
  const bool calls = reads && calls_.WaitStopped(deadline);
  if (reads && calls && !abandoned_) return true;
  if (!abandoned_)
    spdlog::warn(
        "resource \"{}\": DRA: a call still runs at the stop's deadline; left to its "
        "thread",
        options_.resource);
  abandoned_ = true;
  return false;
}

void ClaimPreparer::SetSource(modules::DeviceSource* source) {
  MutexLock lock(mu_);
  source_ = source;
}

void ClaimPreparer::ClearSource(const modules::DeviceSource* source) {
  MutexLock lock(mu_);
  if (source_ == source) source_ = nullptr;
  // A call into it under way ends in a moment (none blocks); then the
  // source may go.
  while (users_.count(source)) users_cv_.wait(mu_);
}

modules::DeviceSource* ClaimPreparer::source() const {
  MutexLock lock(mu_);
  return source_;
}

bool ClaimPreparer::Use(modules::DeviceSource* src, const std::function<void()>& call) {
  {
    MutexLock lock(mu_);
    if (src == nullptr || source_ != src) return false;
    ++users_[src];
  }
  call();
  MutexLock lock(mu_);
  if (--users_[src] == 0) {
    users_.erase(src);
    users_cv_.notify_all();
  }
  return true;
}

std::string ClaimPreparer::Dir() const {
  return cdi::UnderHostRoot(options_.host_root, options_.cdi_dir);
}

void ClaimPreparer::PostStatus(const ClaimRef& c, std::vector<PreparedDevice> devices) {
  if (!options_.client) return;
  reads_.Post([this, c, devices = std::move(devices)] {
    std::vector<Json> entries = StatusEntries(options_.driver, options_.node, devices,
                                              UtcTime(std::chrono::system_clock::now()));
    auto written = options_.client->Update(StrCat(ClaimPath(c), "/status"), [&](Json& claim) {
      if (claim.value("metadata", Json::object()).value("uid", "") != c.uid)
        return Status(StatusCode::kNotFound, "the claim was made again");
      ReplaceStatusEntries(claim["status"], options_.driver, options_.node, std::move(entries));
      return OkStatus();
    });
    if (!written.ok() && written.status().code() != StatusCode::kNotFound)
      spdlog::warn("resource \"{}\": DRA: the status of claim {}/{} ({}): {}", options_.resource,
                   c.ns, c.name, c.uid, written.status().message());
  });
}

// ---- the kubelet's calls -------------------------------------------------------------------

void ClaimPreparer::Prepare(std::vector<ClaimRef> claims, Clock::time_point until,
                            std::function<void(std::map<std::string, PrepareResult>)> done) {
  // The claims are read before the call takes its turn: a slow API server
  // delays this call, not the module calls of those queued before it.
  reads_.Post([this, claims = std::move(claims), until, done = std::move(done),
               start = Clock::now()]() mutable {
    std::vector<Read> reads;
    for (const ClaimRef& c : claims) {
      try {
        reads.push_back(ReadClaim(c, /*unless_prepared=*/true));
      } catch (const std::exception& e) {  // a wrong-typed field fails this claim
        reads.push_back(InvalidArgumentError(StrCat("the claim is malformed: ", e.what())));
      }
    }
    calls_.Post([this, claims = std::move(claims), reads = std::move(reads), until,
                 done = std::move(done), start] {
      std::map<std::string, PrepareResult> out;
      bool ok = true;
      {
        FileLockHold turn(shared_, until);
        const std::string busy = TurnError(turn);
        for (size_t i = 0; i < claims.size(); ++i) {
          out[claims[i].uid] =
              busy.empty() ? PrepareOne(claims[i], reads[i], until) : PrepareResult{{}, busy};
          ok = ok && out[claims[i].uid].error.empty();
        }
      }
      if (options_.observer)
        options_.observer->Rpc(Rpc::kNodePrepareResources,
                               ok ? StatusCode::kOk : StatusCode::kUnknown, Clock::now() - start);
      // The claims' status, once the kubelet has its answer.
      std::vector<std::pair<ClaimRef, std::vector<PreparedDevice>>> written;
      for (size_t i = 0; i < claims.size(); ++i)
        if (reads[i].ok() && out[claims[i].uid].error.empty())  // not from the checkpoint
          written.emplace_back(claims[i], out[claims[i].uid].devices);
      done(std::move(out));
      for (auto& [claim, devices] : written) PostStatus(claim, std::move(devices));
    });
  });
}

void ClaimPreparer::Unprepare(std::vector<ClaimRef> claims, Clock::time_point until,
                              std::function<void(std::map<std::string, std::string>)> done) {
  // Through "dra:claims" as well, so that calls keep the kubelet's order.
  reads_.Post([this, claims = std::move(claims), until, done = std::move(done),
               start = Clock::now()]() mutable {
    calls_.Post([this, claims = std::move(claims), until, done = std::move(done), start] {
      std::map<std::string, std::string> out;
      bool ok = true;
      std::vector<ClaimRef> unprepared;
      {
        FileLockHold turn(shared_, until);
        const std::string busy = TurnError(turn);
        for (const ClaimRef& c : claims) {
          bool was = false;
          {
            MutexLock lock(mu_);
            was = checkpoint_.Find(c.uid) != nullptr;
          }
          out[c.uid] = busy.empty() ? UnprepareOne(c, until) : busy;
          ok = ok && out[c.uid].empty();
          if (was && out[c.uid].empty()) unprepared.push_back(c);
        }
      }
      if (options_.observer)
        options_.observer->Rpc(Rpc::kNodeUnprepareResources,
                               ok ? StatusCode::kOk : StatusCode::kUnknown, Clock::now() - start);
      done(std::move(out));
      // After the answer: a drain that ends now must not cut it off.
      if (!unprepared.empty()) NotifyDraining();
      for (const ClaimRef& c : unprepared) PostStatus(c, {});
    });
  });
}

std::string ClaimPreparer::TurnError(const FileLockHold& turn) {
  if (!turn.status().ok()) {
    std::string why = turn.status().code() == StatusCode::kDeadlineExceeded
                          ? StrCat("another devplugd serving this node (a rolling update) held ",
                                   shared_.path(), " until the kubelet's deadline")
                          : std::string(turn.status().message());
    spdlog::warn("resource \"{}\": DRA: {}", options_.resource, why);
    return why;
  }
  MutexLock lock(mu_);
  return RefreshLocked();
}

std::string ClaimPreparer::RefreshLocked() {
  if (!checkpoint_.ChangedOnDisk()) return "";
  auto fresh = Checkpoint::Load(options_.checkpoint, options_.node);
  if (!fresh.ok()) {
    spdlog::error("resource \"{}\": DRA: {}", options_.resource, fresh.status().message());
    return std::string(fresh.status().message());
  }
  spdlog::debug("resource \"{}\": DRA: {} was written by another devplugd; read again ({} claims)",
                options_.resource, options_.checkpoint, fresh->claims().size());
  checkpoint_ = std::move(*fresh);
  UpdateHoldersLocked();
  return "";
}

ClaimPreparer::Read ClaimPreparer::ReadClaim(const ClaimRef& c, bool unless_prepared) const {
  if (unless_prepared) {
    MutexLock lock(mu_);
    // Answered from the checkpoint (a restarted kubelet prepares every
    // claim again): no GET. Read at its turn should it be gone by then.
    if (checkpoint_.Find(c.uid) != nullptr) return Status(StatusCode::kAlreadyExists, "prepared");
  }
  if (!options_.client) return FailedPreconditionError("no API server is configured");
  auto claim = options_.client->Get(ClaimPath(c));
  if (!claim.ok()) return claim.status();
  auto results = ClaimResults(c, *claim, options_.driver, options_.node);
  if (!results.ok()) return results.status();
  return ClaimRead{std::move(*results), PodClaimName(*claim)};
}

std::string ClaimPreparer::AwaitPending(const ClaimRef& c, Clock::time_point until,
                                        bool* released) {
  *released = false;
  std::shared_ptr<PendingRelease> pending;
  {
    MutexLock lock(mu_);
    auto it = pending_.find(c.uid);
    if (it == pending_.end()) return "";
    pending = it->second;
  }
  int rc = 0;
  std::string why;
  if (!pending->Wait(until, &rc, &why))
    return StrCat(pending->what(), " still runs (for ", Seconds(Clock::now() - pending->since()),
                  ")");
  MutexLock lock(mu_);
  pending_.erase(c.uid);
  UpdateHoldersLocked();
  if (rc != 0) return StrCat(pending->what(), ": ", why.empty() ? "failed" : why);
  *released = true;
  return "";
}

PrepareResult ClaimPreparer::PrepareOne(const ClaimRef& c, Read read, Clock::time_point until) {
  PrepareResult result;
  auto fail = [&](const std::string& why) {
    spdlog::warn("resource \"{}\": DRA: prepare {}/{} ({}): {}", options_.resource, c.ns, c.name,
                 c.uid, why);
    result.devices.clear();
    result.error = why;
    return result;
  };
  bool closed = false;
  {
    MutexLock lock(mu_);
    if (const PreparedClaim* p = checkpoint_.Find(c.uid)) {
      result.devices = KubeletDevices(p->devices);
      return result;
    }
    closed = closed_;
  }
  // Its slices are gone and the device plugin API offers the devices now:
  // a claim allocated from the last slice before the move is not served.
  if (closed)
    return fail(StrCat("driver ", options_.driver, " no longer offers devices on node ",
                       options_.node,
                       " (the resource moved to the device plugin API): only claims prepared "
                       "before the move are served"));
  // The kubelet gave up while this call waited its turn: no module call.
  if (Clock::now() >= until) return fail("the kubelet's deadline passed before the call's turn");
  // What an earlier try set up is released first (on_release() runs once,
  // and the module never sets up a device again before that).
  bool released = false;
  if (std::string why = AwaitPending(c, until, &released); !why.empty())
    return fail(StrCat("what an earlier try set up is not released yet: ", why));
  if (!read.ok() && read.status().code() == StatusCode::kAlreadyExists) {
    try {  // it was prepared when read, and is no more
      read = ReadClaim(c, /*unless_prepared=*/false);
    } catch (const std::exception& e) {
      read = InvalidArgumentError(StrCat("the claim is malformed: ", e.what()));
    }
  }
  if (!read.ok()) return fail(std::string(read.status().message()));
  // What the source says of itself, read under a lease (see Use).
  modules::DeviceSource* src = source();
  DeviceListPtr list;
  bool releases = false, pre_start = false;
  if (!Use(src, [&] {
        list = src->devices();
        releases = src->tracks_releases();
        pre_start = src->runs_pre_start();
      }))
    return fail("the module does not run");
  // DRA device name -> its module devices (a shared device's shares), from
  // the current list.
  std::map<std::string, std::vector<std::string>> ids;
  for (const Device& d : *list) ids[DraName(d)].push_back(d.id);

  // Before any module call: every device is here, no other prepared claim
  // holds it (a device, or one share of a shared one, is set up and
  // released for one claim), and no release of it still runs.
  auto picked = PickDevices(read->results, ids, [&](const std::string& id) -> std::string {
    {
      MutexLock lock(mu_);
      for (const auto& [uid, pending] : pending_)
        if (!pending->done() && std::count(pending->ids().begin(), pending->ids().end(), id))
          return StrCat("is still being released for claim ", uid);
    }
    if (const PreparedClaim* other = HolderOf(id, c.uid))
      return StrCat("is prepared for claim ", other->ns, "/", other->name, " (", other->uid, ")");
    return "";
  });
  if (!picked.ok()) return fail(std::string(picked.status().message()));
  const std::vector<Pick>& picks = *picked;
  // From here on the module may ask who holds these devices (pod_of() in
  // pre_start(): cex checks `namespaces`): this claim, until the answer.
  std::vector<std::string> claimed;
  for (const Pick& p : picks) claimed.push_back(p.id);
  {
    MutexLock lock(mu_);
    for (const Pick& p : picks) preparing_[p.id] = {c, p.result->device};
    UpdateHoldersLocked();
  }
  struct Unclaim {
    ClaimPreparer* p;
    const std::vector<std::string>& ids;
    ~Unclaim() {
      MutexLock lock(p->mu_);
      for (const std::string& id : ids) p->preparing_.erase(id);
      p->UpdateHoldersLocked();
    }
  } unclaim{this, claimed};

  // One allocate() per request, for all of its devices: the devices of a
  // request reach a container together, as a container's do in the device
  // plugin API, so answers made per container (cex's one node, env lists
  // joined per key, PCI_RESOURCE_*) come out right; their edits are one CDI
  // device, <uid>-<request>.
  std::map<std::string, std::vector<const Pick*>> by_request;
  for (const Pick& p : picks) by_request[p.result->request].push_back(&p);
  std::map<std::string, const Device*> by_id;
  for (const Device& d : *list) by_id[d.id] = &d;
  PreparedClaim prepared{c.uid, c.ns, c.name, {}, "", "", {}};
  std::vector<std::pair<std::string, Json>> cdi_devices;
  // What the module set up so far: released if the prepare fails after it.
  std::vector<std::string> set_up;
  auto fail_after = [&](const std::string& why) {
    if (!prepared.metadata.empty()) (void)RemoveClaimMetadata(Dir(), options_.driver, c.uid);
    {
      MutexLock lock(mu_);  // released now: this claim holds them no more
      for (const std::string& id : claimed) preparing_.erase(id);
      UpdateHoldersLocked();
    }
    if (releases) ReleaseSetUp(src, c, set_up);
    return fail(why);
  };
  const std::string stopped = "the module stopped while the claim was prepared";
  for (const auto& [request, devices] : by_request) {
    std::vector<std::string> group;
    for (const Pick* p : devices) group.push_back(p->id);
    // An allocate() still running at its deadline may yet set the group
    // up: its answer (or word that it never ran) releases what it and the
    // earlier requests set up, remembered as this claim's pending release.
    std::shared_ptr<PendingRelease> late;
    if (releases) {
      std::vector<std::string> both = set_up;
      both.insert(both.end(), group.begin(), group.end());
      late = std::make_shared<PendingRelease>(
          std::move(both),
          StrCat("the release of what a late allocate(", StrJoin(group, ","), ") set up"));
    }
    modules::ModuleCall<StatusOr<Recipe>> call(
        options_.call_timeout, options_.call_timeout,
        [src, late, group, earlier = set_up,
         resource = options_.resource](std::optional<StatusOr<Recipe>> answer) {
          if (!late) return;
          std::vector<std::string> undo = earlier;
          if (answer && answer->ok()) undo.insert(undo.end(), group.begin(), group.end());
          if (undo.empty()) return late->Finish(0, "");
          spdlog::info("resource \"{}\": DRA: releasing {}, set up by a prepare that failed",
                       resource, StrJoin(undo, ","));
          // On the source's own thread: it runs, no lease needed.
          src->Release(undo, [late](int rc, const std::string& why) { late->Finish(rc, why); });
        });
    if (!Use(src, [&] { src->Allocate(group, call.Callback(), call.Wanted()); }))
      return fail_after(stopped);
    std::optional<StatusOr<Recipe>> r = call.Wait(until);
    if (!r) {
      if (late) {
        MutexLock lock(mu_);
        for (const std::string& id : claimed) preparing_.erase(id);
        pending_[c.uid] = late;
        UpdateHoldersLocked();
      }
      return fail(call.deadline().TimeoutMessage(StrCat("allocate(", StrJoin(group, ","), ")"),
                                                 std::chrono::milliseconds(0)));
    }
    if (!r->ok()) return fail_after(std::string(r->status().message()));
    set_up.insert(set_up.end(), group.begin(), group.end());
    Json edits = cdi::Edits(
        **r, [this](const std::string& path) { return cdi::LookUpNode(options_.host_root, path); });
    // The request's device metadata (KEP-5304), for every container of
    // the claim; the devices of a subrequest are their request's.
    {
      std::vector<MetadataDevice> devs;
      for (const Pick* p : devices) {
        if (std::any_of(devs.begin(), devs.end(),
                        [&](const MetadataDevice& m) { return m.name == p->result->device; }))
          continue;  // one device for the shares a result took
        devs.push_back({options_.node, p->result->device, DeviceAttributes(*by_id[p->id])});
      }
      const std::string base = BaseRequest(request);
      auto file = Metadata(options_.driver, c, read->pod_claim_name, base, devs);
      if (!file.ok()) return fail_after(std::string(file.status().message()));
      // A request split into subrequests has one file, and one mount.
      if (!prepared.metadata.count(file->file)) {
        if (Status st = WriteMetadataFile(Dir(), file->file, file->content); !st.ok()) {
          prepared.metadata[file->file] = "";  // its folder is removed
          return fail_after(StrCat("device metadata: ", st.message()));
        }
        prepared.metadata[file->file] = file->content;
        edits["mounts"].push_back(
            MetadataMount(StrCat(options_.cdi_dir, "/", file->file), file->container_path));
      }
    }
    std::vector<std::string> cdi_ids;
    if (!cdi::EditsEmpty(edits)) {
      const std::string name = StrCat(c.uid, "-", CdiDeviceName(request));
      cdi_ids.push_back(cdi::QualifiedName(kind_, name));
      cdi_devices.emplace_back(name, std::move(edits));
    }
    for (const Pick* p : devices) {
      const NetworkData* net = (*r)->NetworkOf(p->id);
      prepared.devices.push_back({request, options_.node, p->result->device, p->id, cdi_ids,
                                  p->result->share_id, net ? net->interface_name : "",
                                  net ? net->hardware_address : ""});
    }
  }
  if (pre_start) {
    // Time queued behind other devices' work does not count, up to the
    // kubelet's deadline; one not started by then never starts, and the
    // release below runs after one that did, on the same lane.
    modules::ModuleCall<Status> call(
        options_.prestart_timeout,
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()));
    std::shared_ptr<const modules::LaneWait> wait;
    if (!Use(src, [&] { wait = src->PreStart(set_up, call.Callback(), call.Wanted()); }))
      return fail_after(stopped);
    if (wait)
      call.NotCounting(std::move(wait), std::chrono::duration_cast<std::chrono::milliseconds>(
                                            until - call.deadline().start()));
    std::optional<Status> st = call.Wait(until);
    if (!st)
      return fail_after(call.deadline().TimeoutMessage(
          StrCat("pre_start(", StrJoin(set_up, ","), ")"), call.waited()));
    if (!st->ok()) return fail_after(std::string(st->message()));
  }
  if (!cdi_devices.empty()) {
    prepared.spec_file = cdi::AllocationFileName(kind_, StrCat("claim-", c.uid));
    prepared.spec = cdi::RenderMany(kind_, std::move(cdi_devices));
    if (Status st = cdi::WriteSpecFile(Dir(), prepared.spec_file, prepared.spec); !st.ok())
      return fail_after(StrCat("CDI spec: ", st.message()));
  }
  Status saved;
  {
    MutexLock lock(mu_);
    checkpoint_.Put(prepared);
    released_.erase(c.uid);
    UpdateHoldersLocked();
    saved = checkpoint_.Save();
    if (!saved.ok()) {
      checkpoint_.Remove(c.uid);
      UpdateHoldersLocked();
    }
  }
  if (!saved.ok()) {
    if (!prepared.spec_file.empty()) (void)cdi::RemoveSpecFile(Dir(), prepared.spec_file);
    return fail_after(std::string(saved.message()));
  }
  spdlog::info("resource \"{}\": DRA: prepared claim {}/{} ({}): {}", options_.resource, c.ns,
               c.name, c.uid, StrJoin(set_up, ","));
  result.devices = KubeletDevices(prepared.devices);
  return result;
}

void ClaimPreparer::ReleaseSetUp(modules::DeviceSource* src, const ClaimRef& c,
                                 const std::vector<std::string>& ids) {
  if (ids.empty()) return;
  // Not waited for here: the claim's next call (a retried prepare, or the
  // unprepare the kubelet sends) waits for it and answers from it.
  auto pending =
      std::make_shared<PendingRelease>(ids, StrCat("on_release(", StrJoin(ids, ","), ")"));
  {
    MutexLock lock(mu_);
    pending_[c.uid] = pending;
    UpdateHoldersLocked();
  }
  spdlog::info("resource \"{}\": DRA: prepare {}/{} ({}) failed; releasing {}", options_.resource,
               c.ns, c.name, c.uid, StrJoin(ids, ","));
  if (!Use(src, [&] {
        src->Release(ids, [pending](int rc, const std::string& why) { pending->Finish(rc, why); });
      })) {
    // The instance stopped (its destroy() ran): nothing of it is left.
    pending->Finish(0, "");
    spdlog::warn("resource \"{}\": DRA: {} not released: the module stopped", options_.resource,
                 StrJoin(ids, ","));
  }
}

std::string ClaimPreparer::UnprepareOne(const ClaimRef& c, Clock::time_point until) {
  auto fail = [&](const std::string& why) {
    // The kubelet asks again; the claim stays prepared until a release works.
    spdlog::warn("resource \"{}\": DRA: unprepare {}/{} ({}): {}", options_.resource, c.ns, c.name,
                 c.uid, why);
    return why;
  };
  // A release an earlier call began: its retry answers from it.
  bool released = false;
  if (std::string why = AwaitPending(c, until, &released); !why.empty()) return fail(why);
  PreparedClaim prepared;
  {
    MutexLock lock(mu_);
    const PreparedClaim* p = checkpoint_.Find(c.uid);
    if (p == nullptr) return "";  // never prepared here, or already undone
    prepared = *p;
    released = released || released_.count(c.uid) > 0;
  }
  std::vector<std::string> ids;
  for (const PreparedDevice& d : prepared.devices) {
    // Never release a device another prepared claim holds (prepare refuses
    // that, but a checkpoint of an older devplugd may have it).
    if (const PreparedClaim* other = HolderOf(d.id, c.uid)) {
      spdlog::warn(
          "resource \"{}\": DRA: unprepare {}/{} ({}): {} is held by claim {}/{} too; "
          "not released",
          options_.resource, c.ns, c.name, c.uid, d.id, other->ns, other->name);
      continue;
    }
    ids.push_back(d.id);
  }
  modules::DeviceSource* src = source();
  bool releases = false;
  const bool runs = Use(src, [&] { releases = src->tracks_releases(); });
  if (!released && !ids.empty()) {
    if (!runs && options_.module_releases)
      // The module has on_release() but no instance runs now (it stops, or
      // has not started yet): the claim stays prepared until a release can
      // run; the kubelet asks again.
      return fail(
          StrCat("the module does not run now; on_release(", StrJoin(ids, ","), ") is still due"));
    if (runs && releases) {
      // While on_release() runs, this claim is not the devices' holder (the
      // module asks pod_of() whether anyone else still is); a retry while it
      // runs waits for this one.
      auto pending =
          std::make_shared<PendingRelease>(ids, StrCat("on_release(", StrJoin(ids, ","), ")"));
      {
        MutexLock lock(mu_);
        pending_[c.uid] = pending;
        UpdateHoldersLocked();
      }
      if (!Use(src, [&] {
            src->Release(ids,
                         [pending](int rc, const std::string& why) { pending->Finish(rc, why); });
          })) {
        MutexLock lock(mu_);
        pending_.erase(c.uid);
        UpdateHoldersLocked();
        return fail(StrCat("the module stopped; on_release(", StrJoin(ids, ","), ") is still due"));
      }
      if (std::string why = AwaitPending(c, until, &released); !why.empty()) return fail(why);
    }
  }
  MutexLock lock(mu_);
  if (released) released_.insert(c.uid);
  if (!prepared.spec_file.empty())
    if (Status st = cdi::RemoveSpecFile(Dir(), prepared.spec_file); !st.ok())
      return std::string(st.message());
  if (!prepared.metadata.empty())
    if (Status st = RemoveClaimMetadata(Dir(), options_.driver, c.uid); !st.ok())
      return std::string(st.message());
  checkpoint_.Remove(c.uid);
  UpdateHoldersLocked();
  if (Status st = checkpoint_.Save(); !st.ok()) {
    checkpoint_.Put(prepared);  // forgotten at the retry, not released again
    UpdateHoldersLocked();
    return std::string(st.message());
  }
  released_.erase(c.uid);
  spdlog::info("resource \"{}\": DRA: unprepared claim {}/{} ({}): {} released", options_.resource,
               c.ns, c.name, c.uid, StrJoin(ids, ","));
  return "";
}

// ---- holders and status --------------------------------------------------------------------

std::optional<ClaimPreparer::Holder> ClaimPreparer::Holders::Of(const std::string& id) const {
  MutexLock lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second;
}

void ClaimPreparer::Holders::Set(std::map<std::string, Holder> by_id) {
  MutexLock lock(mu_);
  by_id_ = std::move(by_id);
}

void ClaimPreparer::UpdateHoldersLocked() {
  std::map<std::string, Holder> by_id;
  for (const auto& [uid, claim] : checkpoint_.claims()) {
    if (pending_.count(uid) || released_.count(uid)) continue;
    for (const PreparedDevice& d : claim.devices)
      by_id[d.id] = {{claim.ns, claim.uid, claim.name}, d.device};
  }
  for (const auto& [id, claim] : preparing_) by_id[id] = claim;
  holders_->Set(std::move(by_id));
}

const PreparedClaim* ClaimPreparer::HolderOf(const std::string& id,
                                             const std::string& except) const {
  MutexLock lock(mu_);
  for (const auto& [uid, claim] : checkpoint_.claims()) {
    if (uid == except) continue;
    for (const PreparedDevice& d : claim.devices)
      if (d.id == id) return &claim;
  }
  return nullptr;
}

std::vector<PreparedClaim> ClaimPreparer::prepared() const {
  MutexLock lock(mu_);
  std::vector<PreparedClaim> out;
  for (const auto& [uid, c] : checkpoint_.claims()) out.push_back(c);
  return out;
}

std::vector<std::string> ClaimPreparer::releasing() const {
  MutexLock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [uid, p] : pending_)
    if (!p->done()) out.push_back(uid);
  return out;
}

}  // namespace devplug::dra
