// dra::HealthHub behind a real gRPC server on a Unix socket, read by a
// client as the kubelet reads it: both versions of DRAResourceHealth, a
// full list per message, the module's reason, the resend of an unchanged
// list, and streams that end when the server stops.
#include "dra/health_hub.h"

#include "dra/resource_slice.h"

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "test_util.h"

namespace devplug::dra {
namespace {

using namespace std::chrono_literals;
using devplug::testing::TempDir;

Device Dev(const std::string& id, bool healthy, const std::string& reason = "") {
  Device d;
  d.id = id;
  d.healthy = healthy;
  d.health_reason = reason;
  return d;
}

class HealthHubTest : public ::testing::Test {
 protected:
  void Serve(std::chrono::milliseconds period = 60s) {
    hub_ = std::make_unique<HealthHub>("node-1", period);
    v1_ = std::make_unique<HealthServiceV1>(hub_.get());
    v1alpha1_ = std::make_unique<HealthServiceV1alpha1>(hub_.get());
    grpc::ServerBuilder b;
    b.AddListeningPort("unix://" + dir_ / "dra.sock", grpc::InsecureServerCredentials());
    b.RegisterService(v1_.get());
    b.RegisterService(v1alpha1_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ =
        grpc::CreateChannel("unix://" + dir_ / "dra.sock", grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (!server_) return;
    hub_->CloseAll();
    server_->Shutdown(std::chrono::system_clock::now() + 5s);
  }

  TempDir dir_;
  std::unique_ptr<HealthHub> hub_;
  std::unique_ptr<HealthServiceV1> v1_;
  std::unique_ptr<HealthServiceV1alpha1> v1alpha1_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(HealthHubTest, EachVersionGetsEveryDevicesHealthAndEveryChange) {
  Serve();
  hub_->Publish({Dev("tun0", true), Dev("0000:3b:00.0", false, "XID 79")});
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  auto stub = ::v1::DRAResourceHealth::NewStub(channel_);
  auto reader = stub->NodeWatchResources(&ctx, ::v1::NodeWatchResourcesRequest());
  ::v1::NodeWatchResourcesResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  ASSERT_EQ(msg.devices_size(), 2);
  EXPECT_EQ(msg.devices(0).device().pool_name(), "node-1");
  EXPECT_EQ(msg.devices(0).device().device_name(), "tun0");
  EXPECT_EQ(msg.devices(0).health(), ::v1::HEALTHY);
  EXPECT_EQ(msg.devices(0).message(), "");
  EXPECT_EQ(msg.devices(1).device().device_name(), DeviceName("0000:3b:00.0"))
      << "devices by their name in the slice";
  EXPECT_EQ(msg.devices(1).health(), ::v1::UNHEALTHY);
  EXPECT_EQ(msg.devices(1).message(), "XID 79");
  EXPECT_EQ(msg.devices(1).health_check_timeout_seconds(), kHealthTimeout.count());
  EXPECT_GT(msg.devices(1).last_updated_time(), 0);
  // Recovered: the next message says so.
  hub_->Publish({Dev("tun0", true), Dev("0000:3b:00.0", true)});
  ASSERT_TRUE(reader->Read(&msg));
  EXPECT_EQ(msg.devices(1).health(), ::v1::HEALTHY);
  EXPECT_EQ(msg.devices(1).message(), "");

  // A kubelet of 1.34 to 1.36 asks the v1alpha1 service: the same list.
  grpc::ClientContext alpha_ctx;
  alpha_ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  auto alpha = ::v1alpha1::DRAResourceHealth::NewStub(channel_)->NodeWatchResources(
      &alpha_ctx, ::v1alpha1::NodeWatchResourcesRequest());
  ::v1alpha1::NodeWatchResourcesResponse old;
  ASSERT_TRUE(alpha->Read(&old));
  ASSERT_EQ(old.devices_size(), 2);
  EXPECT_EQ(old.devices(1).health(), ::v1alpha1::HEALTHY);

  // The server stops: both streams end cleanly.
  hub_->CloseAll();
  EXPECT_FALSE(reader->Read(&msg));
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_FALSE(alpha->Read(&old));
  EXPECT_TRUE(alpha->Finish().ok());
}

// A shared device (ABI 1.10) is one entry, Unhealthy while any share is.
TEST_F(HealthHubTest, ASharedDeviceIsOneEntryUnhealthyWhileAnyShareIs) {
  Serve();
  DeviceList shares;
  for (int k = 0; k < 3; ++k) {
    shares.push_back(Dev("kvm-" + std::to_string(k), k != 1, k == 1 ? "/dev/kvm missing" : ""));
    shares.back().share_of = "kvm";
  }
  hub_->Publish(shares);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  auto reader = ::v1::DRAResourceHealth::NewStub(channel_)->NodeWatchResources(
      &ctx, ::v1::NodeWatchResourcesRequest());
  ::v1::NodeWatchResourcesResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  ASSERT_EQ(msg.devices_size(), 1);
  EXPECT_EQ(msg.devices(0).device().device_name(), "kvm");
  EXPECT_EQ(msg.devices(0).health(), ::v1::UNHEALTHY);
  EXPECT_EQ(msg.devices(0).message(), "/dev/kvm missing");
  shares[1].healthy = true;
  hub_->Publish(shares);
  ASSERT_TRUE(reader->Read(&msg));
  ASSERT_EQ(msg.devices_size(), 1);
  EXPECT_EQ(msg.devices(0).health(), ::v1::HEALTHY);
  hub_->CloseAll();
  EXPECT_FALSE(reader->Read(&msg));
  EXPECT_TRUE(reader->Finish().ok());
}

// The kubelet reads a device unheard of for health_check_timeout_seconds
// as Unknown: the list goes out again, unchanged, well within it.
TEST_F(HealthHubTest, AnUnchangedListIsSentAgainWithinTheTimeout) {
  Serve(50ms);
  hub_->Publish({Dev("tun0", false, std::string(2000, 'x'))});
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  auto reader = ::v1::DRAResourceHealth::NewStub(channel_)->NodeWatchResources(&ctx, {});
  ::v1::NodeWatchResourcesResponse msg;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(reader->Read(&msg)) << i;
    ASSERT_EQ(msg.devices_size(), 1);
    EXPECT_EQ(msg.devices(0).health(), ::v1::UNHEALTHY);
    EXPECT_EQ(msg.devices(0).message().size(), kHealthMessageMax) << "the kubelet's limit";
  }
  EXPECT_EQ(hub_->streams(), 1u);
}

}  // namespace
}  // namespace devplug::dra
