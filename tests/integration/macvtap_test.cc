// The macvtap module on real kernel objects: veth lower links, real macvtap
// links and /dev/tap nodes, rtnetlink and uevents, through the real devplugd
// and the kubelet simulator. Every link a test makes is named after the test
// process, and removed at the end.
#include <linux/if.h>
#include <linux/if_link.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "agent_fixture.h"
#include "devplug/common/netlink.h"
#include "kube/client.h"

namespace devplug {
namespace {

using common::LinkInfo;
using common::RouteSocket;

constexpr char kNet[] = "macvtap.network.kubevirt.io/dataplane";
constexpr char kNet2[] = "macvtap.network.kubevirt.io/storage";
constexpr char kEnv[] = "MACVTAP_INTERFACE_MACVTAP_NETWORK_KUBEVIRT_IO_DATAPLANE";

int Sh(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

class MacvtapTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    if (!testing::IsRoot() || Sh("command -v ip >/dev/null") != 0)
      GTEST_SKIP() << "needs root and iproute2 (to make the veth lower links)";
    // Names unique to this process and test, at most 15 characters.
    tag_ = "dm" + std::to_string(getpid() % 100000) + std::to_string(next_++ % 10);
    lower_ = tag_ + "l";
    ASSERT_EQ(AddVeth(lower_), 0);
    // This kernel must have macvtap: one made by hand says so.
    if (Sh("ip link add link " + lower_ + " name " + tag_ + "t type macvtap 2>/dev/null") != 0)
      GTEST_SKIP() << "this kernel has no macvtap driver";
    Sh("ip link del " + tag_ + "t");
  }
  void TearDown() override {
    AgentTest::TearDown();  // devplugd stops first: it may still make links
    for (const std::string& l : cleanup_) Sh("ip link del " + l + " 2>/dev/null");
    if (!netns_.empty()) Sh("ip netns del " + netns_ + " 2>/dev/null");
  }

  int AddVeth(const std::string& name, const std::string& in_netns = "") {
    const std::string ip = in_netns.empty() ? "ip " : "ip -n " + in_netns + " ";
    if (in_netns.empty()) cleanup_.push_back(name);
    return Sh(ip + "link add " + name + " type veth peer name " + name + "p");
  }

  // devplugd with host_root "/": the module checks the real /dev/tap nodes.
  void Start(const std::string& resources, const std::string& extra = "") {
    std::string text = Config(resources, "0s", extra);
    const std::string root = "host_root = \"" + host_root() + "\"";
    text.replace(text.find(root), root.size(), "host_root = \"/\"");
    WriteFile(config_path(), text);
    agent_ = std::make_unique<AgentProcess>(std::vector<std::string>{"--config", config_path()});
  }

  std::string Module(const std::string& lower, const std::string& extra = "",
                     const char* name = kNet) const {
    return Resource(name, "macvtap", "lower_device = \"" + lower + "\"\n" + extra);
  }

  std::vector<std::string> Ids(const std::string& name) {
    std::vector<std::string> ids;
    const auto view = sim_->resource(name);
    if (view)
      for (const auto& d : view->devices) ids.push_back(d.id());
    return ids;
  }

  // The link the kernel has under `name` in our namespace; nullopt if none.
  std::optional<LinkInfo> Link(const std::string& name) {
    LinkInfo l;
    if (rt_.Link(name, &l) != 0) return std::nullopt;
    return l;
  }

