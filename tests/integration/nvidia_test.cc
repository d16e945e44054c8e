// The nvidia module end to end: devplugd with the fake libnvidia-ml on a
// fixture node, the kubelet simulator over real sockets: registration,
// Allocate, NVLink-aware preferred allocation, and a critical XID taking a
// GPU out of the allocatable count.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "agent_fixture.h"
#include "cdi/spec.h"
#include "gpu_fixture.h"

namespace devplug {
namespace {

using namespace std::chrono_literals;
using testing::FakeGpu;
using testing::FakeMig;
using testing::GpuFixture;
using Strings = std::vector<std::string>;

constexpr char kGpu[] = "nvidia.com/gpu";

class NvidiaAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    if (!testing::IsRoot()) GTEST_SKIP() << "GPU fixtures need mknod (root)";
    fx_ = std::make_unique<GpuFixture>(host_root(), dir_ / "nvml");
    for (int i = 0; i < 4; i++) {
      char pci[16];
      std::snprintf(pci, sizeof(pci), "0000:%02x:00.0", 0x3b + i);
      gpus_.push_back(
          {"GPU-" + std::to_string(1000 + i) + "-aaaa-4000-8000-00000000000" + std::to_string(i),
           pci, static_cast<unsigned>(i), i / 2, "NVIDIA A100-SXM4-80GB"});
    }
    // GPUs 0-1 and 2-3 are NVLink pairs.
    ASSERT_TRUE(fx_->Build(gpus_, {"nvlink 0 1 4", "nvlink 2 3 4"}));
  }

  std::string Body(const std::string& extra = "") const {
    return "nvml_library = \"" + testing::FakeModuleDir() + "/fake_nvml.so\"\n" + extra;
  }

  std::unique_ptr<GpuFixture> fx_;
  std::vector<FakeGpu> gpus_;
};

