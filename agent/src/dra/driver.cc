#include "dra/driver.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <set>

#include <spdlog/spdlog.h>

#include "cdi/resource_cdi.h"
#include "cdi/spec.h"
#include "cdi/spec_dir.h"
#include "dra/resource_slice.h"
#include "util/hash.h"

namespace devplug::dra {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kMaxRetry{30'000};
constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";

// One answer from a module call made on another thread, waited for up to a
// deadline (the module's thread may answer later: the state is shared).
template <typename T>
class Answer {
 public:
  std::function<void(T)> Callback() {
    return [s = state_](T value) {
      std::lock_guard lock(s->mu);
      s->value.emplace(std::move(value));
      s->cv.notify_all();
    };
  }
  std::optional<T> Wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(state_->mu);
    state_->cv.wait_for(lock, timeout, [&] { return state_->value.has_value(); });
    return std::move(state_->value);
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<T> value;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

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

}  // namespace

StatusOr<std::unique_ptr<Driver>> Driver::Make(Options options) {
  auto kind = cdi::KindOf(options.resource);
  if (!kind.ok()) return kind.status();
  auto checkpoint = Checkpoint::Load(options.checkpoint, options.node);
  if (!checkpoint.ok()) return checkpoint.status();
  std::unique_ptr<Driver> d(new Driver(std::move(options), std::move(*checkpoint), *kind));
  // A reboot empties /var/run/cdi; the claims stay prepared for their pods.
  size_t rewritten = 0;
  {
    MutexLock lock(d->mu_);
    d->UpdateHoldersLocked();
    for (const auto& [uid, c] : d->checkpoint_.claims()) {
      if (c.spec_file.empty()) continue;
      const std::string path = d->Dir() + "/" + c.spec_file;
      if (access(path.c_str(), F_OK) == 0) continue;
      if (Status st = cdi::WriteSpecFile(d->Dir(), c.spec_file, c.spec); !st.ok())
        spdlog::error("resource \"{}\": DRA: the CDI spec of claim {}/{} ({}): {}",
                      d->options_.resource, c.ns, c.name, uid, st.message());
      else
        ++rewritten;
    }
    if (!d->checkpoint_.claims().empty())
      spdlog::info("resource \"{}\": DRA: {} prepared claim(s) from {}{}", d->options_.resource,
                   d->checkpoint_.claims().size(), d->options_.checkpoint,
                   rewritten ? StrCat("; ", rewritten, " CDI spec(s) written again") : "");
  }
  d->slices_.Start();
  d->calls_.Start();
  return d;
}

Driver::Driver(Options options, Checkpoint checkpoint, cdi::Kind kind)
    : options_(std::move(options)),
      kind_(std::move(kind)),
      // A wake is a retry after an error or the periodic re-list: both
      // read the server's state first.
      slices_("dra:slices", {},
              [this] {
                listed_ = false;
                SyncOnLane();
              }),
      calls_("dra:calls", {}, {}),
      checkpoint_(std::move(checkpoint)) {}

Driver::~Driver() { (void)Stop(false); }

void Driver::SetInstance(modules::ModuleInstance* instance) {
  MutexLock lock(mu_);
  instance_ = instance;
}

void Driver::ClearInstance(const modules::ModuleInstance* instance) {
  MutexLock lock(mu_);
  if (instance_ == instance) instance_ = nullptr;
}

modules::ModuleInstance* Driver::instance() const {
  MutexLock lock(mu_);
  return instance_;
}

std::string Driver::Dir() const { return cdi::UnderHostRoot(options_.host_root, options_.cdi_dir); }

// ---- slices -------------------------------------------------------------------------------

void Driver::Publish(const DeviceListPtr& list) {
  MutexLock lock(mu_);
  if (list_ && *list_ == *list) return;
  list_ = list;
  ++generation_;
  if (sync_queued_ || stopping_ || !options_.client) return;
  sync_queued_ = true;
  slices_.Post([this] { SyncOnLane(); });
}

void Driver::Resync() {
  MutexLock lock(mu_);
  relist_ = true;
  if (sync_queued_ || stopping_ || !options_.client || !list_) return;
  sync_queued_ = true;
  slices_.Post([this] { SyncOnLane(); });
}

Clock::time_point Driver::NextRelist() const {
  // ±20%, fixed per node and driver: spread over a fleet, steady per node.
  const auto period = options_.relist;
  const int64_t span = period.count() * 2 / 5;
  const int64_t shift =
      span > 0 ? static_cast<int64_t>(Fnv1a32(StrCat(options_.node, "/", options_.driver)) %
                                      static_cast<uint64_t>(span)) -
                     span / 2
               : 0;
  return Clock::now() + period + std::chrono::milliseconds(shift);
}

void Driver::SyncOnLane() {
  DeviceListPtr list;
  int64_t generation;
  {
    MutexLock lock(mu_);
    sync_queued_ = false;
    if (stopping_ || !list_) return;
    list = list_;
    generation = generation_;
    if (std::exchange(relist_, false)) listed_ = false;
  }
  Status st;
  try {
    st = Sync(*list, generation);
  } catch (const Json::exception& e) {
    // A field of the wrong type in what the API server sent: this sync
    // fails and is retried; devplugd goes on.
    st = UnavailableError(StrCat("an answer of the API server is malformed: ", e.what()));
  }
  MutexLock lock(mu_);
  if (st.ok()) {
    backoff_ = std::chrono::milliseconds(0);
    slices_.WakeAt(options_.relist.count() > 0 && !stopping_
                       ? std::optional<Clock::time_point>(NextRelist())
                       : std::nullopt);
    if (!sync_error_.empty())
      spdlog::info("resource \"{}\": DRA: ResourceSlices written again", options_.resource);
    sync_error_.clear();
    ++syncs_;
    return;
  }
  if (sync_error_ != st.message())
    spdlog::error("resource \"{}\": DRA: ResourceSlices: {}", options_.resource, st.message());
  sync_error_ = st.message();
  listed_ = false;  // read the server's state again
  backoff_ = std::clamp(backoff_ * 2, options_.retry, kMaxRetry);
  if (!stopping_) slices_.WakeAt(Clock::now() + backoff_);
}

Status Driver::Sync(const DeviceList& list, int64_t generation) {
  kube::Client& client = *options_.client;
  const kube::Selector mine{
      StrCat("spec.nodeName=", options_.node, ",spec.driver=", options_.driver), ""};
  if (!listed_) {
    auto existing = client.List(kSlices, mine);
    if (!existing.ok()) return existing.status();
    // A slice whose resourceVersion is still the one our own write got
    // keeps what we sent (the server may have added defaults): it is not
    // written again. Any other is compared as the server holds it.
    std::map<std::string, std::string> versions;
    std::map<std::string, Json> written;
    for (const Json& item : (*existing)["items"]) {
      const Json meta = item.value("metadata", Json::object());
      const std::string name = meta.value("name", "");
      versions[name] = meta.value("resourceVersion", "");
      auto known = versions_.find(name);
      written[name] =
          known != versions_.end() && known->second == versions[name] && written_.count(name)
              ? written_[name]
              : item.value("spec", Json::object());
      // Generations only grow: a pool an earlier devplugd wrote may be ahead
      // (at the first list, ours must pass it); later, only a generation
      // someone else wrote past ours moves it.
      const Json::json_pointer at("/spec/pool/generation");
      const int64_t g =
          item.contains(at) && item.at(at).is_number_integer() ? item.at(at).get<int64_t>() : 0;
      MutexLock lock(mu_);
      const int64_t ours = generation_ + generation_base_;
      if (ever_listed_ ? g > ours : g >= ours) generation_base_ = g + 1 - generation_;
    }
    size_t gone = 0;
    for (const auto& [name, version] : versions_) gone += versions.count(name) == 0;
    if (gone > 0)
      spdlog::warn(
          "resource \"{}\": DRA: {} ResourceSlice(s) of this node were deleted by someone else "
          "(the kubelet does at its start); writing them again",
          options_.resource, gone);
    versions_ = std::move(versions);
    written_ = std::move(written);
    listed_ = true;
    ever_listed_ = true;
  }
  int64_t base;
  {
    MutexLock lock(mu_);
    base = generation_base_;
  }
  const Pool pool{options_.driver, options_.node, generation + base};
  std::set<std::string> wanted;
  for (Json& slice : Slices(pool, list)) {
    const std::string name = slice["metadata"]["name"];
    wanted.insert(name);
    auto it = versions_.find(name);
    if (it != versions_.end() && written_[name] == slice["spec"]) continue;
    if (it != versions_.end()) slice["metadata"]["resourceVersion"] = it->second;
    StatusOr<Json> done = it != versions_.end() ? client.Replace(StrCat(kSlices, "/", name), slice)
                                                : client.Create(kSlices, slice);
    if (!done.ok()) return done.status();
    versions_[name] = done->value("metadata", Json::object()).value("resourceVersion", "");
    written_[name] = slice["spec"];
  }
  for (auto it = versions_.begin(); it != versions_.end();) {
    if (wanted.count(it->first)) {
      ++it;
      continue;
    }
    if (Status st = client.Delete(StrCat(kSlices, "/", it->first));
        !st.ok() && st.code() != StatusCode::kNotFound)
      return st;
    written_.erase(it->first);
    it = versions_.erase(it);
  }
  return OkStatus();
}

// ---- the kubelet's calls ------------------------------------------------------------------

void Driver::Prepare(std::vector<ClaimRef> claims,
                     std::function<void(std::map<std::string, PrepareResult>)> done) {
  calls_.Post([this, claims = std::move(claims), done = std::move(done), start = Clock::now()] {
    std::map<std::string, PrepareResult> out;
    bool ok = true;
    for (const ClaimRef& c : claims) {
      out[c.uid] = PrepareOne(c);
      ok = ok && out[c.uid].error.empty();
    }
    if (options_.observe)
      options_.observe(Rpc::kNodePrepareResources, ok ? StatusCode::kOk : StatusCode::kUnknown,
                       Clock::now() - start);
    done(std::move(out));
  });
}

void Driver::Unprepare(std::vector<ClaimRef> claims,
                       std::function<void(std::map<std::string, std::string>)> done) {
  calls_.Post([this, claims = std::move(claims), done = std::move(done), start = Clock::now()] {
    std::map<std::string, std::string> out;
    bool ok = true;
    for (const ClaimRef& c : claims) {
      out[c.uid] = UnprepareOne(c);
      ok = ok && out[c.uid].empty();
    }
    if (options_.observe)
      options_.observe(Rpc::kNodeUnprepareResources, ok ? StatusCode::kOk : StatusCode::kUnknown,
                       Clock::now() - start);
    done(std::move(out));
  });
}

StatusOr<std::vector<std::pair<std::string, std::string>>> Driver::Results(const ClaimRef& c) {
  if (!options_.client) return FailedPreconditionError("no API server is configured");
  auto claim = options_.client->Get(ClaimPath(c));
  if (!claim.ok()) return claim.status();
  return ClaimResults(c, *claim, options_.driver, options_.node);
}

PrepareResult Driver::PrepareOne(const ClaimRef& c) {
  PrepareResult result;
  {
    MutexLock lock(mu_);
    if (const PreparedClaim* p = checkpoint_.Find(c.uid)) {
      result.devices = p->devices;
      return result;
    }
  }
  auto fail = [&](const std::string& why) {
    spdlog::warn("resource \"{}\": DRA: prepare {}/{} ({}): {}", options_.resource, c.ns, c.name,
                 c.uid, why);
    result.devices.clear();
    result.error = why;
    return result;
  };
  auto results = Results(c);
  if (!results.ok()) return fail(std::string(results.status().message()));
  modules::ModuleInstance* inst = instance();
  if (inst == nullptr) return fail("the module does not run");
  // DRA device name -> module device ID, from the current list.
  // (Held: a range-for over *inst->devices() would free the list first.)
  const DeviceListPtr list = inst->devices();
  std::map<std::string, std::string> ids;
  for (const Device& d : *list) ids[DeviceName(d.id)] = d.id;

  PreparedClaim prepared{c.uid, c.ns, c.name, {}, "", ""};
  std::vector<std::pair<std::string, Json>> cdi_devices;
  std::vector<std::string> all;
  // Before any module call: every device is here, and no other prepared
  // claim holds it (a device is set up and released for one claim).
  for (const auto& [request, device] : *results) {
    auto it = ids.find(device);
    if (it == ids.end()) return fail(StrCat("device \"", device, "\" is not on this node now"));
    if (const PreparedClaim* other = HolderOf(it->second, c.uid))
      return fail(StrCat("device \"", device, "\" is prepared for claim ", other->ns, "/",
                         other->name, " (", other->uid, ")"));
  }
  // From here on the module may ask who holds these devices (pod_of() in
  // pre_start(): cex checks `namespaces`): this claim, until the answer.
  {
    MutexLock lock(mu_);
    for (const auto& [request, device] : *results) preparing_[ids[device]] = c;
    UpdateHoldersLocked();
  }
  struct Done {
    Driver* d;
    std::vector<std::string> ids;
    ~Done() {
      MutexLock lock(d->mu_);
      for (const std::string& id : ids) d->preparing_.erase(id);
      d->UpdateHoldersLocked();
    }
  } done{this, {}};
  for (const auto& [request, device] : *results) done.ids.push_back(ids[device]);
  // One allocate() per request, for all of its devices: the devices of a
  // request reach a container together, as a container's do in the device
  // plugin API, so answers made per container (cex's one node, env lists
  // joined per key, PCI_RESOURCE_*) come out right; their edits are one CDI
  // device, <uid>-<request> (review D7: one allocate() and one CDI device per
  // device named a node that was never made).
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> by_request;
  for (const auto& [request, device] : *results)
    by_request[request].emplace_back(device, ids[device]);
  // What the module set up so far: released if the prepare fails after it
  // (review D1: unprepare of a claim never recorded released nothing).
  std::vector<std::string> set_up;
  auto fail_after = [&](const std::string& why) {
    {
      // Released now: this claim holds them no more.
      MutexLock lock(mu_);
      for (const std::string& id : done.ids) preparing_.erase(id);
      UpdateHoldersLocked();
    }
    ReleaseSetUp(inst, c, set_up);
    return fail(why);
  };
  for (const auto& [request, devices] : by_request) {
    std::vector<std::string> group;
    for (const auto& [device, id] : devices) group.push_back(id);
    Answer<StatusOr<Recipe>> recipe;
    inst->Allocate(group, recipe.Callback());
    std::optional<StatusOr<Recipe>> r = recipe.Wait(options_.call_timeout);
    if (!r) return fail_after(StrCat("allocate(", StrJoin(group, ","), ") did not answer in time"));
    if (!r->ok()) return fail_after(std::string(r->status().message()));
    set_up.insert(set_up.end(), group.begin(), group.end());
    Json edits = cdi::Edits(
        **r, [this](const std::string& path) { return cdi::LookUpNode(options_.host_root, path); });
    std::vector<std::string> cdi_ids;
    if (!cdi::EditsEmpty(edits)) {
      const std::string name = StrCat(c.uid, "-", CdiDeviceName(request));
      cdi_ids.push_back(cdi::QualifiedName(kind_, name));
      cdi_devices.emplace_back(name, std::move(edits));
    }
    for (const auto& [device, id] : devices) {
      prepared.devices.push_back({request, options_.node, device, id, cdi_ids});
      all.push_back(id);
    }
  }
  if (inst->runs_pre_start()) {
    Answer<Status> started;
    inst->PreStart(all, started.Callback());
    std::optional<Status> st = started.Wait(options_.prestart_timeout);
    // A pre_start() past its deadline still runs; the release queued
    // after it on the device's lane runs after it.
    if (!st) return fail_after(StrCat("pre_start(", StrJoin(all, ","), ") did not answer in time"));
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
               c.name, c.uid, StrJoin(all, ","));
  result.devices = prepared.devices;
  return result;
}

void Driver::ReleaseSetUp(modules::ModuleInstance* inst, const ClaimRef& c,
                          const std::vector<std::string>& ids) {
  if (ids.empty() || !inst->tracks_releases()) return;
  Answer<std::pair<int, std::string>> released;
  auto cb = released.Callback();
  inst->Release(ids, [cb](int rc, const std::string& why) { cb({rc, why}); });
  std::optional<std::pair<int, std::string>> r = released.Wait(options_.prestart_timeout);
  if (!r)
    spdlog::warn(
        "resource \"{}\": DRA: prepare {}/{} ({}) failed; on_release({}) of what it set "
        "up goes on past {} ms",
        options_.resource, c.ns, c.name, c.uid, StrJoin(ids, ","),
        options_.prestart_timeout.count());
  else if (r->first != 0)
    spdlog::error(
        "resource \"{}\": DRA: prepare {}/{} ({}) failed, and on_release({}) of what "
        "it set up failed too: {}",
        options_.resource, c.ns, c.name, c.uid, StrJoin(ids, ","), r->second);
  else
    spdlog::info("resource \"{}\": DRA: prepare {}/{} ({}) failed; {} released", options_.resource,
                 c.ns, c.name, c.uid, StrJoin(ids, ","));
}

std::optional<ClaimRef> Driver::Holders::Of(const std::string& id) const {
  MutexLock lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second;
}

void Driver::Holders::Set(std::map<std::string, ClaimRef> by_id) {
  MutexLock lock(mu_);
  by_id_ = std::move(by_id);
}

void Driver::UpdateHoldersLocked() {
  std::map<std::string, ClaimRef> by_id;
  for (const auto& [uid, claim] : checkpoint_.claims()) {
    if (releasing_.count(uid)) continue;
    for (const PreparedDevice& d : claim.devices) by_id[d.id] = {claim.ns, claim.uid, claim.name};
  }
  for (const auto& [id, claim] : preparing_) by_id[id] = claim;
  holders_->Set(std::move(by_id));
}

const PreparedClaim* Driver::HolderOf(const std::string& id, const std::string& except) const {
  MutexLock lock(mu_);
  for (const auto& [uid, claim] : checkpoint_.claims()) {
    if (uid == except) continue;
    for (const PreparedDevice& d : claim.devices)
      if (d.id == id) return &claim;
  }
  return nullptr;
}

std::string Driver::UnprepareOne(const ClaimRef& c) {
  PreparedClaim prepared;
  {
    MutexLock lock(mu_);
    const PreparedClaim* p = checkpoint_.Find(c.uid);
    if (p == nullptr) return "";  // never prepared here, or already undone
    prepared = *p;
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
  modules::ModuleInstance* inst = instance();
  if (inst == nullptr && options_.module_releases && !ids.empty()) {
    // The module has on_release() but no instance runs now (it stops, or
    // has not started yet): the claim stays prepared until a release can
    // run; the kubelet asks again.
    const std::string why =
        StrCat("the module does not run now; on_release(", StrJoin(ids, ","), ") is still due");
    spdlog::warn("resource \"{}\": DRA: unprepare {}/{} ({}): {}", options_.resource, c.ns, c.name,
                 c.uid, why);
    return why;
  }
  // While on_release() runs, this claim is not the devices' holder: the
  // module asks pod_of() whether anyone else still is.
  struct Releasing {
    Driver* d;
    std::string uid;
    Releasing(Driver* driver, std::string claim) : d(driver), uid(std::move(claim)) {
      MutexLock lock(d->mu_);
      d->releasing_.insert(uid);
      d->UpdateHoldersLocked();
    }
    ~Releasing() {
      MutexLock lock(d->mu_);
      d->releasing_.erase(uid);
      d->UpdateHoldersLocked();
    }
  } releasing(this, c.uid);
  if (!ids.empty() && inst != nullptr && inst->tracks_releases()) {
    Answer<std::pair<int, std::string>> released;
    auto cb = released.Callback();
    inst->Release(ids, [cb](int rc, const std::string& why) { cb({rc, why}); });
    std::optional<std::pair<int, std::string>> r = released.Wait(options_.prestart_timeout);
    std::string why;
    if (!r)
      why = StrCat("on_release(", StrJoin(ids, ","), ") did not answer in time");
    else if (r->first != 0)
      why =
          StrCat("on_release(", StrJoin(ids, ","), "): ", r->second.empty() ? "failed" : r->second);
    if (!why.empty()) {
      // The kubelet asks again; the claim stays prepared until a release works.
      spdlog::warn("resource \"{}\": DRA: unprepare {}/{} ({}): {}", options_.resource, c.ns,
                   c.name, c.uid, why);
      return why;
    }
  }
  if (!prepared.spec_file.empty())
    if (Status st = cdi::RemoveSpecFile(Dir(), prepared.spec_file); !st.ok())
      return std::string(st.message());
  MutexLock lock(mu_);
  checkpoint_.Remove(c.uid);
  UpdateHoldersLocked();
  if (Status st = checkpoint_.Save(); !st.ok()) {
    checkpoint_.Put(prepared);
    UpdateHoldersLocked();
    return std::string(st.message());
  }
  spdlog::info("resource \"{}\": DRA: unprepared claim {}/{} ({}): {} released", options_.resource,
               c.ns, c.name, c.uid, StrJoin(ids, ","));
  return "";
}

// ---- stop and status ----------------------------------------------------------------------

void Driver::RequestStop(bool delete_slices) {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  calls_.RequestStop({});
  slices_.RequestStop([this, delete_slices] {
    if (!delete_slices || !options_.client) return;
    const kube::Selector mine{
        StrCat("spec.nodeName=", options_.node, ",spec.driver=", options_.driver), ""};
    // Bounded: an API server that does not answer must not hold the exit.
    if (Status st = options_.client->DeleteCollection(kSlices, mine, options_.stop_timeout);
        !st.ok())
      spdlog::warn("resource \"{}\": DRA: deleting this node's ResourceSlices: {}",
                   options_.resource, st.message());
  });
}

bool Driver::WaitStopped(Clock::time_point deadline) {
  const bool calls = calls_.WaitStopped(deadline);
  const bool slices = slices_.WaitStopped(deadline);
  if (calls && slices && !abandoned_) return true;
  if (!abandoned_)
    spdlog::warn(
        "resource \"{}\": DRA: a call still runs at the stop's deadline; left to its "
        "thread",
        options_.resource);
  abandoned_ = true;
  return false;
}

bool Driver::Stop(bool delete_slices) {
  RequestStop(delete_slices);
  return WaitStopped(Clock::now() + options_.call_timeout);
}

std::vector<PreparedClaim> Driver::prepared() const {
  MutexLock lock(mu_);
  std::vector<PreparedClaim> out;
  for (const auto& [uid, c] : checkpoint_.claims()) out.push_back(c);
  return out;
}

uint64_t Driver::syncs() const {
  MutexLock lock(mu_);
  return syncs_;
}

std::string Driver::sync_error() const {
  MutexLock lock(mu_);
  return sync_error_;
}

int64_t Driver::generation() const {
  MutexLock lock(mu_);
  return generation_ + generation_base_;
}

}  // namespace devplug::dra