  // Allocate `ids` of `resource`; the answer, with the failure in `st`.
  v1beta1::ContainerAllocateResponse Allocate(const std::string& resource,
                                              const std::vector<std::string>& ids,
                                              grpc::Status* st = nullptr) {
    v1beta1::ContainerAllocateResponse resp;
    grpc::Status s = sim_->Allocate(resource, ids, &resp);
    if (st)
      *st = s;
    else
      EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  static inline int next_ = 0;
  std::string tag_, lower_, netns_;
  std::vector<std::string> cleanup_;
  RouteSocket rt_;
};

// Allocate makes a macvtap link named after the ID on the lower link, in the
// mode configured, up, with its /dev/tap<ifindex> node, and hands the node
// and an env naming the link; a second Allocate of the ID replaces the link.
TEST_F(MacvtapTest, AllocateMakesTheLinkAndItsNode) {
  StartSim();
  Start(Module(lower_, "capacity = 4\nmode = \"vepa\"\nmtu = 1400"));
  ASSERT_TRUE(Registered(kNet));
  ASSERT_TRUE(HealthyIs(kNet, 4, 4));
  EXPECT_EQ(Ids(kNet), (std::vector<std::string>{"dataplaneMvp0", "dataplaneMvp1", "dataplaneMvp2",
                                                 "dataplaneMvp3"}));
  cleanup_.push_back("dataplaneMvp2");
  const auto resp = Allocate(kNet, {"dataplaneMvp2"});
  const auto link = Link("dataplaneMvp2");
  const auto lower = Link(lower_);
  ASSERT_TRUE(link && lower);
  EXPECT_EQ(link->kind, "macvtap");
  EXPECT_EQ(link->link, lower->ifindex);
  EXPECT_EQ(link->macvlan_mode, static_cast<uint32_t>(MACVLAN_MODE_VEPA));
  EXPECT_EQ(link->mtu, 1400u);
  EXPECT_TRUE(link->flags & IFF_UP);
  const std::string node = "/dev/tap" + std::to_string(link->ifindex);
  ASSERT_EQ(resp.devices_size(), 1);
  EXPECT_EQ(resp.devices(0).host_path(), node);
  EXPECT_EQ(resp.devices(0).container_path(), node);
  EXPECT_EQ(resp.devices(0).permissions(), "rw");
  EXPECT_EQ(resp.envs().at(kEnv), "dataplaneMvp2");
  // The node is the link's own character device (its numbers from sysfs).
  struct stat st {};
  ASSERT_EQ(stat(node.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  const std::string dev = testing::ReadFile("/sys/class/net/dataplaneMvp2/macvtap/tap" +
                                            std::to_string(link->ifindex) + "/dev");
  EXPECT_EQ(dev,
            std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev)) + "\n");

  // Again: a link left behind (no CNI took it) is replaced by a new one.
  const auto again = Allocate(kNet, {"dataplaneMvp2"});
  const auto relink = Link("dataplaneMvp2");
  ASSERT_TRUE(relink);
  EXPECT_NE(relink->ifindex, link->ifindex);
  ASSERT_EQ(again.devices_size(), 1);
  EXPECT_EQ(again.devices(0).host_path(), "/dev/tap" + std::to_string(relink->ifindex));
  EXPECT_FALSE(testing::FileExists(node)) << "the old link's node is still there";

  // Two IDs in one request: two links, two nodes, one env naming both.
  cleanup_.push_back("dataplaneMvp0");
  cleanup_.push_back("dataplaneMvp3");
  const auto two = Allocate(kNet, {"dataplaneMvp0", "dataplaneMvp3"});
  EXPECT_EQ(two.devices_size(), 2);
  EXPECT_EQ(two.envs().at(kEnv), "dataplaneMvp0,dataplaneMvp3");
  EXPECT_TRUE(Link("dataplaneMvp0") && Link("dataplaneMvp3"));
}

// The list follows the lower link through rtnetlink: deleted, the list
// empties; made again, it is back, with no resync.
TEST_F(MacvtapTest, LowerLinkDeletedAndAddedAgain) {
  StartSim();
  Start(Module(lower_, "capacity = 3"));
  ASSERT_TRUE(Registered(kNet));
  ASSERT_TRUE(HealthyIs(kNet, 3, 3));
  ASSERT_EQ(Sh("ip link del " + lower_), 0);
  ASSERT_TRUE(HealthyIs(kNet, 0, 0));
  ASSERT_TRUE(agent_->WaitForLog("lower link " + lower_ + " does not exist", kWait));
  grpc::Status st;
  Allocate(kNet, {"dataplaneMvp0"}, &st);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(Link("dataplaneMvp0"));
  ASSERT_EQ(AddVeth(lower_), 0);
  ASSERT_TRUE(HealthyIs(kNet, 3, 3));
}

// require_link: down or without carrier, the devices are Unhealthy with the
// reason; up at both ends of the veth, Healthy.
TEST_F(MacvtapTest, RequireLinkFollowsAdminStateAndCarrier) {
  StartSim();
  Start(Module(lower_, "capacity = 2\nrequire_link = true"));
  ASSERT_TRUE(Registered(kNet));
  ASSERT_TRUE(HealthyIs(kNet, 2, 0));
  ASSERT_TRUE(agent_->WaitForLog("(" + lower_ + " is down)", kWait)) << agent_->Log();
  ASSERT_EQ(Sh("ip link set " + lower_ + " up"), 0);
  ASSERT_TRUE(agent_->WaitForLog("(" + lower_ + " has no carrier)", kWait)) << agent_->Log();
  ASSERT_EQ(Sh("ip link set " + lower_ + "p up"), 0);
  ASSERT_TRUE(HealthyIs(kNet, 2, 2));
  ASSERT_EQ(Sh("ip link set " + lower_ + " down"), 0);
  ASSERT_TRUE(HealthyIs(kNet, 2, 0));
}

// Release: once the pod is gone, a link of its ID still in the host's
// namespace (its sandbox failed before the CNI took it) is deleted. An ID
// that is another pod's again keeps that pod's link.
TEST_F(MacvtapTest, ReleaseDeletesTheLinkAPodLeftBehind) {
  sim_pod_resources_ = dir_ / "pod-resources/kubelet.sock";
  StartSim();
  // By CDI name too (host_root is "/": the specs go to a folder of ours).
  const std::string cdi_dir = dir_ / "cdi";
  Start(Module(lower_, "capacity = 2\ncdi = \"cri\""),
        "pod_resources_socket = \"" + sim_pod_resources_ +
            "\"\npod_resources_poll = \"200ms\"\nrelease_grace = \"200ms\"\n"
            "kubelet_settle = \"500ms\"\nunseen_timeout = \"3s\"\ncdi_dir = \"" +
            cdi_dir + "\"");
  ASSERT_TRUE(Registered(kNet));
  ASSERT_TRUE(HealthyIs(kNet, 2, 2));
  cleanup_.push_back("dataplaneMvp0");
  cleanup_.push_back("dataplaneMvp1");
  const cdi::Kind kind = *cdi::KindOf(kNet);
  auto spec_of = [&](const std::string& id) {
    return cdi_dir + "/" + cdi::AllocationFileName(kind, cdi::AllocationName({id}));
  };
  auto give = [&](const std::string& id, const std::string& pod) {
    auto resp = Allocate(kNet, {id});
    EXPECT_EQ(resp.cdi_devices_size(), 1);
    sim_->BindPod("ns", pod, "compute", kNet, {id});
    EXPECT_TRUE(sim_->PreStartContainer(kNet, {id}).ok());
    return resp;
  };
  const auto resp = give("dataplaneMvp0", "vm-a");
  const auto link = Link("dataplaneMvp0");
  ASSERT_TRUE(link);
  // The /dev/tap<N> only Allocate knew, in a spec of that allocation, with
  // the node's numbers as the kernel made it.
  ASSERT_TRUE(testing::FileExists(spec_of("dataplaneMvp0")));
  {
    const auto spec = nlohmann::json::parse(testing::ReadFile(spec_of("dataplaneMvp0")));
    EXPECT_EQ(StrJoin(cdi::Validate(spec), "\n"), "") << spec.dump(1);
    const auto& node = spec["devices"][0]["containerEdits"]["deviceNodes"][0];
    EXPECT_EQ(node["path"], "/dev/tap" + std::to_string(link->ifindex));
    EXPECT_EQ(node["type"], "c");
    ASSERT_EQ(resp.devices_size(), 1);
    EXPECT_EQ(node["hostPath"], resp.devices(0).host_path());
  }
  sim_->DeletePod("ns", "vm-a");
  ASSERT_TRUE(Eventually([&] { return !Link("dataplaneMvp0"); })) << agent_->Log();
  ASSERT_TRUE(agent_->WaitForLog("deleted macvtap link dataplaneMvp0", kWait));
  EXPECT_FALSE(testing::FileExists(spec_of("dataplaneMvp0")));
  ASSERT_TRUE(HealthyIs(kNet, 2, 2));

  // vm-b's pod ends; before devplugd releases, the kubelet gives the ID to
  // vm-c, whose link must survive the release of vm-b's hold.
  give("dataplaneMvp1", "vm-b");
  sim_->DeletePod("ns", "vm-b");
  give("dataplaneMvp1", "vm-c");
  const auto held = Link("dataplaneMvp1");
  ASSERT_TRUE(held);
  ASSERT_TRUE(HealthyIs(kNet, 2, 2));
  std::this_thread::sleep_for(3s);  // past kYoungLink and several polls
  const auto after = Link("dataplaneMvp1");
  ASSERT_TRUE(after) << agent_->Log();
  EXPECT_EQ(after->ifindex, held->ifindex);
  // And vm-c's allocation spec with it.
  EXPECT_TRUE(testing::FileExists(spec_of("dataplaneMvp1")));
}

// Two resources on two lower links, each making its links on its own.
TEST_F(MacvtapTest, TwoResourcesOnTwoLowerLinks) {
  const std::string other = tag_ + "m";
  ASSERT_EQ(AddVeth(other), 0);
  StartSim();
  Start(Module(lower_, "capacity = 2") + Module(other, "capacity = 3", kNet2));
  ASSERT_TRUE(Registered(kNet));
  ASSERT_TRUE(Registered(kNet2));
  ASSERT_TRUE(HealthyIs(kNet, 2, 2));
  ASSERT_TRUE(HealthyIs(kNet2, 3, 3));
  cleanup_.push_back("dataplaneMvp1");
  cleanup_.push_back("storageMvp2");
  Allocate(kNet, {"dataplaneMvp1"});
  Allocate(kNet2, {"storageMvp2"});
  const auto a = Link("dataplaneMvp1"), b = Link("storageMvp2");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->link, Link(lower_)->ifindex);
  EXPECT_EQ(b->link, Link(other)->ifindex);
  // One lower link gone takes only its own resource's list.
  ASSERT_EQ(Sh("ip link del " + other), 0);
  ASSERT_TRUE(HealthyIs(kNet2, 0, 0));
  EXPECT_TRUE(HealthyIs(kNet, 2, 2));
}

// The lower link named by its MAC address follows a rename.
TEST_F(MacvtapTest, LowerLinkByMacAddress) {
  const auto lower = Link(lower_);
  ASSERT_TRUE(lower);
  StartSim();
  Start(Module(common::FormatHwAddress(lower->address), "capacity = 2"));
  ASSERT_TRUE(Registered(kNet));
  ASSERT_TRUE(HealthyIs(kNet, 2, 2));
  const std::string renamed = tag_ + "r";
  cleanup_.push_back(renamed);
  ASSERT_EQ(Sh("ip link set " + lower_ + " name " + renamed), 0);
  ASSERT_TRUE(agent_->WaitForLog("lower link " + renamed, kWait)) << agent_->Log();
  cleanup_.push_back("dataplaneMvp0");
  Allocate(kNet, {"dataplaneMvp0"});
  const auto link = Link("dataplaneMvp0");
  ASSERT_TRUE(link);
  EXPECT_EQ(link->link, lower->ifindex);
}

// A link of the ID's name that is not a macvtap link is never replaced.
TEST_F(MacvtapTest, ANameTakenByAnotherKindOfLinkIsLeftAlone) {
  StartSim();
  Start(Module(lower_, "capacity = 1\nlink_prefix = \"" + tag_ + "x\""));
  ASSERT_TRUE(Registered(kNet));
  ASSERT_TRUE(HealthyIs(kNet, 1, 1));
  const std::string id = tag_ + "x0";
  ASSERT_EQ(Sh("ip link add " + id + " type veth peer name " + tag_ + "y0"), 0);
  cleanup_.push_back(id);
  const auto veth = Link(id);
  grpc::Status st;
  Allocate(kNet, {id}, &st);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("a veth link named " + id), std::string::npos)
      << st.error_message();
  const auto still = Link(id);
  ASSERT_TRUE(still && veth);
  EXPECT_EQ(still->ifindex, veth->ifindex);
}

