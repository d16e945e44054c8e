// How a device list becomes a DRA pool's ResourceSlices, and the device
// names DRA knows them by.
#include "dra/resource_slice.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>

namespace devplug::dra {
namespace {

bool IsLabel(const std::string& s) {
  static const std::regex label("[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?");
  return std::regex_match(s, label);
}

Device Dev(const std::string& id, bool healthy = true, int numa = -1) {
  Device d;
  d.id = id;
  d.healthy = healthy;
  d.numa_node = numa;
  return d;
}

TEST(DraDeviceNameTest, ALabelKeepsItsSpelling) {
  EXPECT_EQ(DeviceName("kvm-0"), "kvm-0");
  EXPECT_EQ(DeviceName("tun3"), "tun3");
  EXPECT_EQ(DeviceName("0"), "0");
}

TEST(DraDeviceNameTest, AnyOtherIdBecomesALabelWithAHashOfTheId) {
  const std::string pci = DeviceName("0000:3b:00.0");
  EXPECT_TRUE(IsLabel(pci)) << pci;
  EXPECT_EQ(pci.rfind("0000-3b-00-0-", 0), 0u) << pci;
  // Stable: the same ID, the same name, whatever else is listed.
  EXPECT_EQ(DeviceName("0000:3b:00.0"), pci);
  // IDs that spell alike stay apart.
  EXPECT_NE(DeviceName("0000:3b:00.0"), DeviceName("0000-3b-00-0"));
  EXPECT_NE(DeviceName("a:b"), DeviceName("a.b"));
  const std::string gpu = DeviceName("GPU-1f0e2a44-aaaa-bbbb-cccc-0123456789ab");
  EXPECT_TRUE(IsLabel(gpu)) << gpu;
  EXPECT_EQ(gpu.rfind("gpu-1f0e2a44-", 0), 0u) << gpu;
}

TEST(DraDeviceNameTest, EdgesLengthAndEmptinessStillGiveALabel) {
  for (const std::string& id :
       {std::string(""), std::string("-"), std::string(":::"), std::string("-x-"),
        std::string(200, 'a'), std::string("mlx5_0/port-1"), std::string("é")}) {
    SCOPED_TRACE(id);
    EXPECT_TRUE(IsLabel(DeviceName(id))) << DeviceName(id);
  }
  EXPECT_NE(DeviceName(std::string(200, 'a')), DeviceName(std::string(201, 'a')));
}

TEST(DraDeviceNameTest, ObjectNamesAreSubdomains) {
  EXPECT_EQ(ObjectName("node-1-kvm.devices.kubevirt.io-0"), "node-1-kvm.devices.kubevirt.io-0");
  const std::string n = ObjectName("Node_1-x");
  EXPECT_TRUE(std::regex_match(n, std::regex("[a-z0-9]([-a-z0-9.]*[a-z0-9])?"))) << n;
  EXPECT_LE(ObjectName(std::string(400, 'n')).size(), 253u);
}

// "<node>-<driver>-<index>" named the slices of node "a-b" with driver
// "c.example" and of node "a" with driver "b-c.example" alike: the second
// agent's create failed (AlreadyExists), again at every retry.
TEST(DraSlicesTest, SliceNamesOfPairsThatSpellAlikeDiffer) {
  const Pool one{.driver = "c.example", .node = "a-b"}, other{.driver = "b-c.example", .node = "a"};
  EXPECT_NE(SliceName(one, 0), SliceName(other, 0));
  EXPECT_NE(SliceName(one, 0), SliceName(one, 1));
  EXPECT_EQ(SliceName(one, 3), SliceName(one, 3));
  const std::string long_node(250, 'n');
  EXPECT_NE(SliceName({.driver = "d.example", .node = long_node}, 0),
            SliceName({.driver = "d.example", .node = long_node}, 1))
      << "a name cut to 253 characters keeps its index apart";
}

TEST(DraSlicesTest, HealthyDevicesArePublishedWithTheirIdAndNumaNode) {
  const Pool pool{.driver = "tun.example.com", .node = "node-1", .generation = 7};
  const auto slices = Slices(pool, {Dev("tun0", true, 1), Dev("tun1", false), Dev("tun2")});
  ASSERT_EQ(slices.size(), 1u);
  const auto& s = slices[0];
  EXPECT_EQ(s["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(s["kind"], "ResourceSlice");
  EXPECT_TRUE(std::regex_match(s["metadata"]["name"].get<std::string>(),
                               std::regex("node-1-tun\\.example\\.com-[0-9a-f]{8}-0")))
      << s["metadata"]["name"];
  EXPECT_EQ(s["spec"]["driver"], "tun.example.com");
  EXPECT_EQ(s["spec"]["nodeName"], "node-1");
  EXPECT_EQ(s["spec"]["pool"]["name"], "node-1");
  EXPECT_EQ(s["spec"]["pool"]["generation"], 7);
  EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 1);
  const auto& devs = s["spec"]["devices"];
  ASSERT_EQ(devs.size(), 3u) << "the Unhealthy tun1 stays, tainted";
  EXPECT_EQ(devs[0]["name"], "tun0");
  EXPECT_EQ(devs[0]["attributes"]["id"]["string"], "tun0");
  EXPECT_EQ(devs[0]["attributes"]["resource.kubernetes.io/numaNode"]["int"], 1);
  EXPECT_FALSE(devs[0].contains("taints"));
  EXPECT_EQ(devs[2]["name"], "tun2");
  EXPECT_EQ(devs[2]["attributes"].size(), 1u) << "no NUMA affinity: no numaNode " << devs[2];
  EXPECT_FALSE(devs[0].contains("capacity"));
}

// Health that recovers: an Unhealthy device keeps its place in the pool
// with a taint naming why; Healthy again, it carries none.
TEST(DraSlicesTest, AnUnhealthyDeviceStaysInThePoolWithATaint) {
  Device sick = Dev("gpu0", false);
  sick.health_reason = "critical XID 79 (fallen off the bus)";
  UnhealthyTaint taint{.effect = "NoExecute", .time_added = [](const std::string& device) {
                         return device == "gpu0" ? "2026-11-28T01:58:00Z" : "";
                       }};
  const auto slices = Slices({.driver = "d.example.com", .node = "n"}, {sick, Dev("gpu1")}, taint);
  const auto& devs = slices[0]["spec"]["devices"];
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[0]["taints"],
            (nlohmann::json::array({{{"key", "devplug.io/unhealthy"},
                                     {"effect", "NoExecute"},
                                     {"value", "critical-XID-79--fallen-off-the-bus"},
                                     {"timeAdded", "2026-11-28T01:58:00Z"}}})));
  EXPECT_FALSE(devs[1].contains("taints"));
  // No reason that can be a label value: no value.
  Device odd = Dev("gpu2", false);
  odd.health_reason = "(?)";
  const auto bare = Slices({.driver = "d.example.com", .node = "n"}, {odd});
  EXPECT_FALSE(bare[0]["spec"]["devices"][0]["taints"][0].contains("value"));
  EXPECT_EQ(bare[0]["spec"]["devices"][0]["taints"][0]["effect"], "NoSchedule");
}

// The API takes at most 64 devices in a slice where any carries a taint.
TEST(DraSlicesTest, ATaintedPoolHoldsAtMost64DevicesPerSlice) {
  DeviceList devices;
  for (int i = 0; i < 100; ++i) devices.push_back(Dev("dev" + std::to_string(i), i != 7));
  const auto slices = Slices({.driver = "d.example.com", .node = "n"}, devices);
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0]["spec"]["devices"].size(), 64u);
  EXPECT_EQ(slices[1]["spec"]["devices"].size(), 36u);
  devices[7].healthy = true;
  EXPECT_EQ(Slices({.driver = "d.example.com", .node = "n"}, devices).size(), 1u);
}

