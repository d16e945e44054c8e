// libFuzzer target: Allocate and GetPreferredAllocation as the kubelet sends
// them, through the real DevicePluginService over a Unix socket, into a
// module instance (the fake_full test module: an allocate hook that defers
// to the default recipes for one ID, a preferred_allocation hook, one
// unhealthy device). Every request protobuf accepts gets an answer of the
// right shape or a clean INVALID_ARGUMENT; one it refuses gets an error;
// nothing crashes, leaks or hangs.
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include "config/config.h"
#include "device_plugin/device_plugin_service.h"
#include "device_plugin/stream_hub.h"
#include "modules/loaded_module.h"
#include "modules/module_instance.h"
#include "util/timers.h"

namespace {

struct World {
  std::unique_ptr<devplug::modules::ModuleInstance> instance;
  std::unique_ptr<devplug::device_plugin::StreamHub> hub;
  std::unique_ptr<devplug::Timers> timers;
  std::unique_ptr<devplug::device_plugin::DevicePluginService> service;
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
  if (!cfg.ok()) std::abort();
  auto inst = devplug::modules::ModuleInstance::Create(*module, cfg->resources[0], {});
  if (!inst.ok()) std::abort();
  w->instance = std::move(*inst);
  w->hub = std::make_unique<devplug::device_plugin::StreamHub>(nullptr);
  w->timers = std::make_unique<devplug::Timers>();
  w->service = std::make_unique<devplug::device_plugin::DevicePluginService>(
      w->instance.get(), w->hub.get(), w->timers.get(), std::chrono::seconds(10),
      std::chrono::seconds(28));
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

// Whether protobuf itself accepts the request: the server parses exactly
// what the client serialised, and proto3 string fields are checked then.
// Deciding this with a rule of our own would disagree with protobuf on some
// bytes (overlong forms, surrogates, code points above U+10FFFF) and call
// protobuf's refusal our bug.
template <typename Message>
bool ProtobufAccepts(const Message& m) {
  std::string wire;
  if (!m.SerializeToString(&wire)) return false;
  Message back;
  return back.ParseFromString(wire);
}

// No answer within this is a hang (the fake module answers at once; the
// agent's own call deadline is 10 s).
constexpr auto kHang = std::chrono::seconds(30);

void Expect(bool ok, const char* what, const grpc::Status& st) {
  if (ok) return;
  std::fprintf(stderr, "oracle: %s (status %d: %s)\n", what, static_cast<int>(st.error_code()),
               st.error_message().c_str());
  std::abort();
}

std::string Id(FuzzedDataProvider& p) {
  switch (p.ConsumeIntegralInRange(0, 3)) {
    case 0:
      return p.ConsumeRandomLengthString(80);
    default:
      return "fake-" + std::to_string(p.ConsumeIntegralInRange(0, 9));
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
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kHang);
  if (p.ConsumeBool()) {
    v1beta1::AllocateRequest req;
    const int containers = p.ConsumeIntegralInRange(0, 4);
    for (int c = 0; c < containers; ++c) {
      auto* cr = req.add_container_requests();
      const int n = p.ConsumeIntegralInRange(0, 10);
      for (int i = 0; i < n; ++i) cr->add_devices_ids(Id(p));
    }
    v1beta1::AllocateResponse resp;
    const grpc::Status st = world->stub->Allocate(&ctx, req, &resp);
    Expect(st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED, "Allocate hung", st);
    if (!ProtobufAccepts(req)) {
      // Refused by protobuf before any of our code runs: an error, no crash.
      Expect(!st.ok(), "a request protobuf refuses was answered OK", st);
      return 0;
    }
    if (st.ok()) {
      Expect(resp.container_responses_size() == containers, "one answer per container", st);
    } else {
      Expect(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT,
             "Allocate failed with another code than INVALID_ARGUMENT", st);
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
    v1beta1::PreferredAllocationResponse resp;
    const grpc::Status st = world->stub->GetPreferredAllocation(&ctx, req, &resp);
    Expect(st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED, "GetPreferredAllocation hung",
           st);
    if (!ProtobufAccepts(req)) {
      Expect(!st.ok(), "a request protobuf refuses was answered OK", st);
      return 0;
    }
    Expect(st.ok(), "GetPreferredAllocation failed", st);
    Expect(resp.container_responses_size() == 1, "one answer per container", st);
    Expect(resp.container_responses(0).deviceids_size() <= std::max(want, 0),
           "more IDs than asked for", st);
  }
  return 0;
}
