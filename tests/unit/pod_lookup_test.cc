// Who holds a device, from the kubelet's PodResources answer: the device
// plugin API's `devices` and DRA's `dynamic_resources`, and pod_of() of a
// DRA resource, which the claims answer first.
#include "kubelet/pod_lookup.h"

#include <cerrno>

#include <gtest/gtest.h>

#include "kubelet/pod_resources.h"

namespace devplug::kubelet {
namespace {

v1::ListPodResourcesResponse TwoPods() {
  v1::ListPodResourcesResponse r;
  v1::PodResources* a = r.add_pod_resources();
  a->set_namespace_("team-a");
  a->set_name("app");
  v1::ContainerResources* c = a->add_containers();
  c->set_name("main");
  v1::ContainerDevices* d = c->add_devices();
  d->set_resource_name("devices.kubevirt.io/kvm");
  d->add_device_ids("kvm0");
  v1::DynamicResource* claim = c->add_dynamic_resources();
  claim->set_claim_name("gpu");
  claim->set_claim_namespace("team-a");
  v1::ClaimResource* cr = claim->add_claim_resources();
  cr->set_driver_name("gpu.example.com");
  cr->set_pool_name("node-1");
  cr->set_device_name("gpu-0");
  // A second pod sharing the claim's device (a shared claim).
  v1::PodResources* b = r.add_pod_resources();
  b->set_namespace_("team-a");
  b->set_name("sidecar");
  v1::ContainerResources* c2 = b->add_containers();
  c2->set_name("side");
  v1::DynamicResource* shared = c2->add_dynamic_resources();
  shared->set_claim_name("net");
  shared->set_claim_namespace("team-a");
  v1::ClaimResource* n = shared->add_claim_resources();
  n->set_driver_name("gpu.example.com");
  n->set_pool_name("node-1");
  n->set_device_name("gpu-1");
  v1::DynamicResource* again = c->add_dynamic_resources();
  again->set_claim_name("net");
  again->set_claim_namespace("team-a");
  *again->add_claim_resources() = *n;
  return r;
}

TEST(PodSnapshotTest, DraClaimsAreListedByDriverAndPool) {
  const auto now = std::chrono::steady_clock::now();
  const PodSnapshot s = ToSnapshot(TwoPods(), now, now);
  const Holder* kvm = s.Find("devices.kubevirt.io/kvm", "kvm0");
  ASSERT_NE(kvm, nullptr);
  EXPECT_EQ(kvm->pod_name, "app");
  const std::string key = DraHoldersKey("gpu.example.com", "node-1");
  const Holder* gpu = s.Find(key, "gpu-0");
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(*gpu, (Holder{"team-a", "app", "main"}));
  EXPECT_FALSE(s.Ambiguous(key, "gpu-0"));
  EXPECT_NE(s.Find(key, "gpu-1"), nullptr);
  EXPECT_TRUE(s.Ambiguous(key, "gpu-1"));  // two pods: held, but not by one
  EXPECT_EQ(s.Find(DraHoldersKey("gpu.example.com", "node-2"), "gpu-0"), nullptr);
}

TEST(DraPodLookupTest, TheClaimAnswersEvenBeforeItsPodRuns) {
  DraPodLookup lookup(nullptr, "gpu.example.com", "node-1",
                      [](const std::string& id) -> std::optional<DraPodLookup::Claim> {
                        if (id == "0000:3b:00.0")
                          return DraPodLookup::Claim{"team-a", "gpu", "gpu-0"};
                        return std::nullopt;
                      });
  modules::PodHolder holder{"x", "y", "z", "w"};
  EXPECT_EQ(lookup.PodOf("0000:3b:00.0", std::nullopt, &holder), 0);
  EXPECT_EQ(holder.pod_namespace, "team-a");
  EXPECT_EQ(holder.pod_name, "");  // no PodResources: not known yet
  EXPECT_EQ(lookup.PodOf("0000:3c:00.0", std::nullopt, &holder), -ENOENT);
}

}  // namespace
}  // namespace devplug::kubelet