// An Allocate that fails part-way takes back the links it made already:
// no pod will ever hold them, and no release would run for them.
TEST_F(MacvtapTest, AFailedAllocateTakesBackTheLinksItMade) {
  StartSim();
  const std::string prefix = tag_ + "p";
  Start(Module(lower_, "capacity = 3\nlink_prefix = \"" + prefix + "\""));
  ASSERT_TRUE(Registered(kNet));
  ASSERT_TRUE(HealthyIs(kNet, 3, 3));
  cleanup_.push_back(prefix + "0");
  // ID 1's name is taken by a veth: the call fails at its second ID.
  ASSERT_EQ(Sh("ip link add " + prefix + "1 type veth peer name " + tag_ + "q1"), 0);
  cleanup_.push_back(prefix + "1");
  grpc::Status st;
  Allocate(kNet, {prefix + "0", prefix + "1"}, &st);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("a veth link named " + prefix + "1"), std::string::npos)
      << st.error_message();
  EXPECT_FALSE(Link(prefix + "0")) << "the first ID's link was left in the host's namespace";
  EXPECT_TRUE(Link(prefix + "1")) << "the other link was touched";
  EXPECT_TRUE(agent_->WaitForLog("took back macvtap link " + prefix + "0", kWait)) << agent_->Log();
}

