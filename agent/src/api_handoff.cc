#include "api_handoff.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <utility>

#include <spdlog/spdlog.h>

namespace devplug {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const Json& At(const Json& object, const char* key) {
  static const Json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::string Text(const Json& value) { return value.is_string() ? value.get<std::string>() : ""; }

bool Asks(const Json& container, const std::string& name) {
  const Json& resources = At(container, "resources");
  for (const char* key : {"limits", "requests"}) {
    const Json& list = At(resources, key);
    if (list.is_object() && list.contains(name)) return true;
  }
  return false;
}

// The pods of a PodList that are neither finished nor being deleted.
std::vector<Json> Unfinished(const Json& pods) {
  std::vector<Json> out;
  const Json& items = At(pods, "items");
  if (!items.is_array()) return out;
  for (const Json& pod : items) {
    const std::string phase = Text(At(At(pod, "status"), "phase"));
    if (phase != "Succeeded" && phase != "Failed" &&
        At(At(pod, "metadata"), "deletionTimestamp").is_null())
      out.push_back(pod);
  }
  return out;
}

std::string Joined(const std::set<std::string>& pods) {
  std::vector<std::string> v(pods.begin(), pods.end());
  return StrJoin(v, ", ");
}

}  // namespace

std::vector<std::string> ZeroAllocatable(Json& node, const std::vector<std::string>& names) {
  std::vector<std::string> changed;
  if (!node.is_object() || !node["status"].is_object()) return changed;
  Json& allocatable = node["status"]["allocatable"];
  if (!allocatable.is_object()) return changed;
  for (const std::string& name : names) {
    auto it = allocatable.find(name);
    if (it == allocatable.end() || !it->is_string() || it->get<std::string>() == "0") continue;
    changed.push_back(StrCat(name, " (was ", it->get<std::string>(), ")"));
    *it = "0";
  }
  return changed;
}

std::set<std::string> AskingDevicePlugin(const Json& pods, const std::vector<std::string>& names) {
  std::set<std::string> out;
  for (const Json& pod : Unfinished(pods)) {
    const Json& meta = At(pod, "metadata");
    const Json& status = At(pod, "status");
    // (container, name) pairs the scheduler serves through a claim.
    std::set<std::pair<std::string, std::string>> mapped;
    const Json& mappings = At(At(status, "extendedResourceClaimStatus"), "requestMappings");
    if (mappings.is_array())
      for (const Json& m : mappings)
        mapped.emplace(Text(At(m, "containerName")), Text(At(m, "resourceName")));
    bool asks = false;
    const Json& spec = At(pod, "spec");
    for (const char* list : {"initContainers", "containers"}) {
      const Json& containers = At(spec, list);
      if (!containers.is_array()) continue;
      for (const Json& c : containers)
        for (const std::string& name : names)
          asks |= Asks(c, name) && !mapped.count({Text(At(c, "name")), name});
    }
    if (asks) out.insert(StrCat(Text(At(meta, "namespace")), "/", Text(At(meta, "name"))));
  }
  return out;
}

std::set<std::string> HoldingDevices(const PodSnapshot& snapshot,
                                     const std::vector<std::string>& names) {
  std::set<std::string> out;
  for (const std::string& name : names) {
    auto it = snapshot.holders.find(name);
    if (it == snapshot.holders.end()) continue;
    for (const auto& [id, h] : it->second) out.insert(StrCat(h.pod_namespace, "/", h.pod_name));
  }
  return out;
}

std::set<std::string> UnpreparedClaims(const Json& pods, const std::set<std::string>& prepared) {
  std::set<std::string> out;
  for (const Json& pod : Unfinished(pods)) {
    const Json& meta = At(pod, "metadata");
    const Json& status = At(pod, "status");
    const std::string ns = Text(At(meta, "namespace"));
    std::set<std::string> names;
    const Json& statuses = At(status, "resourceClaimStatuses");
    if (statuses.is_array())
      for (const Json& st : statuses) names.insert(Text(At(st, "resourceClaimName")));
    const Json& claims = At(At(pod, "spec"), "resourceClaims");
    if (claims.is_array())
      for (const Json& c : claims) names.insert(Text(At(c, "resourceClaimName")));
    names.insert(Text(At(At(status, "extendedResourceClaimStatus"), "resourceClaimName")));
    names.erase("");
    for (const std::string& name : names)
      if (std::string key = StrCat(ns, "/", name); !prepared.count(key)) out.insert(key);
  }
  return out;
}

bool AllocatedFrom(const Json& claim, const std::string& driver, const std::string& pool) {
  const Json& results = At(At(At(At(claim, "status"), "allocation"), "devices"), "results");
  if (!results.is_array()) return false;
  return std::any_of(results.begin(), results.end(), [&](const Json& r) {
    return Text(At(r, "driver")) == driver && Text(At(r, "pool")) == pool;
  });
}

void HandoffThread::Begin(std::function<void()> run) { thread_ = std::thread(std::move(run)); }

void HandoffThread::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool HandoffThread::Sleep(std::chrono::milliseconds d) {
  const auto until = Clock::now() + d;
  MutexLock lock(mu_);
  while (!stop_ && Clock::now() < until) cv_.wait_until(mu_, until);
  return !stop_;
}

bool HandoffThread::Stopped() {
  MutexLock lock(mu_);
  return stop_;
}

static kube::Client::Options ClientOptions(const kube::Credentials& credentials,
                                           std::chrono::milliseconds timeout) {
  kube::Client::Options o;
  o.credentials = credentials;
  o.timeout = timeout;
  return o;
}

namespace {

// An error worth asking again: the API server busy (429, API Priority and
// Fairness), away (a connection refused, a 5xx), slow, or conflicts that
// outlasted the client's retries.
bool Transient(StatusCode code) {
  return code == StatusCode::kUnavailable || code == StatusCode::kResourceExhausted ||
         code == StatusCode::kDeadlineExceeded || code == StatusCode::kAborted;
}

}  // namespace

DevicePluginHandoff::DevicePluginHandoff(Options options,
                                         std::shared_ptr<kubelet::PodResourcesClient> pods,
                                         Done done)
    : options_(std::move(options)), pods_(std::move(pods)), done_(std::move(done)) {
  Begin([this] {
    Result result = Hand();
    if (!Stopped()) done_(std::move(result));
  });
}

DevicePluginHandoff::~DevicePluginHandoff() { Stop(); }

DevicePluginHandoff::Result DevicePluginHandoff::Hand() {
  const auto start = Clock::now();
  Result result;
  auto finish = [&](Status st) { return Finish(std::move(result), std::move(st), start); };
  kube::Client client(ClientOptions(options_.credentials, options_.call_timeout));
  const std::string names = StrJoin(options_.names, ", ");
  const std::string status_path = StrCat("/api/v1/nodes/", options_.node, "/status");
  std::set<std::string> waited;  // every pod it waited for, once
  std::set<std::string> pending;
  // Since when the allocatable reads 0 (nullopt: no write got through yet).
  std::optional<Clock::time_point> zeroed;
  std::string failing;  // the last write's transient error, said once
  while (true) {
    std::vector<std::string> changed;
    auto written = client.Update(status_path, [&](Json& node) {
      changed = ZeroAllocatable(node, options_.names);
      return changed.empty() ? Status(StatusCode::kAlreadyExists, "already 0") : OkStatus();
    });
    const StatusCode code = written.ok() ? StatusCode::kOk : written.status().code();
    if (code == StatusCode::kOk || code == StatusCode::kAlreadyExists) {
      if (code == StatusCode::kOk || !zeroed) zeroed = Clock::now();
      if (code == StatusCode::kOk)
        spdlog::info(
            "moving {} to DRA: node {}'s allocatable set to 0 for {}, so that the scheduler "
            "sends no more pods through the device plugin API",
            names, options_.node, StrJoin(changed, ", "));
      failing.clear();
    } else if (!Transient(code)) {
      return finish(Status(code, StrCat("cannot set node ", options_.node,
                                        "'s allocatable to 0: ", written.status().message())));
    } else {
      // The API server is busy or away for a moment: asked again at the
      // next poll, until max_wait.
      if (failing != written.status().message())
        spdlog::warn("moving {} to DRA: node {}'s allocatable: {}; trying again", names,
                     options_.node, written.status().message());
      failing = std::string(written.status().message());
      if (!zeroed) pending = {StrCat("(node ", options_.node, "'s allocatable: ", failing, ")")};
    }
    if (zeroed && Clock::now() - *zeroed >= options_.settle) {
      auto listed = client.List("/api/v1/pods", {StrCat("spec.nodeName=", options_.node), ""});
      auto snapshot = pods_->Get(std::chrono::milliseconds(0));
      if (snapshot.ok()) result.pods = *snapshot;
      if (!listed.ok()) {
        pending = {StrCat("(the pods of node ", options_.node,
                          " cannot be listed: ", listed.status().message(), ")")};
      } else if (!snapshot.ok()) {
        pending = {StrCat("(PodResources: ", snapshot.status().message(), ")")};
      } else {
        const std::set<std::string> asking = AskingDevicePlugin(*listed, options_.names);
        const std::set<std::string> holding = HoldingDevices(**snapshot, options_.names);
        pending.clear();
        std::set_difference(asking.begin(), asking.end(), holding.begin(), holding.end(),
                            std::inserter(pending, pending.end()));
        waited.insert(pending.begin(), pending.end());
        if (pending.empty()) {
          result.admitted_waited = static_cast<int>(waited.size());
          return finish(OkStatus());
        }
      }
    }
    if (Clock::now() - start >= options_.max_wait)
      return finish(Status(StatusCode::kDeadlineExceeded,
                           StrCat("still waiting after ", options_.max_wait.count(),
                                  " ms for the kubelet to admit ", Joined(pending))));
    if (!Sleep(options_.poll)) return finish(Status(StatusCode::kCancelled, "cancelled"));
  }
}

DraHandoff::DraHandoff(Options options, Prepared prepared, Close close, Done done)
    : options_(std::move(options)),
      prepared_(std::move(prepared)),
      close_(std::move(close)),
      done_(std::move(done)) {
  Begin([this] { Run(); });
}

DraHandoff::~DraHandoff() { Stop(); }

void DraHandoff::Run() {
  Result result = Wait();
  if (Stopped()) return;  // the agent stops: nothing more is prepared or registered
  // New claims are refused from here on, after every prepare asked for
  // before: the claims the DRA side holds are all there is. The flag lives
  // apart from this object: the preparer's thread may set it after the
  // wait gave up.
  struct Closed {
    Mutex mu;
    std::condition_variable_any cv;
    bool done DEVPLUG_GUARDED_BY(mu) = false;
  };
  auto closed = std::make_shared<Closed>();
  close_([closed] {
    {
      MutexLock lock(closed->mu);
      closed->done = true;
    }
    closed->cv.notify_all();
  });
  const auto until = Clock::now() + options_.call_timeout;
  bool done = false;
  while (!done && Clock::now() < until) {
    if (Stopped()) return;
    MutexLock lock(closed->mu);
    closed->cv.wait_until(closed->mu, std::min(until, Clock::now() + options_.poll));
    done = closed->done;
  }
  if (!done && result.status.ok())
    result.status = Status(StatusCode::kDeadlineExceeded,
                           StrCat("the claim preparer did not close within ",
                                  options_.call_timeout.count(), " ms (a prepare still runs)"));
  if (!Stopped()) done_(std::move(result));
}

DraHandoff::Result DraHandoff::Wait() {
  const auto start = Clock::now();
  Result result;
  auto finish = [&](Status st) { return Finish(std::move(result), std::move(st), start); };
  kube::Client client(ClientOptions(options_.credentials, options_.call_timeout));
  std::set<std::string> waited, pending;
  std::string error;
  if (!Sleep(options_.settle)) return finish(Status(StatusCode::kCancelled, "cancelled"));
  while (true) {
    pending.clear();
    error.clear();
    auto listed = client.List("/api/v1/pods", {StrCat("spec.nodeName=", options_.node), ""});
    if (!listed.ok()) {
      error = StrCat("the pods of node ", options_.node,
                     " cannot be listed: ", listed.status().message());
      if (listed.status().code() == StatusCode::kPermissionDenied)
        return finish(Status(listed.status().code(), error));
    } else {
      for (const std::string& key : UnpreparedClaims(*listed, prepared_())) {
        const size_t slash = key.find('/');
        auto claim = client.Get(StrCat("/apis/resource.k8s.io/v1/namespaces/", key.substr(0, slash),
                                       "/resourceclaims/", key.substr(slash + 1)));
        if (claim.ok() ? AllocatedFrom(*claim, options_.driver, options_.node)
                       : claim.status().code() != StatusCode::kNotFound)
          pending.insert(key);
      }
      // Prepared since it was listed: not waited for any more.
      const std::set<std::string> now_prepared = prepared_();
      for (auto it = pending.begin(); it != pending.end();)
        it = now_prepared.count(*it) ? pending.erase(it) : std::next(it);
      waited.insert(pending.begin(), pending.end());
      if (pending.empty()) {
        result.prepared_waited = static_cast<int>(waited.size());
        return finish(OkStatus());
      }
    }
    if (Clock::now() - start >= options_.max_wait)
      return finish(
          Status(StatusCode::kDeadlineExceeded,
                 StrCat("still waiting after ", options_.max_wait.count(), " ms for ",
                        error.empty() ? StrCat("the kubelet to prepare claim(s) ", Joined(pending))
                                      : error)));
    if (!Sleep(options_.poll)) return finish(Status(StatusCode::kCancelled, "cancelled"));
  }
}

}  // namespace devplug
