#include "dra/slice_publisher.h"

#include <unistd.h>

#include <algorithm>
#include <set>
#include <utility>

#include <spdlog/spdlog.h>

#include "dra/resource_slice.h"
#include "util/backoff.h"
#include "util/hash.h"
#include "util/utc_time.h"

namespace devplug::dra {
namespace {

// What one list of this node's slices of the driver says of their pool.
struct PoolSeen {
  using Json = nlohmann::json;
  int64_t max = 0;     // the highest generation
  int64_t min = -1;    // the lowest (-1: no slice)
  int64_t count = -1;  // resourceSliceCount, where all slices agree (-2: they do not)
  int64_t slices = 0;
  bool twice = false;  // a device in two slices
  std::set<std::string> devices;

  void Add(const Json& spec) {
    const Json pool = spec.value("pool", Json::object());
    const Json g = pool.value("generation", Json());
    const Json n = pool.value("resourceSliceCount", Json());
    const int64_t gen = g.is_number_integer() ? g.get<int64_t>() : 0;
    const int64_t cnt = n.is_number_integer() ? n.get<int64_t>() : 0;
    max = std::max(max, gen);
    min = min < 0 ? gen : std::min(min, gen);
    count = count == -1 || count == cnt ? cnt : -2;
    ++slices;
    const Json list = spec.value("devices", Json::array());
    if (!list.is_array()) return;
    for (const Json& d : list)
      if (d.is_object() && d.value("name", Json()).is_string())
        twice |= !devices.insert(d["name"].get<std::string>()).second;
  }
  bool whole() const { return slices > 0 && min == max && count == slices && !twice; }
};

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kMaxRetry{30'000};
constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";

kube::Selector Mine(const SlicePublisher::Options& o) {
  return {StrCat("spec.nodeName=", o.node, ",spec.driver=", o.driver), ""};
}

}  // namespace

SlicePublisher::SlicePublisher(Options options)
    : options_(std::move(options)),
      // A wake is a retry after an error or the periodic re-list: both
      // read the server's state first.
      lane_("dra:slices", {},
            [this] {
              listed_ = false;
              SyncOnLane();
            }),
      taint_effect_(options_.taint_effect),
      awaiting_withheld_(options_.await_withheld),
      awaiting_registration_(options_.await_registration),
      held_(!options_.hold_for.empty()),
      jitter_(Fnv1a32(StrCat(options_.node, "/", options_.driver, "/", getpid()))) {}

SlicePublisher::~SlicePublisher() {
  RequestStop(false);
  (void)WaitStopped(Clock::time_point::max());
}

void SlicePublisher::Start() { lane_.Start(); }

void SlicePublisher::Publish(const DeviceListPtr& list) {
  MutexLock lock(mu_);
  if (list_ && *list_ == *list) return;
  list_ = list;
  if (sync_queued_ || stopping_ || !options_.client) return;
  sync_queued_ = true;
  lane_.Post([this] { SyncOnLane(); });
}

void SlicePublisher::SetTaintEffect(const std::string& effect) {
  MutexLock lock(mu_);
  if (taint_effect_ == effect) return;
  taint_effect_ = effect;
  if (sync_queued_ || stopping_ || !options_.client || !list_) return;
  sync_queued_ = true;
  lane_.Post([this] { SyncOnLane(); });
}

void SlicePublisher::SetWithheld(std::set<std::string> ids) {
  MutexLock lock(mu_);
  if (withheld_ == ids && !awaiting_withheld_) return;
  withheld_ = std::move(ids);
  awaiting_withheld_ = false;
  if (sync_queued_ || stopping_ || !options_.client || !list_) return;
  sync_queued_ = true;
  lane_.Post([this] { SyncOnLane(); });
}

std::set<std::string> SlicePublisher::withheld() const {
  MutexLock lock(mu_);
  return withheld_;
}

void SlicePublisher::KubeletRegistered() {
  MutexLock lock(mu_);
  relist_ = true;
  if (std::exchange(awaiting_registration_, false)) {
    sync_error_.clear();
    if (list_)
      spdlog::info("resource \"{}\": DRA: the kubelet registered driver {}: publishing the slices",
                   options_.resource, options_.driver);
  }
  if (sync_queued_ || stopping_ || !options_.client || !list_) return;
  sync_queued_ = true;
  lane_.Post([this] { SyncOnLane(); });
}

void SlicePublisher::SetSuperseded(bool superseded) {
  MutexLock lock(mu_);
  if (std::exchange(superseded_, superseded) == superseded || superseded) return;
  // What the newer one wrote is listed and compared before any write.
  relist_ = true;
  if (sync_queued_ || stopping_ || !options_.client || !list_) return;
  sync_queued_ = true;
  lane_.Post([this] { SyncOnLane(); });
}

Clock::time_point SlicePublisher::NextRelist() const {
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

void SlicePublisher::SyncOnLane() {
  DeviceListPtr list;
  {
    MutexLock lock(mu_);
    sync_queued_ = false;
    if (stopping_ || !list_ || awaiting_withheld_) return;  // SetWithheld queues a sync
    if (awaiting_registration_) {                           // KubeletRegistered queues a sync
      sync_error_ = StrCat("holding the slices until the kubelet registers driver ",
                           options_.driver, " (it could not prepare a claim allocated from them)");
      return;
    }
    if (superseded_) {
      relist_ = true;  // whatever the newer one wrote meanwhile
      return;
    }
    list = list_;
    if (!withheld_.empty()) {
      auto kept = std::make_shared<DeviceList>();
      for (const Device& d : *list_)
        if (withheld_.count(d.id) == 0) kept->push_back(d);
      list = std::move(kept);
    }
    if (std::exchange(relist_, false)) listed_ = false;
  }
  if (held_ && !HoldOver()) return;
  Status st;
  try {
    st = Sync(*list);
  } catch (const Json::exception& e) {
    // A field of the wrong type in what the API server sent: this sync
    // fails and is retried; devplugd goes on.
    st = UnavailableError(StrCat("an answer of the API server is malformed: ", e.what()));
  }
  MutexLock lock(mu_);
  if (st.ok()) {
    backoff_ = std::chrono::milliseconds(0);
    lane_.WakeAt(options_.relist.count() > 0 && !stopping_
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
  // Jittered: a fleet whose API server went away does not come back in step.
  if (!stopping_) lane_.WakeAt(Clock::now() + Jittered(backoff_, jitter_()));
}

bool SlicePublisher::HoldOver() {
  const auto now = Clock::now();
  if (!held_since_) held_since_ = now;
  const auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(now - *held_since_).count();
  const std::string node_path = StrCat("/api/v1/nodes/", options_.node);
  auto node = options_.client->Get(node_path);
  std::string left;  // what the Node's allocatable says, while it is above 0
  if (node.ok()) {
    const Json status = node->is_object() ? node->value("status", Json::object()) : Json();
    const Json allocatable =
        status.is_object() ? status.value("allocatable", Json::object()) : Json::object();
    auto it = allocatable.is_object() ? allocatable.find(options_.hold_for) : allocatable.end();
    if (it != allocatable.end() && it->is_string() && it->get<std::string>() != "0")
      left = it->get<std::string>();
  }
  if (node.ok() && !left.empty() && !zero_refused_) {
    // Back above 0 after the hand-off: a post of the kubelet's from while
    // the device plugin served. Nothing serves the name that way now, so
    // 0 is what the kubelet's next post says too.
    auto written = options_.client->Update(StrCat(node_path, "/status"), [&](Json& n) {
      if (!n.is_object() || !n["status"].is_object() || !n["status"]["allocatable"].is_object() ||
          !n["status"]["allocatable"].contains(options_.hold_for))
        return Status(StatusCode::kFailedPrecondition, "no such allocatable");
      n["status"]["allocatable"][options_.hold_for] = "0";
      return OkStatus();
    });
    const StatusCode code = written.ok() ? StatusCode::kOk : written.status().code();
    if (code == StatusCode::kOk) {
      spdlog::info(
          "resource \"{}\": DRA: node {}'s allocatable {} read {} again after the hand-off (a "
          "status the kubelet posted while the device plugin served): set to 0",
          options_.resource, options_.node, options_.hold_for, left);
      left.clear();
    } else if (code != StatusCode::kUnavailable && code != StatusCode::kResourceExhausted &&
               code != StatusCode::kDeadlineExceeded && code != StatusCode::kAborted) {
      zero_refused_ = true;
      spdlog::warn(
          "resource \"{}\": DRA: cannot set node {}'s allocatable {} to 0 ({}): waiting for "
          "the kubelet to post it",
          options_.resource, options_.node, options_.hold_for, written.status().message());
    }
  }
  if (!node.ok()) {
    spdlog::warn(
        "resource \"{}\": DRA: cannot read node {} ({}); publishing the slices without waiting "
        "for its allocatable {} to read 0",
        options_.resource, options_.node, node.status().message(), options_.hold_for);
  } else if (left.empty()) {
    spdlog::info(
        "resource \"{}\": DRA: node {}'s allocatable {} reads 0 after {} ms: publishing the "
        "slices",
        options_.resource, options_.node, options_.hold_for, waited);
  } else if (waited >= options_.hold_max.count()) {
    spdlog::warn(
        "resource \"{}\": DRA: node {}'s allocatable {} still reads {} after {} ms; publishing "
        "the slices",
        options_.resource, options_.node, options_.hold_for, left, waited);
  } else {
    MutexLock lock(mu_);
    sync_error_ = StrCat("holding the slices until node ", options_.node, "'s allocatable ",
                         options_.hold_for, " reads 0 (it reads ", left,
                         "; the device plugin API served it before)");
    if (!stopping_) lane_.WakeAt(now + options_.hold_poll);
    return false;
  }
  held_ = false;
  MutexLock lock(mu_);
  sync_error_.clear();
  return true;
}

Status SlicePublisher::Sync(const DeviceList& list) {
  kube::Client& client = *options_.client;
  const kube::Selector mine = Mine(options_);
  if (!listed_) {
    auto existing = client.List(kSlices, mine);
    if (!existing.ok()) return existing.status();
    // A slice whose resourceVersion is still the one our own write got
    // keeps what we sent (the server may have added defaults): it is not
    // written again. Any other is compared as the server holds it.
    std::map<std::string, std::string> versions;
    std::map<std::string, Json> written;
    PoolSeen seen;
    for (const Json& item : (*existing)["items"]) {
      const Json meta = item.value("metadata", Json::object());
      const std::string name = meta.value("name", "");
      versions[name] = meta.value("resourceVersion", "");
      auto known = versions_.find(name);
      written[name] =
          known != versions_.end() && known->second == versions[name] && written_.count(name)
              ? written_[name]
              : item.value("spec", Json::object());
      seen.Add(item.value("spec", Json::object()));
    }
    {
      // Generations only grow. At the first list, a pool an earlier devplugd
      // left whole (one generation, every slice there, no device twice) is
      // taken over at its generation: where it already holds what we would
      // write, nothing is written (a restart of a fleet costs no writes),
      // and Layout moves the generation where slices or devices move. A
      // pool left half written is passed. Later, only a generation someone
      // else wrote past ours moves it.
      MutexLock lock(mu_);
      if (!ever_listed_ && seen.slices > 0)
        generation_ = std::max(generation_, seen.whole() ? seen.max : seen.max + 1);
      else if (seen.max > generation_)
        generation_ = seen.max + 1;
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
  std::set<std::string> wanted;
  for (Json& slice : Layout(list)) {
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
    CheckDropped(name, slice["spec"], done->value("spec", Json::object()));
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

std::vector<nlohmann::json> SlicePublisher::Layout(const DeviceList& list) {
  int64_t generation;
  UnhealthyTaint taint;
  {
    MutexLock lock(mu_);
    generation = generation_;
    taint.effect = taint_effect_;
  }
  Pool pool{options_.driver, options_.node, generation};
  // A taint keeps the time it was first added: ours, else the one on the
  // server (an earlier devplugd's), else now.
  std::map<std::string, std::string> since;
  for (const auto& [name, spec] : written_) {
    const Json listed = spec.value("devices", Json::array());
    if (!listed.is_array()) continue;
    for (const Json& d : listed) {
      const Json taints = d.is_object() ? d.value("taints", Json::array()) : Json::array();
      if (!taints.is_array()) continue;
      for (const Json& t : taints)
        if (t.is_object() && t.value("key", "") == kUnhealthyTaintKey &&
            t.value("timeAdded", Json()).is_string() && d.value("name", Json()).is_string())
          since[d["name"].get<std::string>()] = t["timeAdded"].get<std::string>();
    }
  }
  std::map<std::string, std::string> tainted;
  taint.time_added = [&](const std::string& device) {
    std::string at;
    if (auto it = tainted_since_.find(device); it != tainted_since_.end())
      at = it->second;
    else if (auto on = since.find(device); on != since.end())
      at = on->second;
    else
      at = UtcTime(std::chrono::system_clock::now());
    tainted[device] = at;
    return at;
  };
  std::vector<Json> devices = PoolDevices(list, taint);
  tainted_since_ = std::move(tainted);  // a device Healthy again starts afresh
  const size_t max = MaxDevicesPerSlice(devices);
  const size_t count = std::max<size_t>(1, (devices.size() + max - 1) / max);
  // Each device stays in the slice it was in, where that slice stays and
  // has room; the rest fill the first slices with room. A device that comes
  // or goes then moves no other.
  auto name_of = [](const Json& d) -> std::string {
    return d.is_object() && d.contains("name") && d["name"].is_string()
               ? d["name"].get<std::string>()
               : std::string();
  };
  std::map<std::string, std::string> was;  // device -> slice, as written
  for (const auto& [name, spec] : written_) {
    const Json listed = spec.value("devices", Json::array());
    if (listed.is_array())
      for (const Json& d : listed) was[name_of(d)] = name;
  }
  std::map<std::string, size_t> index;  // slice name -> index, for the slices kept
  for (size_t i = 0; i < count; ++i) index[SliceName(pool, i)] = i;
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> slice_of(devices.size(), kNone);
  std::vector<size_t> fill(count, 0);
  for (size_t k = 0; k < devices.size(); ++k) {
    auto w = was.find(name_of(devices[k]));
    if (w == was.end()) continue;
    auto at = index.find(w->second);
    if (at == index.end() || fill[at->second] >= max) continue;
    slice_of[k] = at->second;
    ++fill[at->second];
  }
  size_t next = 0;
  for (size_t k = 0; k < devices.size(); ++k) {
    if (slice_of[k] != kNone) continue;
    while (fill[next] >= max) ++next;
    slice_of[k] = next;
    ++fill[next];
  }
  // The generation moves when the set of slices does, or a device changes
  // slice; a pool with nothing written yet starts where it is.
  std::set<std::string> names_was, names_will;
  for (const auto& [name, spec] : written_) names_was.insert(name);
  for (const auto& [name, i] : index) names_will.insert(name);
  bool moved = !written_.empty() && names_was != names_will;
  for (size_t k = 0; k < devices.size() && !moved && !written_.empty(); ++k) {
    auto w = was.find(name_of(devices[k]));
    moved = w != was.end() && w->second != SliceName(pool, slice_of[k]);
  }
  if (moved) {
    MutexLock lock(mu_);
    pool.generation = ++generation_;
  }
  return Slices(pool, std::move(devices), slice_of, count);
}

void SlicePublisher::CheckDropped(const std::string& name, const Json& sent, const Json& stored) {
  // Keys we sent that the stored object lacks, by path (array elements
  // as "[]"); values the server normalised or defaults it added are fine.
  std::set<std::string> missing;
  auto walk = [&](auto& self, const Json& a, const Json& b, const std::string& at) -> void {
    if (a.is_object()) {
      if (!b.is_object()) return;
      for (const auto& [key, value] : a.items()) {
        const std::string path = at + "." + key;
        if (!b.contains(key))
          missing.insert(path);
        else
          self(self, value, b[key], path);
      }
    } else if (a.is_array() && b.is_array()) {
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) self(self, a[i], b[i], at + "[]");
    }
  };
  walk(walk, sent, stored, "spec");
  std::vector<std::string> fresh;
  {
    MutexLock lock(mu_);
    for (const std::string& path : missing)
      if (dropped_.insert(path).second) fresh.push_back(path);
  }
  if (!fresh.empty())
    spdlog::warn(
        "resource \"{}\": DRA: the API server dropped {} from ResourceSlice {}: it does not know "
        "the field (an older Kubernetes, or its feature gate is off), and the scheduler will not "
        "see it",
        options_.resource, StrJoin(fresh, ", "), name);
}

std::vector<std::string> SlicePublisher::dropped_fields() const {
  MutexLock lock(mu_);
  return {dropped_.begin(), dropped_.end()};
}

void SlicePublisher::RequestStop(bool delete_slices) {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  lane_.RequestStop([this, delete_slices] {
    if (!delete_slices || !options_.client) return;
    // Bounded: an API server that does not answer must not hold the exit.
    if (Status st =
            options_.client->DeleteCollection(kSlices, Mine(options_), options_.stop_timeout);
        !st.ok())
      spdlog::warn("resource \"{}\": DRA: deleting this node's ResourceSlices: {}",
                   options_.resource, st.message());
  });
}

bool SlicePublisher::WaitStopped(Clock::time_point deadline) { return lane_.WaitStopped(deadline); }

uint64_t SlicePublisher::syncs() const {
  MutexLock lock(mu_);
  return syncs_;
}

std::string SlicePublisher::sync_error() const {
  MutexLock lock(mu_);
  return sync_error_;
}

int64_t SlicePublisher::generation() const {
  MutexLock lock(mu_);
  return generation_;
}

}  // namespace devplug::dra