TEST_F(NvidiaAgentTest, AllocatePreferredAllocationAndXid) {
  StartSim();
  StartAgent(Resource(kGpu, "nvidia", Body()));
  ASSERT_TRUE(Registered(kGpu));
  ASSERT_TRUE(HealthyIs(kGpu, 4, 4));
  const auto view = sim_->resource(kGpu);
  EXPECT_TRUE(view->options.get_preferred_allocation_available());
  ASSERT_EQ(view->devices.size(), 4u);
  EXPECT_EQ(view->devices[2].id(), gpus_[2].uuid);
  EXPECT_EQ(view->devices[2].topology().nodes(0).id(), 1);

  v1beta1::ContainerAllocateResponse resp;
  grpc::Status st = sim_->Allocate(kGpu, {gpus_[3].uuid, gpus_[1].uuid}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  std::vector<std::string> nodes;
  for (const auto& d : resp.devices()) nodes.push_back(d.host_path());
  EXPECT_EQ(nodes,
            (std::vector<std::string>{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                      "/dev/nvidia3", "/dev/nvidia1"}));
  EXPECT_EQ(resp.envs().at("NVIDIA_VISIBLE_DEVICES"), gpus_[3].uuid + "," + gpus_[1].uuid);

  std::vector<std::string> ids;
  st = sim_->GetPreferredAllocation(
      kGpu, {gpus_[0].uuid, gpus_[1].uuid, gpus_[2].uuid, gpus_[3].uuid}, {gpus_[2].uuid}, 2, &ids);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(ids, (std::vector<std::string>{gpus_[2].uuid, gpus_[3].uuid}));  // its NVLink peer

  fx_->Xid(2, 31);  // application fault: ignored
  fx_->Xid(2, 79);  // fell off the bus
  ASSERT_TRUE(HealthyIs(kGpu, 4, 3));
  st = sim_->Allocate(kGpu, {gpus_[2].uuid}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(agent_->WaitForLog("critical XID 79", kWait)) << agent_->Log();
}

// The MIG node: GPUs 0 and 1 (H100, MIG on) split into 1g.10gb and
// 3g.40gb instances, served as two resources of one devplugd; every
// container gets exactly its own instances' nodes.
TEST_F(NvidiaAgentTest, MigNodeServesTwoProfilesAsTwoResources) {
  for (auto& g : gpus_) g.mib = testing::kH100Mib;
  fx_->Script(gpus_);
  const std::vector<FakeMig> migs = {
      testing::Mig1g10gb(0, "MIG-aaaaaaaa-0000-4000-8000-000000000001", 9),
      testing::Mig1g10gb(0, "MIG-aaaaaaaa-0000-4000-8000-000000000002", 10),
      testing::Mig3g40gb(0, "MIG-aaaaaaaa-0000-4000-8000-000000000003", 2),
      testing::Mig3g40gb(1, "MIG-bbbbbbbb-0000-4000-8000-000000000001", 1),
      testing::Mig3g40gb(1, "MIG-bbbbbbbb-0000-4000-8000-000000000002", 2)};
  ASSERT_TRUE(fx_->Mig(gpus_, {0, 1}, migs));
  constexpr char kSmall[] = "nvidia.com/mig-1g.10gb", kBig[] = "nvidia.com/mig-3g.40gb";
  const std::string common = "mig = \"only\"\ndevice_list_strategy = \"volume-mounts\"\n";
  StartSim();
  StartAgent(Resource(kSmall, "nvidia", Body(common + "mig_profile = \"1g.10gb\"\n")) +
             Resource(kBig, "nvidia", Body(common + "mig_profile = \"3g.40gb\"\n")) +
             Resource(kGpu, "nvidia", Body()));
  ASSERT_TRUE(Registered(kSmall));
  ASSERT_TRUE(Registered(kBig));
  ASSERT_TRUE(Registered(kGpu));
  ASSERT_TRUE(HealthyIs(kSmall, 2, 2));
  ASSERT_TRUE(HealthyIs(kBig, 3, 3));
  ASSERT_TRUE(HealthyIs(kGpu, 2, 2));                                       // GPUs 2 and 3, whole
  EXPECT_EQ(sim_->resource(kBig)->devices[2].topology().nodes(0).id(), 0);  // GPU 1's node

  auto allocate = [&](const char* res, const std::string& id, Strings* nodes, Strings* mounts,
                      std::string* env) {
    v1beta1::ContainerAllocateResponse resp;
    grpc::Status st = sim_->Allocate(res, {id}, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    for (const auto& d : resp.devices()) nodes->push_back(d.host_path());
    for (const auto& m : resp.mounts()) {
      EXPECT_TRUE(m.read_only());
      mounts->push_back(m.host_path() + ":" + m.container_path());
    }
    *env = resp.envs().at("NVIDIA_VISIBLE_DEVICES");
  };
  Strings nodes, mounts;
  std::string env;
  allocate(kSmall, migs[1].uuid, &nodes, &mounts, &env);
  Strings want = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0"};
  for (const auto& c : fx_->CapNodes(0, 10, 0)) want.push_back(c);
  EXPECT_EQ(nodes, want);
  EXPECT_EQ(mounts, Strings{"/dev/null:/var/run/nvidia-container-devices/" + migs[1].uuid});
  EXPECT_EQ(env, "/var/run/nvidia-container-devices");
  nodes.clear();
  mounts.clear();
  allocate(kBig, migs[4].uuid, &nodes, &mounts, &env);
  want = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia1"};
  for (const auto& c : fx_->CapNodes(1, 2, 0)) want.push_back(c);
  EXPECT_EQ(nodes, want);
  EXPECT_EQ(mounts, Strings{"/dev/null:/var/run/nvidia-container-devices/" + migs[4].uuid});
  EXPECT_EQ(env, "/var/run/nvidia-container-devices");  // the same from both: no conflict

  // One NVML session for the three resources; the whole-GPU resource
  // (envvar) and the MIG ones (volume-mounts) are told to agree.
  EXPECT_EQ(fx_->Calls("init"), 1);
  EXPECT_EQ(fx_->Calls("eventsetcreate"), 1);
  EXPECT_TRUE(
      agent_->WaitForLog("set device_list_strategy = \"volume-mounts\" or \"cdi\" on both", kWait))
      << agent_->Log();

  // An XID contained to GPU 1's instance 2: only that 3g.40gb device.
  fx_->Xid(1, 94, 2, 0);
  ASSERT_TRUE(HealthyIs(kBig, 3, 2));
  EXPECT_TRUE(HealthyIs(kSmall, 2, 2));
  EXPECT_EQ(agent_->Stop(SIGTERM, 15s), std::optional<int>(0)) << agent_->Log();
  // At most once: the exit does not wait for the session's end (its last
  // event wait), which the process's end makes moot.
  EXPECT_LE(fx_->Calls("shutdown"), 1);
}

// device_list_strategy = "cdi" with the resource's cdi on: devplugd's own
// spec names each MIG device by its UUID with its nodes (no spec of NVIDIA's
// toolkit needed), a container gets it by that name alone, and a MIG
// reconfiguration reaches the spec.
TEST_F(NvidiaAgentTest, CdiStrategyNamesMigDevicesInDevplugsOwnSpec) {
  for (auto& g : gpus_) g.mib = testing::kH100Mib;
  fx_->Script(gpus_);
  std::vector<FakeMig> migs = {
      testing::Mig1g10gb(0, "MIG-aaaaaaaa-0000-4000-8000-000000000001", 9),
      testing::Mig1g10gb(0, "MIG-aaaaaaaa-0000-4000-8000-000000000002", 10)};
  ASSERT_TRUE(fx_->Mig(gpus_, {0}, migs));
  constexpr char kSmall[] = "nvidia.com/mig-1g.10gb";
  const std::string spec_path =
      host_root() + "/run/cdi/devplug-devplug.nvidia.com-mig-1g_10gb.json";
  auto names = [&] {
    Strings out;
    if (!testing::FileExists(spec_path)) return out;
    const auto spec = nlohmann::json::parse(testing::ReadFile(spec_path));
    for (const auto& d : spec["devices"]) out.push_back(d["name"]);
    return out;
  };
  StartSim();
  StartAgent(Resource(kSmall, "nvidia",
                      Body("mig = \"only\"\nmig_profile = \"1g.10gb\"\n"
                           "device_list_strategy = \"cdi\"\ncdi = \"cri\"\ncdi_only = true\n")),
             "0s", "cdi_dir = \"/run/cdi\"");
  ASSERT_TRUE(Registered(kSmall));
  ASSERT_TRUE(HealthyIs(kSmall, 2, 2));
  EXPECT_EQ(names(), (Strings{migs[0].uuid, migs[1].uuid}));
  const auto spec = nlohmann::json::parse(testing::ReadFile(spec_path));
  EXPECT_TRUE(cdi::Validate(spec).empty()) << spec.dump(1);
  Strings nodes;
  for (const auto& n : spec["devices"][1]["containerEdits"]["deviceNodes"]) {
    nodes.push_back(n["path"]);
    EXPECT_EQ(n["type"], "c");  // looked up on the node: no lookup by the runtime
  }
  Strings want = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0"};
  for (const auto& c : fx_->CapNodes(0, 10, 0)) want.push_back(c);
  EXPECT_EQ(nodes, want);
  EXPECT_FALSE(spec["devices"][1]["containerEdits"].contains("env"));

  v1beta1::ContainerAllocateResponse resp;
  grpc::Status st = sim_->Allocate(kSmall, {migs[1].uuid}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.cdi_devices_size(), 1);
  EXPECT_EQ(resp.cdi_devices(0).name(), "devplug.nvidia.com/mig-1g_10gb=" + migs[1].uuid);
  EXPECT_EQ(resp.devices_size(), 0);  // cdi_only: by name alone
  EXPECT_TRUE(resp.envs().empty());

  // The GPU is split again: instance 10 destroyed, 11 made.
  migs = {migs[0], testing::Mig1g10gb(0, "MIG-aaaaaaaa-0000-4000-8000-000000000003", 11)};
  ASSERT_TRUE(fx_->Mig(gpus_, {0}, migs));
  fx_->MigChangeEvent(0);
  ASSERT_TRUE(Eventually([&] {
    const auto view = sim_->resource(kSmall);
    return view && view->devices.size() == 2 && view->devices[1].id() == migs[1].uuid;
  }));
  EXPECT_EQ(names(), (Strings{migs[0].uuid, migs[1].uuid}));
  st = sim_->Allocate(kSmall, {migs[1].uuid}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.cdi_devices(0).name(), "devplug.nvidia.com/mig-1g_10gb=" + migs[1].uuid);
}

// A GKE/COS-style node: no container toolkit, the driver's files in
// /home/kubernetes/bin/nvidia, mounted read-only into every container.
TEST_F(NvidiaAgentTest, NodeWithoutToolkitGetsTheDriverMounted) {
  testing::WriteFile(host_root() + "/home/kubernetes/bin/nvidia/lib64/libcuda.so.1", "");
  testing::WriteFile(host_root() + "/home/kubernetes/bin/nvidia/bin/nvidia-smi", "");
  StartSim();
  StartAgent(Resource(kGpu, "nvidia",
                      Body("driver_mount = { host = \"/home/kubernetes/bin/nvidia\", container = "
                           "\"/usr/local/nvidia\" }\n"
                           "envs = { LD_LIBRARY_PATH = \"/usr/local/nvidia/lib64\" }\n")));
  ASSERT_TRUE(Registered(kGpu));
  ASSERT_TRUE(HealthyIs(kGpu, 4, 4));
  v1beta1::ContainerAllocateResponse resp;
  grpc::Status st = sim_->Allocate(kGpu, {gpus_[0].uuid, gpus_[1].uuid}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.mounts_size(), 1);
  EXPECT_EQ(resp.mounts(0).host_path(), "/home/kubernetes/bin/nvidia");
  EXPECT_EQ(resp.mounts(0).container_path(), "/usr/local/nvidia");
  EXPECT_TRUE(resp.mounts(0).read_only());
  EXPECT_EQ(resp.envs().at("LD_LIBRARY_PATH"), "/usr/local/nvidia/lib64");
  EXPECT_EQ(resp.envs().at("NVIDIA_VISIBLE_DEVICES"), gpus_[0].uuid + "," + gpus_[1].uuid);
}

}  // namespace
}  // namespace devplug