// The one-prefix-per-namespace check holds across reloads: a reload that
// re-creates a macvtap resource must not erase its claim, so a later one
// that adds a second resource with the same prefix is still refused.
TEST_F(MacvtapTest, ThePrefixCheckSurvivesAReload) {
  const std::string other = tag_ + "m";
  ASSERT_EQ(AddVeth(other), 0);
  StartSim();
  const std::string prefix = "link_prefix = \"" + tag_ + "P\"";
  Start(Module(lower_, "capacity = 2\n" + prefix));
  ASSERT_TRUE(Registered(kNet));
  auto rewrite = [&](const std::string& resources) {
    std::string text = Config(resources, "0s");
    const std::string root = "host_root = \"" + host_root() + "\"";
    text.replace(text.find(root), root.size(), "host_root = \"/\"");
    WriteFile(config_path(), text);
  };
  rewrite(Module(lower_, "capacity = 3\n" + prefix));
  ASSERT_TRUE(Reload()) << agent_->Log();
  ASSERT_TRUE(HealthyIs(kNet, 3, 3));
  // A refused reload that staged the same resource changes nothing either.
  rewrite(Module(lower_, "capacity = 4\n" + prefix) +
          Resource("fake.example/broken", FakeModule("fake_createfail")));
  ASSERT_FALSE(Reload()) << agent_->Log();
  rewrite(Module(lower_, "capacity = 3\n" + prefix) +
          Module(other, "capacity = 2\n" + prefix, kNet2));
  EXPECT_FALSE(Reload()) << "a second resource took the same prefix\n" << agent_->Log();
  EXPECT_TRUE(agent_->WaitForLog("is also the prefix of " + std::string(kNet), 0s))
      << agent_->Log();
}

