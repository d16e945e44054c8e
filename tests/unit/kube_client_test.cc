// kube::Client against a fake API server (tests/support/fake_apiserver.py,
// a child process) over real TLS: certificates made by openssl for each
// test, a bearer token in a file, and the server's own error objects.
#include "kube/client.h"
#include "kube/kubeconfig.h"
#include "model/api_server_url.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "test_util.h"

namespace devplug::kube {
namespace {

using namespace std::chrono_literals;
using devplug::testing::Eventually;
using devplug::testing::ReadFile;
using devplug::testing::SpawnProcess;
using devplug::testing::StopProcess;
using devplug::testing::TempDir;
using devplug::testing::WriteFile;

// A self-signed certificate for 127.0.0.1 (its own CA), as `name`.pem and
// `name`.key in `dir`.
bool MakeCert(const TempDir& dir, const std::string& name) {
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
      "-nodes -days 1 -subj /CN=fake-apiserver "
      "-addext subjectAltName=IP:127.0.0.1 -keyout " +
      dir / (name + ".key") + " -out " + dir / (name + ".pem") + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

class KubeClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(MakeCert(dir_, "server")) << "openssl req failed";
    WriteFile(dir_ / "token", "secret-1\n");
    StartServer({});
  }
  void TearDown() override {
    if (pid_ > 0) StopProcess(pid_, SIGTERM);
  }
  void StartServer(const std::vector<std::string>& extra) {
    if (pid_ > 0) StopProcess(pid_, SIGTERM);
    std::vector<std::string> args{"--cert",       dir_ / "server.pem", "--key", dir_ / "server.key",
                                  "--token-file", dir_ / "token"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto api = devplug::testing::StartFakeApiServer(DEVPLUG_FAKE_APISERVER, dir_ / "port",
                                                          dir_ / "server.log", args);
    pid_ = api.pid;
    ASSERT_GT(pid_, 0) << ReadFile(dir_ / "server.log");
    port_ = api.port;
  }
  Client::Options Opts() {
    Client::Options o;
    o.credentials.server = "https://127.0.0.1:" + port_;
    o.credentials.ca_file = dir_ / "server.pem";
    o.credentials.token_file = dir_ / "token";
    return o;
  }
  // What the fake server saw, oldest first.
  std::vector<Json> Requests(Client& c) {
    auto r = c.Get("/_fake/requests");
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? (*r)["items"].get<std::vector<Json>>() : std::vector<Json>{};
  }
  static Json Slice(const std::string& name, const std::string& node) {
    return {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceSlice"},
            {"metadata", {{"name", name}, {"labels", {{"owner", "devplug"}}}}},
            {"spec", {{"nodeName", node}, {"driver", "dev.example.com"}}}};
  }

  static constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";
  TempDir dir_;
  pid_t pid_ = -1;
  std::string port_;
};

TEST_F(KubeClientTest, CreatesAndReadsOverTlsWithTheClusterCaAndABearerToken) {
  Client c(Opts());
  auto made = c.Create(kSlices, Slice("node-1-dev", "node-1"));
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_FALSE((*made)["metadata"]["uid"].get<std::string>().empty());
  auto got = c.Get(std::string(kSlices) + "/node-1-dev");
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ((*got)["spec"]["nodeName"], "node-1");
  EXPECT_EQ((*got)["metadata"]["resourceVersion"], (*made)["metadata"]["resourceVersion"]);
  const std::vector<Json> seen = Requests(c);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0]["method"], "POST");
  EXPECT_EQ(seen[0]["authorization"], "Bearer secret-1");
}

TEST_F(KubeClientTest, AServerCertificateFromAnotherCaIsRefused) {
  ASSERT_TRUE(MakeCert(dir_, "other"));
  Client::Options o = Opts();
  o.credentials.ca_file = dir_ / "other.pem";
  Client c(o);
  auto got = c.Get(kSlices);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("certificate"), std::string::npos)
      << got.status().message();
}