// ABI 1.9: the PCI function as the standard attributes, and the module's
// attributes and capacities with their types, as resource.k8s.io/v1 has them.
TEST(DraSlicesTest, TheModulesAttributesAndCapacitiesArePublished) {
  Device d = Dev("gpu0", true, 0);
  d.pci_address = "0000:3b:00.0";
  d.pcie_root = "pci0000:3a";
  using T = DeviceAttribute::Type;
  d.attributes = {{"model", T::kString, "H100", 0},
                  {"gpu.example.com/cores", T::kInt, "", 132},
                  {"mig", T::kBool, "", 1},
                  {"firmware", T::kVersion, "1.2.3-rc.1", 0},
                  {"memory", T::kCapacity, "", 85899345920}};
  const auto slices = Slices({.driver = "gpu.example.com", .node = "n"}, {d});
  const auto& dev = slices[0]["spec"]["devices"][0];
  const nlohmann::json want_attributes = {
      {"id", {{"string", "gpu0"}}},
      {"resource.kubernetes.io/numaNode", {{"int", 0}}},
      {"resource.kubernetes.io/pciBusID", {{"string", "0000:3b:00.0"}}},
      {"resource.kubernetes.io/pcieRoot", {{"string", "pci0000:3a"}}},
      {"model", {{"string", "H100"}}},
      {"gpu.example.com/cores", {{"int", 132}}},
      {"mig", {{"bool", true}}},
      {"firmware", {{"version", "1.2.3-rc.1"}}}};
  EXPECT_EQ(dev["attributes"], want_attributes);
  EXPECT_EQ(dev["capacity"], (nlohmann::json{{"memory", {{"value", "85899345920"}}}}));
}

