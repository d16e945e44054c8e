// A thin client of the Kubernetes API server: JSON over HTTPS (libcurl),
// the cluster's CA, a bearer token (re-read from its file when it changes:
// projected service account tokens rotate) or a client certificate, and
// the verbs a node driver needs: get, list (field and label selectors,
// pages followed), create, replace, update with conflict retries, delete
// and delete-collection, and a watch of a collection. Errors carry the API server's own message and
// map its HTTP code to a StatusCode (404 NOT_FOUND, 409 ABORTED for a stale resourceVersion and
// ALREADY_EXISTS for a name taken, 401/403 PERMISSION_DENIED, 5xx and transport errors
// UNAVAILABLE).
//
// Thread safety: thread-safe; calls run one at a time over one connection.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "util/mutex.h"
#include "util/status.h"

namespace devplug::kube {

using Json = nlohmann::json;

// Where the API server is and how devplugd proves who it is.
struct Credentials {
  std::string server;      // "https://10.96.0.1:443"
  std::string ca_file;     // PEM the server's certificate must chain to ("": the system's)
  std::string token_file;  // a bearer token, read again whenever the file changes
  std::string token;       // a fixed bearer token (when there is no token_file)
  std::string client_cert, client_key;  // PEM files: a client certificate instead of a token
  // The same in memory (a kubeconfig's *-data fields), used where the file
  // name is empty.
  std::string ca_pem, client_cert_pem, client_key_pem;
  bool operator==(const Credentials&) const = default;
};

// The pod's service account: KUBERNETES_SERVICE_HOST and _PORT, and
// `dir`'s ca.crt and token.
StatusOr<Credentials> InCluster(
    const std::string& dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// ?fieldSelector=...&labelSelector=... ("" leaves one out).
struct Selector {
  std::string fields;  // "spec.nodeName=node-1,spec.driver=dev.example.com"
  std::string labels;
};

// Ends a Client::Watch from another thread, at once: its connection is
// shut down, so the watch returns without waiting for the server.
class WatchCancel {
 public:
  void Cancel() DEVPLUG_EXCLUDES(mu_);
  bool cancelled() const DEVPLUG_EXCLUDES(mu_);

 private:
  friend class Client;
  // The watch's socket opened (-1: closed); false when cancelled already.
  bool Opened(int fd) DEVPLUG_EXCLUDES(mu_);
  mutable Mutex mu_;
  int fd_ DEVPLUG_GUARDED_BY(mu_) = -1;
  bool cancelled_ DEVPLUG_GUARDED_BY(mu_) = false;
};

class Client {
 public:
  struct Options {
    Credentials credentials;
    std::chrono::milliseconds timeout{10'000};  // per request, connecting included
    int conflict_retries = 5;                   // Update: fresh GETs after a 409
    // A 429 (API Priority and Fairness) or 503 with Retry-After is asked
    // again after that many seconds (plus up to a quarter more, so that a
    // fleet told alike does not come back in step), up to this many times
    // and while the request's timeout allows; then it is the error.
    int throttle_retries = 10;
    int64_t page_size = 500;                // List: items per page (0: no limit)
    int64_t max_pages = 10'000;             // List: more pages than this is an error
    size_t max_response_bytes = 64u << 20;  // a longer answer is an error, not read
    std::string user_agent = "devplug";
  };
  explicit Client(Options options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // `path` is the API path: "/apis/resource.k8s.io/v1/resourceslices/x".
  StatusOr<Json> Get(const std::string& path);
  // Every item of a collection, all pages: {"items": [...], "metadata":
  // {"resourceVersion": the first page's}}.
  StatusOr<Json> List(const std::string& path, const Selector& selector = {});
  StatusOr<Json> Create(const std::string& collection, const Json& object);
  // PUT: `object` carries the resourceVersion it was read at; a newer one
  // on the server is ABORTED (409 Conflict).
  StatusOr<Json> Replace(const std::string& path, const Json& object);
  // GET, `change`, PUT; after a conflict, again from a fresh GET, up to
  // conflict_retries times. `change` may stop it with an error.
  StatusOr<Json> Update(const std::string& path, const std::function<Status(Json&)>& change);
  Status Delete(const std::string& path);
  // `timeout`: this request's own, instead of Options::timeout (an exit's).
  Status DeleteCollection(const std::string& collection, const Selector& selector,
                          std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // Watches a collection (`selector`'s objects) from `resource_version`:
  // each event ({"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK", "object":
  // ...}) reaches `on_event` as it arrives. The server ends the watch after
  // `timeout` (timeoutSeconds); that is OK. Otherwise an error: OUT_OF_RANGE
  // for 410 Gone (the version is too old: list again), CANCELLED after
  // `cancel`, the API server's or the transport's error else (a 429's or
  // 503's Retry-After in *retry_after when given). It holds this client's
  // connection throughout (and opens a fresh one, which `cancel` can shut
  // down): a watcher has a client of its own.
  Status Watch(const std::string& collection, const Selector& selector,
               const std::string& resource_version, std::chrono::seconds timeout,
               const std::function<void(const Json& event)>& on_event, WatchCancel* cancel,
               std::chrono::seconds* retry_after = nullptr);

 private:
  struct Response {
    long code = 0;
    std::string body;
    int64_t retry_after_s = 0;  // the Retry-After header's seconds (0: none)
  };
  struct Stream;  // a watch's events as they arrive
  // One request; Call repeats it while the server asks to (Retry-After).
  // `stream`: the body goes there as it arrives (a watch).
  StatusOr<Response> CallOnce(const char* method, const std::string& path_and_query,
                              const std::string* body, std::chrono::milliseconds timeout,
                              Stream* stream = nullptr) DEVPLUG_EXCLUDES(mu_);
  StatusOr<Response> Call(const char* method, const std::string& path_and_query,
                          const std::string* body,
                          std::optional<std::chrono::milliseconds> timeout = std::nullopt)
      DEVPLUG_EXCLUDES(mu_);
  // The Authorization header, from the token file when it changed.
  std::string Bearer() DEVPLUG_REQUIRES(mu_);

  const Options options_;
  Mutex mu_;
  void* curl_ DEVPLUG_GUARDED_BY(mu_) = nullptr;  // CURL*
  std::string token_ DEVPLUG_GUARDED_BY(mu_);
  int64_t token_mtime_ns_ DEVPLUG_GUARDED_BY(mu_) = -1;
};

// A query string's value, %-escaped.
std::string Escape(const std::string& text);

}  // namespace devplug::kube