// netns: the links live in another network namespace (an agent in a pod
// without host networking names the host's); the node is still found.
TEST_F(MacvtapTest, WorksInTheNetworkNamespaceNamedByNetns) {
  netns_ = tag_ + "ns";
  ASSERT_EQ(Sh("ip netns add " + netns_), 0);
  ASSERT_EQ(AddVeth("inner0", netns_), 0);
  StartSim();
  Start(Module("inner0", "capacity = 2\nnetns = \"/run/netns/" + netns_ + "\""));
  ASSERT_TRUE(Registered(kNet));
  ASSERT_TRUE(HealthyIs(kNet, 2, 2));
  EXPECT_FALSE(Link("inner0")) << "inner0 leaked into our own namespace";
  const auto resp = Allocate(kNet, {"dataplaneMvp1"});
  ASSERT_EQ(resp.devices_size(), 1);
  const std::string node = resp.devices(0).host_path();
  EXPECT_TRUE(testing::FileExists(node)) << node;
  EXPECT_EQ(Sh("ip -n " + netns_ + " -d link show dataplaneMvp1 | grep -q 'macvtap mode bridge'"),
            0);
  EXPECT_FALSE(Link("dataplaneMvp1"));
  // The lower link's deletion in there reaches the kubelet too.
  ASSERT_EQ(Sh("ip -n " + netns_ + " link del inner0"), 0);
  ASSERT_TRUE(HealthyIs(kNet, 0, 0));
}