TEST(DraSlicesTest, ADeviceHeldBackForItsReleaseIsNotOffered) {
  Device held = Dev("fpga-0");
  held.held_back = true;
  const auto slices = Slices({.driver = "d.example.com", .node = "n"}, {held, Dev("fpga-1")});
  ASSERT_EQ(slices[0]["spec"]["devices"].size(), 1u);
  EXPECT_EQ(slices[0]["spec"]["devices"][0]["name"], "fpga-1");
}

// ABI 1.10: the shares of one device are one device, shared by claims, with
// a capacity of its shares; tainted while any share is Unhealthy, listed
// while any is not held back.
TEST(DraSlicesTest, TheSharesOfADeviceAreOneDeviceWithACapacityOfShares) {
  DeviceList devices;
  for (int k = 0; k < 3; ++k) {
    Device d = Dev("GPU-1::" + std::to_string(k));
    d.share_of = "GPU-1";
    d.attributes = {{"memory", DeviceAttribute::Type::kCapacity, "", 1024}};
    devices.push_back(d);
  }
  devices.push_back(Dev("other"));
  const Pool pool{.driver = "d.example.com", .node = "n"};
  auto devs = Slices(pool, devices)[0]["spec"]["devices"];
  ASSERT_EQ(devs.size(), 2u) << devs.dump(1);
  EXPECT_EQ(devs[0]["name"], DeviceName("GPU-1"));
  EXPECT_EQ(devs[0]["attributes"]["id"]["string"], "GPU-1");
  EXPECT_EQ(devs[0]["allowMultipleAllocations"], true);
  EXPECT_EQ(
      devs[0]["capacity"],
      (nlohmann::json{
          {"shares",
           {{"value", "3"},
            {"requestPolicy",
             {{"default", "1"}, {"validRange", {{"min", "1"}, {"max", "3"}, {"step", "1"}}}}}}},
          {"memory",
           {{"value", "1024"},
            {"requestPolicy",
             {{"default", "0"}, {"validRange", {{"min", "0"}, {"max", "1024"}}}}}}}}))
      << devs.dump(1);
  EXPECT_FALSE(devs[0].contains("taints"));
  EXPECT_FALSE(devs[1].contains("allowMultipleAllocations"));
  EXPECT_EQ(DraName(devices[1]), DeviceName("GPU-1"));
  EXPECT_EQ(DraName(devices[3]), "other");

  // A share held back for its release: the device stays, all three shares
  // counted (the scheduler's accounting of claims still holds).
  devices[0].held_back = true;
  devices[0].healthy = false;
  devs = Slices(pool, devices)[0]["spec"]["devices"];
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[0]["capacity"]["shares"]["value"], "3");
  EXPECT_FALSE(devs[0].contains("taints")) << devs.dump(1);
  // One share Unhealthy: the device carries the taint, with its reason.
  devices[2].healthy = false;
  devices[2].health_reason = "XID 79";
  devs = Slices(pool, devices)[0]["spec"]["devices"];
  EXPECT_EQ(devs[0]["taints"][0]["value"], "XID-79") << devs.dump(1);
  // One share left (the others withheld, or gone): a range with no step,
  // which the API server would refuse (min + step past the value).
  const DeviceList one(devices.begin() + 2, devices.end());
  devs = Slices(pool, one)[0]["spec"]["devices"];
  EXPECT_EQ(devs[0]["capacity"]["shares"],
            (nlohmann::json{{"value", "1"},
                            {"requestPolicy",
                             {{"default", "1"}, {"validRange", {{"min", "1"}, {"max", "1"}}}}}}))
      << devs.dump(1);
  // Every share held back: not offered.
  for (int k = 0; k < 3; ++k) devices[k].held_back = true;
  devs = Slices(pool, devices)[0]["spec"]["devices"];
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0]["name"], "other");
}

