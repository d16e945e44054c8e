// NodeLabelWatch against the fake API server (tests/support/fake_apiserver.py,
// plain HTTP on loopback): what it hears, how it resumes, and what it asks
// the server.
#include "node_labels.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kube/client.h"
#include "test_util.h"

namespace devplug {
namespace {

using namespace std::chrono_literals;
using devplug::testing::Eventually;
using devplug::testing::ReadFile;
using devplug::testing::StopProcess;
using devplug::testing::TempDir;
using kube::Json;

class NodeLabelWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto api = devplug::testing::StartFakeApiServer(DEVPLUG_FAKE_APISERVER, dir_ / "port",
                                                          dir_ / "server.log", {});
    pid_ = api.pid;
    ASSERT_GT(pid_, 0) << ReadFile(dir_ / "server.log");
    creds_.server = "http://127.0.0.1:" + api.port;
    kube::Client::Options o;
    o.credentials = creds_;
    api_ = std::make_unique<kube::Client>(o);
    ASSERT_TRUE(MakeNode());
  }
  // Node n1, labelled devplug.io/api=dra.
  bool MakeNode() {
    return api_
        ->Create("/api/v1/nodes",
                 Json{{"apiVersion", "v1"},
                      {"kind", "Node"},
                      {"metadata", {{"name", "n1"}, {"labels", {{"devplug.io/api", "dra"}}}}}})
        .ok();
  }
  void TearDown() override {
    watch_.reset();
    if (pid_ > 0) StopProcess(pid_, SIGTERM);
  }
  void StartWatch() {
    NodeLabelWatch::Options o;
    o.credentials = creds_;
    o.credentials.token = "watcher";  // its requests, told from the test's own
    o.node = "n1";
    o.label = "devplug.io/api";
    o.call_timeout = 5s;
    o.backoff_first = 50ms;
    o.backoff_max = 400ms;
    watch_ = std::make_unique<NodeLabelWatch>(o, [this](const std::optional<std::string>& v) {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back(v ? *v : "<unset>");
    });
  }
  std::vector<std::string> Seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  std::string Last() {
    auto s = Seen();
    return s.empty() ? "" : s.back();
  }
  bool Label(const std::optional<std::string>& value) {
    return api_
        ->Update("/api/v1/nodes/n1",
                 [&](Json& n) {
                   if (value)
                     n["metadata"]["labels"]["devplug.io/api"] = *value;
                   else
                     n["metadata"]["labels"].erase("devplug.io/api");
                   return OkStatus();
                 })
        .ok();
  }
  bool Fake(const std::string& what) { return api_->Create("/_fake/" + what, Json::object()).ok(); }
  // The watch's requests so far: "LIST", "WATCH@<version>".
  std::vector<std::string> NodeRequests() {
    std::vector<std::string> out;
    auto r = api_->Get("/_fake/requests");
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return out;
    for (const Json& q : (*r)["items"]) {
      const std::string path = q["path"], query = q["query"];
      if (q["authorization"] != "Bearer watcher") continue;
      if (path != "/api/v1/nodes") continue;
      EXPECT_NE(query.find("fieldSelector=metadata.name%3Dn1"), std::string::npos) << query;
      if (query.find("watch=1") == std::string::npos) {
        out.push_back("LIST");
      } else {
        const size_t at = query.find("resourceVersion=");
        out.push_back("WATCH@" + (at == std::string::npos
                                      ? std::string()
                                      : query.substr(at + 16, query.find('&', at) - at - 16)));
      }
    }
    return out;
  }
  // The store's version now (a list's).
  std::string Version() {
    auto n = api_->List("/api/v1/nodes");
    return n.ok() ? (*n)["metadata"]["resourceVersion"].get<std::string>() : "";
  }

  TempDir dir_;
  pid_t pid_ = -1;
  kube::Credentials creds_;
  std::unique_ptr<kube::Client> api_;
  std::unique_ptr<NodeLabelWatch> watch_;
  std::mutex mu_;
  std::vector<std::string> seen_;
};

