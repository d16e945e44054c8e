// The device metadata file of one request of a claim (KEP-5304).
#include "dra/device_metadata.h"

#include <gtest/gtest.h>

namespace devplug::dra {
namespace {

using Json = nlohmann::json;

TEST(DeviceMetadataTest, AClaimsRequestFileAndWhereTheContainerReadsIt) {
  EXPECT_EQ(BaseRequest("main/large"), "main");
  EXPECT_EQ(BaseRequest("gpu"), "gpu");
  auto m =
      Metadata("gpu.example.com", {"ns", "7c1d-uid", "claim-1"}, "", "gpu",
               {{"node-1", "gpu-0", {{"model", {{"string", "H100"}}}}}, {"node-1", "gpu-1", {}}});
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->file, "dra-device-metadata/gpu.example.com/7c1d-uid/gpu/metadata.json");
  EXPECT_EQ(m->container_path,
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/claim-1/gpu/"
            "gpu.example.com-metadata.json");
  const Json doc = Json::parse(m->content);
  EXPECT_EQ(doc["apiVersion"], "metadata.resource.k8s.io/v1beta1");
  EXPECT_EQ(doc["metadata"]["generation"], 1);
  EXPECT_EQ(doc["requests"][0]["devices"][0]["attributes"]["model"]["string"], "H100");
  EXPECT_FALSE(doc["requests"][0]["devices"][1].contains("attributes"));
  EXPECT_EQ(doc["requests"][0]["devices"][1]["driver"], "gpu.example.com");

  auto t = Metadata("gpu.example.com", {"ns", "u2", "pod-gpu-abcde"}, "gpu", "gpu", {});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->container_path,
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/gpu/"
            "gpu.example.com-metadata.json");
  EXPECT_EQ(Json::parse(t->content)["podClaimName"], "gpu");
}

// Names the API server would refuse never make a path: nothing is written
// outside the claim's folder.
TEST(DeviceMetadataTest, ANameThatCouldLeaveItsFolderIsRefused) {
  for (const auto& [ref, pod, request] :
       std::vector<std::tuple<ClaimRef, std::string, std::string>>{
           {{"ns", "u1", "../x"}, "", "gpu"},
           {{"ns", "u1", "c"}, "", ".."},
           {{"ns", "u1", "c"}, "a/b", "gpu"},
           {{"ns", "../u1", "c"}, "", "gpu"},
           {{"ns", "", "c"}, "", "gpu"}}) {
    auto m = Metadata("gpu.example.com", ref, pod, request, {});
    EXPECT_FALSE(m.ok()) << ref.name << " " << request;
  }
}

TEST(DeviceMetadataTest, ThePodsNameForTheClaimIsItsAnnotation) {
  EXPECT_EQ(PodClaimName(Json::parse(
                R"({"metadata":{"annotations":{"resource.kubernetes.io/pod-claim-name":"gpu"}}})")),
            "gpu");
  EXPECT_EQ(PodClaimName(Json::parse(R"({"metadata":{"annotations":{"other":"x"}}})")), "");
  EXPECT_EQ(PodClaimName(Json::parse(R"({"metadata":{"annotations":[1]}})")), "");
  EXPECT_EQ(PodClaimName(Json::parse("[]")), "");
}

}  // namespace
}  // namespace devplug::dra