TEST(DraSlicesTest, AnEmptyPoolIsStillOneSlice) {
  const auto slices = Slices({.driver = "d.example.com", .node = "n"}, {});
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_TRUE(slices[0]["spec"]["devices"].empty());
  EXPECT_EQ(slices[0]["spec"]["pool"]["resourceSliceCount"], 1);
}

TEST(DraSlicesTest, MoreThan128DevicesSpreadOverSlicesOfOnePool) {
  DeviceList devices;
  for (int i = 0; i < 300; ++i) devices.push_back(Dev("dev" + std::to_string(i)));
  const auto slices = Slices({.driver = "d.example.com", .node = "n", .generation = 2}, devices);
  ASSERT_EQ(slices.size(), 3u);
  std::set<std::string> names;
  size_t total = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    EXPECT_EQ(slices[i]["metadata"]["name"],
              SliceName({.driver = "d.example.com", .node = "n"}, i));
    EXPECT_EQ(slices[i]["spec"]["pool"]["resourceSliceCount"], 3);
    EXPECT_EQ(slices[i]["spec"]["pool"]["generation"], 2);
    EXPECT_LE(slices[i]["spec"]["devices"].size(), kMaxDevicesPerSlice);
    for (const auto& d : slices[i]["spec"]["devices"]) names.insert(d["name"]);
    total += slices[i]["spec"]["devices"].size();
  }
  EXPECT_EQ(total, 300u);
  EXPECT_EQ(names.size(), 300u) << "unique in the pool";
}

TEST(DraSlicesTest, ALongIdIsCutToAnAttributeStringOfValidUtf8) {
  const std::string id(100, 'x');
  auto slices = Slices({.driver = "d.example.com", .node = "n"}, {Dev(id)});
  EXPECT_EQ(slices[0]["spec"]["devices"][0]["attributes"]["id"]["string"].get<std::string>().size(),
            64u);
  // A two-byte character across the limit is not cut in half (the JSON
  // would not be written at all).
  slices =
      Slices({.driver = "d.example.com", .node = "n"}, {Dev(std::string(63, 'x') + "\xc3\xa9")});
  EXPECT_NO_THROW((void)slices[0].dump());
}

}  // namespace
}  // namespace devplug::dra
