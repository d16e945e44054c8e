// libFuzzer target: Allocate and GetPreferredAllocation as the kubelet sends
// them, through the real DevicePluginService over a Unix socket, into a
// module instance (the fake_full test module: an allocate hook that defers
// to the default recipes for one ID, a preferred_allocation hook, one
// unhealthy device). Every request gets an answer of the right shape or a
// clean INVALID_ARGUMENT; nothing crashes, leaks or hangs.
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include "config/config.h"
#include "kubelet/device_plugin_service.h"
#include "kubelet/stream_hub.h"
#include "modules/loaded_module.h"
#include "modules/module_instance.h"
#include "util/timers.h"

namespace {

struct World {
  std::unique_ptr<devplug::modules::ModuleInstance> instance;
  std::unique_ptr<devplug::kubelet::StreamHub> hub;
  std::unique_ptr<devplug::Timers> timers;
  std::unique_ptr<devplug::kubelet::DevicePluginService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
};

World* Setup() {
  auto* w = new World();
  auto module = devplug::modules::LoadedModule::Load(DEVPLUG_FUZZ_FAKE_MODULE);
  if (!module.ok()) std::abort();
  auto cfg = devplug::config::LoadString(
      "[[resource]]\nname = \"fuzz.example/dev\"\nmodule = \"fake\"\ncount = 8\n"
      "unhealthy = [\"fake-3\"]\ndefault_for = \"fake-1\"\n",
      "fuzz", {});
  auto inst = devplug::modules::ModuleInstance::Create(*module, cfg->resources[0], {});
  if (!inst.ok()) std::abort();
  w->instance = std::move(*inst);
  w->hub = std::make_unique<devplug::kubelet::StreamHub>(nullptr);
  w->timers = std::make_unique<devplug::Timers>();
  w->service = std::make_unique<devplug::kubelet::DevicePluginService>(
      w->instance.get(), w->hub.get(), w->timers.get(), std::chrono::seconds(10));
  const std::string socket = "/tmp/devplug-fuzz-" + std::to_string(getpid()) + ".sock";
  grpc::ServerBuilder b;
  b.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  b.RegisterService(w->service.get());
  w->server = b.BuildAndStart();
  if (!w->server) std::abort();
  w->stub = v1beta1::DevicePlugin::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  return w;
}

// The kubelet (Go protobuf) only sends valid UTF-8; other bytes are
// rejected by protobuf parsing before any of our code runs.
bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    i += len;
  }
  return true;
}

bool AllValid(const google::protobuf::RepeatedPtrField<std::string>& ids) {
  for (const auto& id : ids)
    if (!ValidUtf8(id)) return false;
  return true;
}

std::string Id(FuzzedDataProvider& p) {
  switch (p.ConsumeIntegralInRange(0, 3)) {
    case 0: return p.ConsumeRandomLengthString(80);
    default: return "fake-" + std::to_string(p.ConsumeIntegralInRange(0, 9));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = Setup();
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 is logged, not fatal
    return true;
  }();
  (void)quiet;
  FuzzedDataProvider p(data, size);
  if (p.ConsumeBool()) {
    v1beta1::AllocateRequest req;
    const int containers = p.ConsumeIntegralInRange(0, 4);
    for (int c = 0; c < containers; ++c) {
      auto* cr = req.add_container_requests();
      const int n = p.ConsumeIntegralInRange(0, 10);
      for (int i = 0; i < n; ++i) cr->add_devices_ids(Id(p));
    }
    bool valid = true;
    for (const auto& c : req.container_requests()) valid = valid && AllValid(c.devices_ids());
    v1beta1::AllocateResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = world->stub->Allocate(&ctx, req, &resp);
    if (!valid) return 0;  // refused by protobuf itself; it only must not crash us
    if (st.ok()) {
      if (resp.container_responses_size() != containers) std::abort();
    } else if (st.error_code() != grpc::StatusCode::INVALID_ARGUMENT) {
      std::abort();
    }
  } else {
    v1beta1::PreferredAllocationRequest req;
    auto* cr = req.add_container_requests();
    const int n = p.ConsumeIntegralInRange(0, 12);
    for (int i = 0; i < n; ++i) cr->add_available_deviceids(Id(p));
    const int m = p.ConsumeIntegralInRange(0, 4);
    for (int i = 0; i < m; ++i) cr->add_must_include_deviceids(Id(p));
    const int32_t want = p.ConsumeIntegralInRange<int32_t>(-2, 16);
    cr->set_allocation_size(want);
    const bool valid = AllValid(cr->available_deviceids()) && AllValid(cr->must_include_deviceids());
    v1beta1::PreferredAllocationResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = world->stub->GetPreferredAllocation(&ctx, req, &resp);
    if (!valid) return 0;
    if (!st.ok() || resp.container_responses_size() != 1) std::abort();
    if (resp.container_responses(0).deviceids_size() > std::max(want, 0)) std::abort();
  }
  return 0;
}
