#include "ops/metrics.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include <prometheus/text_serializer.h>

namespace devplug::ops {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

uint64_t Load(const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); }
size_t Index(Rpc rpc) { return static_cast<size_t>(rpc); }

ClientMetric Sample(std::vector<ClientMetric::Label> labels, MetricType type, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (type == MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  return m;
}

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = "devplug_" + std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

}  // namespace

std::string_view ScanCauseName(ScanCause cause) {
  static constexpr std::string_view kNames[] = {"start", "event", "resync", "module", "path"};
  return kNames[static_cast<size_t>(cause)];
}

std::string_view ReleaseResultName(ReleaseResult result) {
  static constexpr std::string_view kNames[] = {"released", "busy", "failed"};
  return kNames[static_cast<size_t>(result)];
}

void ResourceMetrics::Rpc(ops::Rpc rpc, StatusCode code, std::chrono::nanoseconds took) {
  const size_t r = Index(rpc);
  const size_t c = std::min(static_cast<size_t>(code), kCodes - 1);
  requests_[r][c].fetch_add(1, std::memory_order_relaxed);
  const double seconds = std::chrono::duration<double>(took).count();
  const size_t b = static_cast<size_t>(
      std::lower_bound(kRpcBuckets.begin(), kRpcBuckets.end(), seconds) - kRpcBuckets.begin());
  buckets_[r][b].fetch_add(1, std::memory_order_relaxed);
  sum_ns_[r].fetch_add(static_cast<uint64_t>(std::max<int64_t>(took.count(), 0)),
                       std::memory_order_relaxed);
}

void ResourceMetrics::Devices(uint64_t healthy, uint64_t unhealthy) {
  healthy_.store(healthy, std::memory_order_relaxed);
  unhealthy_.store(unhealthy, std::memory_order_relaxed);
}

void ResourceMetrics::Transitions(uint64_t to_healthy, uint64_t to_unhealthy) {
  to_healthy_.fetch_add(to_healthy, std::memory_order_relaxed);
  to_unhealthy_.fetch_add(to_unhealthy, std::memory_order_relaxed);
}

Metrics::Metrics(std::string version, std::string abi)
    : version_(std::move(version)), abi_(std::move(abi)) {}

std::shared_ptr<ResourceMetrics> Metrics::Add(const std::string& resource) {
  auto m = std::make_shared<ResourceMetrics>(resource);
  MutexLock lock(mu_);
  resources_.push_back(m);
  return m;
}

void Metrics::Remove(const std::shared_ptr<ResourceMetrics>& resource) {
  MutexLock lock(mu_);
  std::erase(resources_, resource);
}

void Metrics::Adopt(const std::shared_ptr<ResourceMetrics>& resource,
                    const std::shared_ptr<ResourceMetrics>& replacing) {
  if (replacing) resource->CarryCounters(*replacing);
  MutexLock lock(mu_);
  auto it =
      replacing ? std::find(resources_.begin(), resources_.end(), replacing) : resources_.end();
  if (it != resources_.end())
    *it = resource;
  else if (std::find(resources_.begin(), resources_.end(), resource) == resources_.end())
    resources_.push_back(resource);
}

void ResourceMetrics::CarryCounters(const ResourceMetrics& old) {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  auto add = [](std::atomic<uint64_t>& to, const std::atomic<uint64_t>& from) {
    to.fetch_add(from.load(kRelaxed), kRelaxed);
  };
  add(registrations_, old.registrations_);
  add(refusals_, old.refusals_);
  add(to_healthy_, old.to_healthy_);
  add(to_unhealthy_, old.to_unhealthy_);
  for (size_t i = 0; i < rescans_.size(); ++i) add(rescans_[i], old.rescans_[i]);
  for (size_t i = 0; i < releases_.size(); ++i) add(releases_[i], old.releases_[i]);
  for (size_t r = 0; r < kRpcs; ++r) {
    for (size_t c = 0; c < kCodes; ++c) add(requests_[r][c], old.requests_[r][c]);
    for (size_t b = 0; b < buckets_[r].size(); ++b) add(buckets_[r][b], old.buckets_[r][b]);
    add(sum_ns_[r], old.sum_ns_[r]);
  }
}

void Metrics::Uevent(std::string_view subsystem) {
  MutexLock lock(mu_);
  auto it = uevents_.find(subsystem);
  if (it == uevents_.end()) it = uevents_.emplace(std::string(subsystem), 0).first;
  ++it->second;
}