TEST_F(KubeClientTest, AWrongTokenIsPermissionDeniedAndARotatedTokenIsReadAgain) {
  Client c(Opts());
  ASSERT_TRUE(c.Get(kSlices).ok());
  // The server's token changes (a rotated projected token): ours is stale
  // until our file changes too.
  WriteFile(dir_ / "token.server", "secret-2\n");
  StartServer({"--token-file", dir_ / "token.server"});
  Client::Options o = Opts();
  Client stale(o);
  auto got = stale.Get(kSlices);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(got.status().message().find("HTTP 401 Unauthorized"), std::string::npos)
      << got.status().message();
  // The file is replaced as the kubelet does it (a new file renamed in).
  WriteFile(dir_ / "token.new", "secret-2\n");
  ASSERT_EQ(rename((dir_ / "token.new").c_str(), (dir_ / "token").c_str()), 0);
  got = stale.Get(kSlices);
  EXPECT_TRUE(got.ok()) << got.status().message();
}

TEST_F(KubeClientTest, ListFiltersByFieldAndLabelSelectorsAndFollowsEveryPage) {
  StartServer({"--page-limit", "2"});
  Client c(Opts());
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(c.Create(kSlices, Slice("a-" + std::to_string(i), "node-1")).ok());
  ASSERT_TRUE(c.Create(kSlices, Slice("b-0", "node-2")).ok());
  auto list = c.List(kSlices, {.fields = "spec.nodeName=node-1,spec.driver=dev.example.com",
                               .labels = "owner=devplug"});
  ASSERT_TRUE(list.ok()) << list.status().message();
  ASSERT_EQ((*list)["items"].size(), 5u) << "three pages of two";
  for (const Json& item : (*list)["items"]) EXPECT_EQ(item["spec"]["nodeName"], "node-1");
  int lists = 0;
  for (const Json& r : Requests(c)) {
    if (r["method"] != "GET") continue;
    ++lists;
    EXPECT_NE(r["query"].get<std::string>().find(
                  "fieldSelector=spec.nodeName%3Dnode-1%2Cspec.driver%3Ddev.example.com"),
              std::string::npos)
        << r["query"];
  }
  EXPECT_EQ(lists, 3);
}

TEST_F(KubeClientTest, UpdateRetriesAConflictFromAFreshRead) {
  Client::Options o = Opts();
  o.conflict_retries = 2;
  Client c(o);
  ASSERT_TRUE(c.Create(kSlices, Slice("s", "node-1")).ok());
  ASSERT_TRUE(c.Create("/_fake/conflicts?count=2", Json::object()).ok());
  int changes = 0;
  auto done = c.Update(std::string(kSlices) + "/s", [&](Json& obj) {
    ++changes;
    obj["spec"]["pool"] = {{"generation", changes}};
    return OkStatus();
  });
  ASSERT_TRUE(done.ok()) << done.status().message();
  EXPECT_EQ(changes, 3);
  EXPECT_EQ((*done)["spec"]["pool"]["generation"], 3);
  // One more conflict than it may retry: ABORTED, with the server's words.
  ASSERT_TRUE(c.Create("/_fake/conflicts?count=3", Json::object()).ok());
  done = c.Update(std::string(kSlices) + "/s", [](Json&) { return OkStatus(); });
  ASSERT_FALSE(done.ok());
  EXPECT_EQ(done.status().code(), StatusCode::kAborted);
  EXPECT_NE(done.status().message().find("the object has been modified"), std::string::npos)
      << done.status().message();
  // A stale resourceVersion is a conflict without any help.
  auto current = c.Get(std::string(kSlices) + "/s");
  ASSERT_TRUE(current.ok());
  Json stale = *current;
  ASSERT_TRUE(c.Replace(std::string(kSlices) + "/s", *current).ok());
  EXPECT_EQ(c.Replace(std::string(kSlices) + "/s", stale).status().code(), StatusCode::kAborted);
}