// Device IDs are link names: the resource's short name (up to 63
// characters) gives IDs too long for IFNAMSIZ, which is a config error that
// names the key and the fix; so is a prefix two resources would share.
TEST_F(MacvtapTest, IdsMustBeInterfaceNames) {
  const std::string long_name = "macvtap.network.kubevirt.io/" + std::string(63, 'n');
  struct Case {
    std::string resources, expect;
  } cases[] = {
      {Module(lower_, "socket = \"long.sock\"", long_name.c_str()),
       "resource[0].name: device IDs are also link names, which have at most 15 characters"},
      {Module(lower_, "link_prefix = \"abcdefghijklmn\"\ncapacity = 100"),
       "resource[0].link_prefix: device IDs are also link names, which have at most 15 "
       "characters: \"abcdefghijklmn99\" has 16; a prefix for capacity 100 has at most 13"},
      {Module(lower_, "link_prefix = \"a/b\""), "resource[0].link_prefix: gives link names"},
      {Module(lower_, "mode = \"passthru\"\ncapacity = 2"), "resource[0].capacity: must be 1"},
      {Module("eth0:1"), "resource[0].lower_device: \"eth0:1\" is neither an interface name"},
      {Module(lower_) + Module(lower_, "link_prefix = \"dataplaneMvp\"", kNet2),
       "resource[1].link_prefix: \"dataplaneMvp\" is also the prefix of " + std::string(kNet)},
  };
  for (const Case& c : cases) {
    WriteFile(config_path(), Config(c.resources));
    testing::RunResult r = testing::RunDevplugd({"--config", config_path(), "--check-config"});
    EXPECT_EQ(r.exit_code, 78) << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.expect << "\n" << r.output;
  }
  // 15 characters exactly is an interface name: 13 + "99".
  WriteFile(config_path(), Config(Module(lower_, "link_prefix = \"abcdefghijklm\"")));
  testing::RunResult ok = testing::RunDevplugd({"--config", config_path(), "--check-config"});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

// ABI 1.11 end to end: a macvtap device served through DRA (a fake API
// server holds the claim) makes its link at prepare, and the claim's status
// names it with the address the kernel gave it (networkData), for the tools
// that wire pods to networks; unprepare deletes the link and the entry.
TEST_F(MacvtapTest, ADraClaimsStatusNamesItsLinkAndAddress) {
  const auto api =
      testing::StartFakeApiServer(DEVPLUG_FAKE_APISERVER, dir_ / "api.port", dir_ / "api.log");
  ASSERT_GT(api.pid, 0) << testing::ReadFile(dir_ / "api.log");
  struct Stop {
    pid_t pid;
    ~Stop() { testing::StopProcess(pid, SIGTERM); }
  } stop{api.pid};
  kube::Client::Options co;
  co.credentials.server = "http://127.0.0.1:" + api.port;
  kube::Client client(co);
  const std::string registry = dir_ / "plugins_registry";
  std::filesystem::create_directories(registry);
  sim_plugins_registry_ = registry;
  sim_reconcile_period_ = std::chrono::milliseconds(200);
  StartSim();
  const std::string link = tag_ + "m0";
  cleanup_.push_back(link);
  Start(Module(lower_, "api = \"dra\"\ncapacity = 2\nlink_prefix = \"" + tag_ + "m\"",
               "net.example/mvt"),
        "plugins_registry_dir = \"" + registry + "\"\nnode_name = \"node-1\"\napi_server = \"" +
            co.credentials.server + "\"\ndra_state_dir = \"" + (dir_ / "dra") + "\"\ncdi_dir = \"" +
            (dir_ / "cdi") + "\"");
  const std::string driver = "mvt.net.example";
  ASSERT_TRUE(Eventually([&] {
    auto d = sim_->dra_driver(driver);
    return d && d->registered;
  })) << (KeepLog(), "");
  const std::string claims = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";
  nlohmann::json claim = {{"apiVersion", "resource.k8s.io/v1"},
                          {"kind", "ResourceClaim"},
                          {"metadata", {{"name", "n1"}, {"namespace", "default"}}},
                          {"status",
                           {{"allocation",
                             {{"devices",
                               {{"results", nlohmann::json::array({{{"request", "net"},
                                                                    {"driver", driver},
                                                                    {"pool", "node-1"},
                                                                    {"device", link}}})}}}}}}}};
  auto made = client.Create(claims, claim);
  ASSERT_TRUE(made.ok()) << made.status().message();
  const std::string uid = (*made)["metadata"]["uid"];
  sim::drav1::NodePrepareResourcesResponse resp;
  grpc::Status st = sim_->NodePrepareResources(driver, {{"default", uid, "n1"}}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.claims().at(uid).error(), "") << (KeepLog(), "");

  // The link the module made, and what the claim's status says of it.
  const auto made_link = Link(link);
  ASSERT_TRUE(made_link);
  EXPECT_EQ(made_link->kind, "macvtap");
  const std::string mac = common::FormatHwAddress(made_link->address);
  auto status_devices = [&]() -> nlohmann::json {
    auto got = client.Get(claims + "/n1");
    if (!got.ok() || !got->contains("status") || !(*got)["status"].contains("devices"))
      return nullptr;
    return (*got)["status"]["devices"];
  };
  nlohmann::json entry;
  ASSERT_TRUE(Eventually([&] { return !(entry = status_devices()).is_null(); }));
  ASSERT_EQ(entry.size(), 1u) << entry.dump(1);
  EXPECT_EQ(entry[0]["device"], link);
  EXPECT_EQ(entry[0]["networkData"],
            (nlohmann::json{{"interfaceName", link}, {"hardwareAddress", mac}}))
      << entry.dump(1);

  // The module keeps a link younger than 2 s (a CNI may be taking it):
  // the kubelet calls again until the unprepare succeeds, as here.
  std::string error;
  EXPECT_TRUE(Eventually([&] {
    sim::drav1::NodeUnprepareResourcesResponse un;
    grpc::Status s = sim_->NodeUnprepareResources(driver, {{"default", uid, "n1"}}, &un);
    error = s.ok() ? un.claims().at(uid).error() : s.error_message();
    return error.empty();
  })) << error;
  EXPECT_TRUE(Eventually([&] { return status_devices().is_null(); }));
  EXPECT_FALSE(Link(link)) << "the link was not deleted";
}

}  // namespace
}  // namespace devplug