std::vector<MetricFamily> Metrics::Collect() const {
  std::vector<std::shared_ptr<ResourceMetrics>> resources;
  std::map<std::string, uint64_t, std::less<>> uevents;
  {
    MutexLock lock(mu_);
    resources = resources_;
    uevents = uevents_;
  }
  std::vector<MetricFamily> out;
  auto build = Family("build_info", "devplugd's version and module ABI", MetricType::Gauge);
  build.metric.push_back(Sample({{"abi", abi_}, {"version", version_}}, MetricType::Gauge, 1));
  out.push_back(std::move(build));

  auto registered =
      Family("resource_registered", "1 while the kubelet accepts the resource's registration",
             MetricType::Gauge);
  auto devices = Family("devices", "Devices of each resource by health", MetricType::Gauge);
  auto transitions = Family("health_transitions_total", "Devices that turned Healthy or Unhealthy",
                            MetricType::Counter);
  auto registrations =
      Family("registrations_total", "Registrations the kubelet accepted", MetricType::Counter);
  auto refusals = Family("registration_refusals_total",
                         "Registrations the kubelet's plugin watcher refused "
                         "(NotifyRegistrationStatus with an error; the log has the reason)",
                         MetricType::Counter);
  auto requests = Family("rpc_requests_total", "Kubelet calls by method and gRPC status code",
                         MetricType::Counter);
  auto durations = Family("rpc_duration_seconds",
                          "How long Allocate, GetPreferredAllocation and PreStartContainer took",
                          MetricType::Histogram);
  auto rescans = Family("rescans_total", "Device scans by what caused them", MetricType::Counter);
  auto releases =
      Family("releases_total", "Device releases (on_release) by result", MetricType::Counter);
  for (const auto& r : resources) {
    const ClientMetric::Label res{"resource", r->name()};
    registered.metric.push_back(Sample({res}, MetricType::Gauge, double(Load(r->registered_))));
    devices.metric.push_back(
        Sample({{"health", "Healthy"}, res}, MetricType::Gauge, double(Load(r->healthy_))));
    devices.metric.push_back(
        Sample({{"health", "Unhealthy"}, res}, MetricType::Gauge, double(Load(r->unhealthy_))));
    transitions.metric.push_back(
        Sample({res, {"to", "Healthy"}}, MetricType::Counter, double(Load(r->to_healthy_))));
    transitions.metric.push_back(
        Sample({res, {"to", "Unhealthy"}}, MetricType::Counter, double(Load(r->to_unhealthy_))));
    registrations.metric.push_back(
        Sample({res}, MetricType::Counter, double(Load(r->registrations_))));
    refusals.metric.push_back(Sample({res}, MetricType::Counter, double(Load(r->refusals_))));
    for (size_t c = 0; c < static_cast<size_t>(ScanCause::kCount); ++c)
      rescans.metric.push_back(
          Sample({{"cause", std::string(ScanCauseName(static_cast<ScanCause>(c)))}, res},
                 MetricType::Counter, double(Load(r->rescans_[c]))));
    for (size_t k = 0; k < static_cast<size_t>(ReleaseResult::kCount); ++k)
      releases.metric.push_back(
          Sample({res, {"result", std::string(ReleaseResultName(static_cast<ReleaseResult>(k)))}},
                 MetricType::Counter, double(Load(r->releases_[k]))));
    for (size_t rpc = 0; rpc < ResourceMetrics::kRpcs; ++rpc) {
      const ClientMetric::Label method{"rpc", std::string(RpcName(static_cast<Rpc>(rpc)))};
      for (size_t c = 0; c < ResourceMetrics::kCodes; ++c) {
        const uint64_t n = Load(r->requests_[rpc][c]);
        if (n == 0) continue;  // only codes that happened
        requests.metric.push_back(
            Sample({{"code", std::string(StatusCodeName(static_cast<StatusCode>(c)))}, res, method},
                   MetricType::Counter, double(n)));
      }
      // Durations of the calls a module answers; ListAndWatch lasts as long
      // as the kubelet stays, GetDevicePluginOptions takes no time.
      if (rpc == Index(Rpc::kListAndWatch) || rpc == Index(Rpc::kGetDevicePluginOptions)) continue;
      ClientMetric h;
      h.label = {res, method};
      uint64_t cumulative = 0;
      for (size_t b = 0; b < kRpcBuckets.size(); ++b) {
        cumulative += Load(r->buckets_[rpc][b]);
        h.histogram.bucket.push_back({cumulative, kRpcBuckets[b]});
      }
      cumulative += Load(r->buckets_[rpc][kRpcBuckets.size()]);
      h.histogram.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
      h.histogram.sample_count = cumulative;
      h.histogram.sample_sum = double(Load(r->sum_ns_[rpc])) / 1e9;
      durations.metric.push_back(std::move(h));
    }
  }
  for (auto* f : {&registered, &devices, &transitions, &registrations, &refusals, &requests,
                  &durations, &rescans, &releases})
    out.push_back(std::move(*f));

  auto restarts = Family("kubelet_restarts_total", "kubelet.sock created anew after our start",
                         MetricType::Counter);
  restarts.metric.push_back(Sample({}, MetricType::Counter, double(Load(kubelet_restarts_))));
  out.push_back(std::move(restarts));
  auto events =
      Family("uevents_total", "Kernel or udev events received, by subsystem", MetricType::Counter);
  for (const auto& [subsystem, n] : uevents)
    events.metric.push_back(Sample({{"subsystem", subsystem}}, MetricType::Counter, double(n)));
  out.push_back(std::move(events));
  auto reloads =
      Family("reloads_total", "Configuration reloads (SIGHUP) by result", MetricType::Counter);
  reloads.metric.push_back(
      Sample({{"result", "ok"}}, MetricType::Counter, double(Load(reloads_ok_))));
  reloads.metric.push_back(
      Sample({{"result", "failed"}}, MetricType::Counter, double(Load(reloads_failed_))));
  out.push_back(std::move(reloads));
  return out;
}

std::string Metrics::Text() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, Collect());
  return out.str();
}

}  // namespace devplug::ops