// One list, then one watch that hears every change of the Node (the label's
// value each time, changed or not), and no other request while nothing
// happens.
TEST_F(NodeLabelWatchTest, HearsTheLabelAfterOneListAndAtEachChangeOfTheNode) {
  StartWatch();
  ASSERT_TRUE(Eventually([&] { return Seen().size() == 1; }));
  EXPECT_EQ(Last(), "dra");
  ASSERT_TRUE(Eventually([&] { return NodeRequests().size() == 2; }));
  ASSERT_TRUE(Label("device-plugin"));
  ASSERT_TRUE(Eventually([&] { return Last() == "device-plugin"; }))
      << ::testing::PrintToString(Seen());
  ASSERT_TRUE(Label(std::nullopt));
  ASSERT_TRUE(Eventually([&] { return Last() == "<unset>"; })) << ::testing::PrintToString(Seen());
  ASSERT_TRUE(api_->Update("/api/v1/nodes/n1",
                           [](Json& n) {
                             n["status"]["allocatable"]["fuse"] = "0";
                             return OkStatus();
                           })
                  .ok());
  ASSERT_TRUE(Eventually([&] { return Seen().size() == 4; })) << ::testing::PrintToString(Seen());
  EXPECT_EQ(Seen(), (std::vector<std::string>{"dra", "device-plugin", "<unset>", "<unset>"}));
  // A deleted Node tells nothing; one made again is heard.
  ASSERT_TRUE(api_->Delete("/api/v1/nodes/n1").ok());
  ASSERT_TRUE(MakeNode());
  ASSERT_TRUE(Eventually([&] { return Seen().size() == 5; })) << ::testing::PrintToString(Seen());
  EXPECT_EQ(Last(), "dra");
  const auto requests = NodeRequests();
  ASSERT_EQ(requests.size(), 2u) << ::testing::PrintToString(requests);
  EXPECT_EQ(requests[0], "LIST");
}

// A watch the server ends is resumed from the last version seen, with no
// list; one whose version is too old (410) lists the Node again; errors
// (429 here) are waited out and the watch goes on.
TEST_F(NodeLabelWatchTest, ResumesFromItsVersionAndReadsAgainAfterA410) {
  StartWatch();
  ASSERT_TRUE(Eventually([&] { return NodeRequests().size() == 2; }));
  ASSERT_TRUE(Label("device-plugin"));
  ASSERT_TRUE(Eventually([&] { return Last() == "device-plugin"; }));
  const std::string version = Version();
  ASSERT_TRUE(Fake("end_watches"));
  ASSERT_TRUE(Eventually([&] { return NodeRequests().size() == 3; }));
  EXPECT_EQ(NodeRequests()[2], "WATCH@" + version) << ::testing::PrintToString(NodeRequests());
  ASSERT_TRUE(Label("dra"));
  ASSERT_TRUE(Eventually([&] { return Last() == "dra"; }));

  // Another Node changes: the store's version moves past the one the
  // watch of n1 saw last, and the server forgets what came before.
  ASSERT_TRUE(api_->Create("/api/v1/nodes", Json{{"metadata", {{"name", "n2"}}}}).ok());
  ASSERT_TRUE(Fake("compact"));
  ASSERT_TRUE(Fake("end_watches"));
  // WATCH (410), LIST, WATCH from the list's version.
  ASSERT_TRUE(Eventually([&] { return NodeRequests().size() == 6; }))
      << ::testing::PrintToString(NodeRequests());
  auto requests = NodeRequests();
  EXPECT_EQ(requests[4], "LIST") << ::testing::PrintToString(requests);
  EXPECT_EQ(requests[5], "WATCH@" + Version()) << ::testing::PrintToString(requests);
  EXPECT_EQ(Seen().size(), 4u) << ::testing::PrintToString(Seen());  // the list tells again

  // Two 429s with Retry-After: 1 are two waits of at least a second each.
  ASSERT_TRUE(api_->Create("/_fake/throttle?count=2&retry_after=1", Json::object()).ok());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(Fake("end_watches"));
  ASSERT_TRUE(Eventually([&] { return NodeRequests().size() == 9; }))
      << ::testing::PrintToString(NodeRequests());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 2s);
  ASSERT_TRUE(Label("device-plugin"));
  ASSERT_TRUE(Eventually([&] { return Last() == "device-plugin"; }));
}

// The destructor ends a watch that waits on the server at once (no event
// would come for a minute).
TEST_F(NodeLabelWatchTest, StopsWhileWatching) {
  StartWatch();
  ASSERT_TRUE(Eventually([&] { return NodeRequests().size() == 2; }));
  const auto t0 = std::chrono::steady_clock::now();
  watch_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

}  // namespace
}  // namespace devplug
