// devplugd's metrics (docs/design.md, "Reload, status, metrics"): plain atomics written on the
// hot paths (gRPC reactors, module workers, the main loop) without a lock,
// read and turned into Prometheus metric families only when scraped. Served
// over HTTP by prometheus-cpp's exposer ([agent] metrics_address) and as text
// over the control socket (devplugctl metrics).
//
// Thread safety: every method is thread-safe. The per-resource counters are
// lock-free; adding and removing resources takes a mutex (start and reload
// only).
#pragma once

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <prometheus/collectable.h>

#include "model/rpc.h"
#include "model/scan_cause.h"
#include "modules/hooks.h"
#include "util/mutex.h"
#include "util/status.h"

namespace devplug::ops {

using devplug::Rpc;
using devplug::ScanCause;
enum class ReleaseResult : size_t { kReleased, kBusy, kFailed, kCount };

using devplug::RpcName;
std::string_view ScanCauseName(ScanCause cause);
std::string_view ReleaseResultName(ReleaseResult result);

// Upper bounds of rpc_duration_seconds, 50 us to 10 s.
inline constexpr std::array<double, 17> kRpcBuckets = {
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
    50e-3, 100e-3, 250e-3, 500e-3, 1.0,  2.5,    5.0,  10.0};

// One resource's series. Shared by everything that counts for it; its
// series disappear when the agent removes it (a reload took it away).
class ResourceMetrics final : public RpcObserver, public modules::InstanceObserver {
 public:
  explicit ResourceMetrics(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }

  void Rpc(devplug::Rpc rpc, StatusCode code, std::chrono::nanoseconds took) override;
  void Registered(bool on) { registered_.store(on ? 1 : 0, std::memory_order_relaxed); }
  void Registration() { registrations_.fetch_add(1, std::memory_order_relaxed); }
  // The kubelet's plugin watcher refused a registration
  // (NotifyRegistrationStatus without plugin_registered).
  void RegistrationRefused() { refusals_.fetch_add(1, std::memory_order_relaxed); }
  void Devices(uint64_t healthy, uint64_t unhealthy);
  void Transitions(uint64_t to_healthy, uint64_t to_unhealthy);
  void Rescan(ScanCause cause) { rescans_[Index(cause)].fetch_add(1, std::memory_order_relaxed); }
  void Release(ReleaseResult result, uint64_t n) {
    releases_[Index(result)].fetch_add(n, std::memory_order_relaxed);
  }
  // What the module instance reports (modules::InstanceObserver).
  void Scanned(ScanCause cause) override { Rescan(cause); }
  void Health(uint64_t healthy, uint64_t unhealthy, uint64_t to_healthy,
              uint64_t to_unhealthy) override {
    Devices(healthy, unhealthy);
    Transitions(to_healthy, to_unhealthy);
  }
  void Released(int rc, size_t n) override {
    Release(rc == 0         ? ReleaseResult::kReleased
            : rc == -EAGAIN ? ReleaseResult::kBusy
                            : ReleaseResult::kFailed,
            n);
  }
  // Adds `old`'s counters (not its gauges) to these.
  void CarryCounters(const ResourceMetrics& old);

 private:
  friend class Metrics;
  template <typename E>
  static size_t Index(E e) {
    return static_cast<size_t>(e);
  }
  static constexpr size_t kRpcs = static_cast<size_t>(Rpc::kCount);
  static constexpr size_t kCodes = 17;  // gRPC's status codes

  const std::string name_;
  std::atomic<uint64_t> registered_{0}, registrations_{0}, refusals_{0};
  std::atomic<uint64_t> healthy_{0}, unhealthy_{0};
  std::atomic<uint64_t> to_healthy_{0}, to_unhealthy_{0};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(ScanCause::kCount)> rescans_{};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(ReleaseResult::kCount)> releases_{};
  std::array<std::array<std::atomic<uint64_t>, kCodes>, kRpcs> requests_{};
  // Per RPC: one counter per bucket (not cumulative; summed when read), the
  // count beyond the last bound, and the sum in nanoseconds.
  std::array<std::array<std::atomic<uint64_t>, kRpcBuckets.size() + 1>, kRpcs> buckets_{};
  std::array<std::atomic<uint64_t>, kRpcs> sum_ns_{};
};

class Metrics : public prometheus::Collectable {
 public:
  Metrics(std::string version, std::string abi);

  // A resource's series, listed until Remove (or the agent's end).
  std::shared_ptr<ResourceMetrics> Add(const std::string& resource);
  void Remove(const std::shared_ptr<ResourceMetrics>& resource);
  // Lists series made apart (a reload's new resource, counted from its
  // create() on but not exported while the reload may still fail). With
  // `replacing` (the resource it restarts), that one's counters carry over
  // into `resource` and it takes its place: one series per resource, and
  // counters never go back.
  void Adopt(const std::shared_ptr<ResourceMetrics>& resource,
             const std::shared_ptr<ResourceMetrics>& replacing = nullptr);

  void Uevent(std::string_view subsystem);
  void KubeletRestart() { kubelet_restarts_.fetch_add(1, std::memory_order_relaxed); }
  void Reload(bool ok) {
    (ok ? reloads_ok_ : reloads_failed_).fetch_add(1, std::memory_order_relaxed);
  }

  std::vector<prometheus::MetricFamily> Collect() const override;
  // The Prometheus text exposition of Collect().
  std::string Text() const;

 private:
  const std::string version_, abi_;
  mutable Mutex mu_;
  std::vector<std::shared_ptr<ResourceMetrics>> resources_ DEVPLUG_GUARDED_BY(mu_);
  std::map<std::string, uint64_t, std::less<>> uevents_ DEVPLUG_GUARDED_BY(mu_);
  std::atomic<uint64_t> kubelet_restarts_{0}, reloads_ok_{0}, reloads_failed_{0};
};

}  // namespace devplug::ops