// API Priority and Fairness: a 429 with Retry-After is asked again after
// at least that long, up to the request's timeout; what is still refused
// then is RESOURCE_EXHAUSTED with the server's words.
TEST_F(KubeClientTest, ATooManyRequestsAnswerIsAskedAgainAfterRetryAfter) {
  Client c(Opts());
  ASSERT_TRUE(c.Create(kSlices, Slice("s", "node-1")).ok());
  ASSERT_TRUE(c.Create("/_fake/throttle?count=2&retry_after=1", Json::object()).ok());
  const auto t = std::chrono::steady_clock::now();
  auto got = c.Get(std::string(kSlices) + "/s");
  const auto took = std::chrono::steady_clock::now() - t;
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_GE(took, std::chrono::seconds(2)) << "Retry-After was not waited for";
  int gets = 0;
  for (const Json& r : Requests(c))
    if (r["method"] == "GET" && r["path"] == std::string(kSlices) + "/s") ++gets;
  EXPECT_EQ(gets, 3);

  // No time left for another try within the timeout: the 429 is the answer,
  // without a wait that could not help.
  Client::Options o = Opts();
  o.timeout = std::chrono::milliseconds(900);
  Client hurried(o);
  ASSERT_TRUE(c.Create("/_fake/throttle?count=5&retry_after=1", Json::object()).ok());
  auto refused = hurried.Get(std::string(kSlices) + "/s");
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("HTTP 429 TooManyRequests"), std::string::npos)
      << refused.status().message();
  // Asked no more than it may: with retries off, one request.
  o.timeout = std::chrono::milliseconds(10'000);
  o.throttle_retries = 0;
  Client once(o);
  ASSERT_TRUE(c.Create("/_fake/throttle?count=5&retry_after=1", Json::object()).ok());
  EXPECT_EQ(once.Get(std::string(kSlices) + "/s").status().code(), StatusCode::kResourceExhausted);
}

TEST_F(KubeClientTest, ErrorsCarryTheServersCodeAndMessage) {
  Client c(Opts());
  auto missing = c.Get(std::string(kSlices) + "/nothing");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "GET /apis/resource.k8s.io/v1/resourceslices/nothing: HTTP 404 NotFound: "
            "resourceslices \"nothing\" not found");
  ASSERT_TRUE(c.Create(kSlices, Slice("s", "node-1")).ok());
  EXPECT_EQ(c.Create(kSlices, Slice("s", "node-1")).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(c.Delete(std::string(kSlices) + "/nothing").code(), StatusCode::kNotFound);
}

TEST_F(KubeClientTest, DeleteCollectionTakesOnlyWhatTheSelectorNames) {
  Client c(Opts());
  ASSERT_TRUE(c.Create(kSlices, Slice("mine-0", "node-1")).ok());
  ASSERT_TRUE(c.Create(kSlices, Slice("mine-1", "node-1")).ok());
  ASSERT_TRUE(c.Create(kSlices, Slice("theirs", "node-2")).ok());
  ASSERT_TRUE(c.DeleteCollection(kSlices, {.fields = "spec.nodeName=node-1"}).ok());
  auto left = c.List(kSlices);
  ASSERT_TRUE(left.ok());
  ASSERT_EQ((*left)["items"].size(), 1u);
  EXPECT_EQ((*left)["items"][0]["metadata"]["name"], "theirs");
}

TEST_F(KubeClientTest, ANoAnswerIsUnavailableWithinTheTimeout) {
  Client::Options o = Opts();
  o.credentials.server = "https://127.0.0.1:1";  // nothing listens there
  Client c(o);
  auto got = c.Get(kSlices);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("https://127.0.0.1:1/apis"), std::string::npos)
      << got.status().message();
}

// A server that repeats a continue token, or whose answer has no end, is an
// error, not a loop or an unbounded buffer (review, "suspected").
TEST_F(KubeClientTest, AListThatNeverEndsAndAnAnswerTooLargeAreErrors) {
  Client c(Opts());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c.Create(kSlices, Slice(StrCat("s", i), "n")).ok());
  ASSERT_TRUE(c.Create("/_fake/continue?token=1", Json::object()).ok());
  auto looped = c.List(kSlices);
  ASSERT_FALSE(looped.ok());
  EXPECT_EQ(looped.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(looped.status().message().find("continue token repeated"), std::string::npos)
      << looped.status().message();

  Client::Options small = Opts();
  small.max_response_bytes = 600;
  Client capped(small);
  auto big = capped.Get(StrCat(kSlices, "/s1"));
  EXPECT_TRUE(big.ok()) << big.status().message();
  auto whole = capped.Get(kSlices);
  ASSERT_FALSE(whole.ok());
  EXPECT_NE(whole.status().message().find("larger than 600 bytes"), std::string::npos)
      << whole.status().message();
}

// Credentials never travel over plain http to another host; loopback (the
// tests' own server) is the one exception (review D15).
// A watch's events, as another thread sees them.
class Watcher {
 public:
  Watcher(Client& c, const Selector& selector, const std::string& version,
          std::chrono::seconds timeout = 60s)
      : thread_([this, &c, selector, version, timeout] {
          Status st = c.Watch(
              "/api/v1/nodes", selector, version, timeout,
              [this](const Json& e) {
                std::lock_guard<std::mutex> lock(mu_);
                events_.push_back(StrCat(e["type"].get<std::string>(), " ",
                                         e["object"]["metadata"]["name"].get<std::string>()));
              },
              &cancel_);
          std::lock_guard<std::mutex> lock(mu_);
          result_ = std::move(st);
        }) {}
  ~Watcher() {
    cancel_.Cancel();
    thread_.join();
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  std::optional<Status> result() {
    std::lock_guard<std::mutex> lock(mu_);
    return result_;
  }
  WatchCancel cancel_;

 private:
  std::mutex mu_;
  std::vector<std::string> events_;
  std::optional<Status> result_;
  std::thread thread_;
};

Json Node(const std::string& name) {
  return {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
}

// A watch from a version hears each later change of the objects its
// selector names, and nothing else, as it happens; a cancel ends it at
// once (its 60 s timeout is far off), and the server's end of it is OK.
TEST_F(KubeClientTest, AWatchHearsEachChangeOfItsObjectsUntilCancelledOrEnded) {
  Client c(Opts());
  auto n1 = c.Create("/api/v1/nodes", Node("n1"));
  ASSERT_TRUE(n1.ok()) << n1.status().message();
  ASSERT_TRUE(c.Create("/api/v1/nodes", Node("n2")).ok());
  Client watching(Opts());
  {
    Watcher w(watching, Selector{"metadata.name=n1", ""},
              (*n1)["metadata"]["resourceVersion"].get<std::string>());
    auto label = [&](const std::string& node, const std::string& value) {
      return c
          .Update("/api/v1/nodes/" + node,
                  [&](Json& n) {
                    n["metadata"]["labels"]["devplug.io/api"] = value;
                    return OkStatus();
                  })
          .ok();
    };
    ASSERT_TRUE(label("n1", "dra"));
    ASSERT_TRUE(label("n2", "dra"));
    ASSERT_TRUE(c.Delete("/api/v1/nodes/n1").ok());
    EXPECT_TRUE(Eventually([&] { return w.events().size() == 2; }));
    EXPECT_EQ(w.events(), (std::vector<std::string>{"MODIFIED n1", "DELETED n1"}));
    EXPECT_FALSE(w.result().has_value());
    w.cancel_.Cancel();
    ASSERT_TRUE(Eventually([&] { return w.result().has_value(); }));
    EXPECT_EQ(w.result()->code(), StatusCode::kCancelled) << w.result()->message();
  }
  {
    // From no version: the current objects first, as ADDED.
    Watcher w(watching, Selector{"metadata.name=n2", ""}, "");
    ASSERT_TRUE(Eventually([&] { return w.events().size() == 1; }));
    EXPECT_EQ(w.events(), std::vector<std::string>{"ADDED n2"});
    ASSERT_TRUE(c.Create("/_fake/end_watches", Json::object()).ok());
    ASSERT_TRUE(Eventually([&] { return w.result().has_value(); }));
    EXPECT_TRUE(w.result()->ok()) << w.result()->message();
  }
  // The watch's connection was its own: the client goes on with requests.
  EXPECT_TRUE(watching.Get("/api/v1/nodes/n2").ok());
}

// A version the server no longer has is OUT_OF_RANGE (list again); a
// refused token is PERMISSION_DENIED, as for any request.
TEST_F(KubeClientTest, AWatchFromACompactedVersionIsOutOfRangeAndAWrongTokenIsDenied) {
  Client c(Opts());
  auto n1 = c.Create("/api/v1/nodes", Node("n1"));
  ASSERT_TRUE(n1.ok());
  ASSERT_TRUE(c.Update("/api/v1/nodes/n1", [](Json&) { return OkStatus(); }).ok());
  ASSERT_TRUE(c.Create("/_fake/compact", Json::object()).ok());
  WatchCancel cancel;
  int events = 0;
  Status st = c.Watch(
      "/api/v1/nodes", Selector{"metadata.name=n1", ""},
      (*n1)["metadata"]["resourceVersion"].get<std::string>(), 60s, [&](const Json&) { ++events; },
      &cancel);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.message();
  EXPECT_NE(st.message().find("HTTP 410 Expired"), std::string::npos) << st.message();
  EXPECT_EQ(events, 0);

  Client::Options o = Opts();
  o.credentials.token_file.clear();
  o.credentials.token = "wrong";
  Client stranger(o);
  st = stranger.Watch(
      "/api/v1/nodes", {}, "", 60s, [&](const Json&) { ++events; }, &cancel);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.message();
  EXPECT_EQ(events, 0);
  // Cancelled before it starts: no request at all.
  cancel.Cancel();
  st = c.Watch(
      "/api/v1/nodes", {}, "", 60s, [&](const Json&) { ++events; }, &cancel);
  EXPECT_EQ(st.code(), StatusCode::kCancelled) << st.message();
}

TEST(KubeApiServerUrlTest, PlainHttpOnlyToLoopback) {
  EXPECT_EQ(CheckApiServerUrl("https://10.96.0.1:443"), "");
  EXPECT_EQ(CheckApiServerUrl("https://api.example.com"), "");
  EXPECT_EQ(CheckApiServerUrl("http://127.0.0.1:8080"), "");
  EXPECT_EQ(CheckApiServerUrl("http://127.3.4.5"), "");
  EXPECT_EQ(CheckApiServerUrl("http://localhost:6443/"), "");
  EXPECT_EQ(CheckApiServerUrl("http://[::1]:6443"), "");
  for (const char* bad :
       {"http://10.0.0.1:6443", "http://api.example.com", "http://128.0.0.1",
        "http://localhost.evil.example", "http://[::2]:80", "ftp://x", "https://", "10.0.0.1:6443"})
    EXPECT_NE(CheckApiServerUrl(bad), "") << bad;
  EXPECT_NE(CheckApiServerUrl("http://10.0.0.1").find("in clear"), std::string::npos);

  // The client itself refuses, whatever the credentials came from.
  Client::Options o;
  o.credentials.server = "http://192.0.2.1:8080";
  o.credentials.token = "secret";
  Client c(o);
  auto r = c.Get("/api/v1/nodes");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("in clear"), std::string::npos) << r.status().message();
}

TEST(KubeInClusterTest, ReadsTheServiceAccountAndTheServiceAddress) {
  TempDir dir;
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_EQ(InCluster(dir.path()).status().code(), StatusCode::kFailedPrecondition);
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto missing = InCluster(dir.path());
  EXPECT_EQ(missing.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find("ca.crt is missing"), std::string::npos);
  WriteFile(dir / "ca.crt", "pem");
  WriteFile(dir / "token", "t");
  auto c = InCluster(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "https://[fd00::1]:443");
  EXPECT_EQ(c->ca_file, dir / "ca.crt");
  EXPECT_EQ(c->token_file, dir / "token");
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
}

TEST(KubeEscapeTest, KeepsUnreservedCharactersOnly) {
  EXPECT_EQ(Escape("spec.nodeName=a b,c/d~e_f-g"), "spec.nodeName%3Da%20b%2Cc%2Fd~e_f-g");
}

// agent.api_kubeconfig: a kubeconfig with its CA and token inline (as
// kubeadm writes admin.conf), used over real TLS.
TEST_F(KubeClientTest, AKubeconfigWithInlineCaDataAndATokenConnects) {
  ASSERT_EQ(
      std::system(("openssl base64 -A -in " + dir_ / "server.pem" + " -out " + dir_ / "server.b64")
                      .c_str()),
      0);
  const std::string kubeconfig = dir_ / "kubeconfig";
  WriteFile(kubeconfig,
            "apiVersion: v1\nkind: Config\ncurrent-context: node\nclusters:\n"
            "- name: local\n  cluster:\n    server: https://127.0.0.1:" +
                port_ + "/\n    certificate-authority-data: " + ReadFile(dir_ / "server.b64") +
                "\ncontexts:\n- name: other\n  context: {cluster: nowhere, user: x}\n"
                "- name: node\n  context:\n    cluster: local\n    user: devplugd\n"
                "users:\n- name: devplugd\n  user:\n    token: secret-1\n");
  auto creds = LoadKubeconfig(kubeconfig);
  ASSERT_TRUE(creds.ok()) << creds.status().message();
  EXPECT_EQ(creds->server, "https://127.0.0.1:" + port_);
  EXPECT_EQ(creds->ca_pem, ReadFile(dir_ / "server.pem"));
  Client::Options o;
  o.credentials = *creds;
  Client c(o);
  auto got = c.Get(kSlices);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(Requests(c).at(0)["authorization"], "Bearer secret-1");
}

// Files named relative to the kubeconfig's folder (as kubectl reads them),
// inline client certificates, and what devplugd refuses, by file and field.
TEST(KubeconfigTest, PathsAreRelativeToItsFolderAndWhatCannotWorkIsRefused) {
  const std::string head =
      "clusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1:6443\n"
      "    certificate-authority: pki/ca.crt\n"
      "contexts:\n- name: only\n  context: {cluster: c, user: u}\n"
      "users:\n- name: u\n  user:\n";
  auto files = ParseKubeconfig(head +
                                   "    client-certificate: /var/lib/kubelet/pki/k.pem\n"
                                   "    client-key: k.key\n",
                               "/etc/kubernetes/kubelet.conf");
  ASSERT_TRUE(files.ok()) << files.status().message();
  EXPECT_EQ(files->ca_file, "/etc/kubernetes/pki/ca.crt");
  EXPECT_EQ(files->client_cert, "/var/lib/kubelet/pki/k.pem");
  EXPECT_EQ(files->client_key, "/etc/kubernetes/k.key");

  auto inline_cert = ParseKubeconfig(
      head + "    client-certificate-data: Q0VSVA==\n    client-key-data: S0VZ\n", "/k");
  ASSERT_TRUE(inline_cert.ok()) << inline_cert.status().message();
  EXPECT_EQ(inline_cert->client_cert_pem, "CERT");
  EXPECT_EQ(inline_cert->client_key_pem, "KEY");
  auto token_file = ParseKubeconfig(head + "    tokenFile: token\n", "/etc/devplug/kubeconfig");
  ASSERT_TRUE(token_file.ok());
  EXPECT_EQ(token_file->token_file, "/etc/devplug/token");

  auto refused = [](const std::string& text) {
    auto c = ParseKubeconfig(text, "/etc/k.conf");
    return c.ok() ? std::string("accepted") : std::string(c.status().message());
  };
  EXPECT_EQ(refused(head + "    exec:\n      command: aws\n"),
            "/etc/k.conf: user \"u\": exec is not supported (use a token, a tokenFile, or a "
            "client certificate)");
  EXPECT_EQ(refused(head + "    client-certificate: a.pem\n"),
            "/etc/k.conf: user \"u\": a client certificate needs its key, and a key its "
            "certificate");
  EXPECT_EQ(refused(head + "    client-key-data: '!!'\n"),
            "/etc/k.conf: user \"u\": client-key-data is not base64");
  EXPECT_EQ(refused("current-context: gone\n" + head + "    token: t\n"),
            "/etc/k.conf: context \"gone\" is not defined");
  EXPECT_NE(refused(head + "    token: t\n" +
                    "clusters: [{name: c, cluster: {server: x, insecure-skip-tls-verify: true}}]\n")
                .find("is not an https:// URL"),
            std::string::npos);
  EXPECT_NE(
      refused("clusters:\n- name: c\n  cluster:\n    server: https://a\n"
              "    insecure-skip-tls-verify: true\ncontexts: [{name: x, context: {cluster: c}}]\n")
          .find("insecure-skip-tls-verify is refused"),
      std::string::npos);
  EXPECT_NE(refused("a: [b\n").find("/etc/k.conf:"), std::string::npos);
  // Every spelling YAML 1.1 reads as true (kubectl's reader) is refused;
  // spellings of false are fine (review D16).
  const std::string one_cluster =
      "contexts: [{name: x, context: {cluster: c}}]\n"
      "clusters:\n- name: c\n  cluster:\n    server: https://a\n";
  for (const char* yes : {"true", "True", "TRUE", "yes", "Yes", "on", "y", "\"true\""})
    EXPECT_NE(refused(one_cluster + "    insecure-skip-tls-verify: " + yes + "\n")
                  .find("insecure-skip-tls-verify is refused"),
              std::string::npos)
        << yes;
  for (const char* no : {"false", "False", "no", "off"})
    EXPECT_EQ(refused(one_cluster + "    insecure-skip-tls-verify: " + no + "\n"), "accepted")
        << no;
  // What would change where devplugd connects, or as whom, is refused by
  // field, not ignored.
  EXPECT_EQ(refused(one_cluster + "    tls-server-name: api.internal\n"),
            "/etc/k.conf: cluster \"c\": tls-server-name is not supported (devplugd connects to "
            "the server's own name, directly)");
  EXPECT_NE(refused(one_cluster + "    proxy-url: http://proxy:3128\n").find("proxy-url"),
            std::string::npos);
  EXPECT_EQ(refused(head + "    token: t\n    as: admin\n"),
            "/etc/k.conf: user \"u\": as (impersonation) is not supported: give the identity "
            "itself");
  EXPECT_NE(refused(head + "    token: t\n    as-groups: [system:masters]\n").find("as-groups"),
            std::string::npos);
  EXPECT_NE(refused("contexts: [{name: x, context: {cluster: c}}]\n"
                    "clusters:\n- name: c\n  cluster:\n    server: http://10.0.0.1:8080\n")
                .find("in clear"),
            std::string::npos);
  EXPECT_EQ(refused("just text\n"), "/etc/k.conf: not a kubeconfig (no mapping at the top)");
  // Aliases that multiply by ten at each of eight levels (10^9 nodes) are
  // cut at a bound, not expanded.
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    const std::string prev(1, static_cast<char>(c - 1));
    bomb += std::string(1, c) + ": &" + std::string(1, c) + " [";
    for (int i = 0; i < 10; ++i) bomb += (i ? ", *" : "*") + prev;
    bomb += "]\n";
  }
  EXPECT_NE(refused(bomb).find("YAML nodes (aliases that expand?)"), std::string::npos);
}

}  // namespace
}  // namespace devplug::kube
