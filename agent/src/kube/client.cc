#include "kube/client.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "model/api_server_url.h"

namespace devplug::kube {
namespace {

// A request asked again after a Retry-After gets at least this long.
constexpr std::chrono::milliseconds kMinAttempt{200};
// A Retry-After longer than this is taken as this.
constexpr int64_t kMaxRetryAfterS = 60;

// libcurl, loaded when the first client is made: devplugd links no libcurl,
// so a node serving only the device plugin API never maps it and its
// dependencies (about 20 libraries: a slower start, and 5 MiB of pages).
// The headers still give its types and constants; the ABI is libcurl.so.4's.
struct Curl {
  std::string error;  // why it could not be loaded ("": loaded)
  CURLcode (*global_init)(long);
  CURL* (*easy_init)();
  void (*easy_cleanup)(CURL*);
  void (*easy_reset)(CURL*);
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_perform)(CURL*);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  const char* (*easy_strerror)(CURLcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);
};

template <typename F>
bool Bind(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

const Curl& LoadCurl() {
  static const Curl curl = [] {
    Curl c{};
    void* lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      c.error =
          StrCat("libcurl.so.4 cannot be loaded (install libcurl4): ", why ? why : "unknown error");
      return c;
    }
    const bool ok = Bind(lib, "curl_global_init", &c.global_init) &&
                    Bind(lib, "curl_easy_init", &c.easy_init) &&
                    Bind(lib, "curl_easy_cleanup", &c.easy_cleanup) &&
                    Bind(lib, "curl_easy_reset", &c.easy_reset) &&
                    Bind(lib, "curl_easy_setopt", &c.easy_setopt) &&
                    Bind(lib, "curl_easy_perform", &c.easy_perform) &&
                    Bind(lib, "curl_easy_getinfo", &c.easy_getinfo) &&
                    Bind(lib, "curl_easy_strerror", &c.easy_strerror) &&
                    Bind(lib, "curl_slist_append", &c.slist_append) &&
                    Bind(lib, "curl_slist_free_all", &c.slist_free_all);
    if (!ok) {
      c.error = "libcurl.so.4 lacks a function devplugd calls";
      return c;
    }
    c.global_init(CURL_GLOBAL_DEFAULT);  // once, before any handle
    return c;
  }();
  return curl;
}

// The body of an answer, up to a cap: past it the transfer stops (libcurl
// sees a short write) and `over` says why.
struct Body {
  std::string text;
  size_t cap = 0;
  bool over = false;
};

size_t Collect(char* data, size_t size, size_t n, void* out) {
  Body* body = static_cast<Body*>(out);
  if (body->text.size() + size * n > body->cap) {
    body->over = true;
    return 0;
  }
  body->text.append(data, size * n);
  return size * n;
}

std::string Trim(std::string s) {
  const size_t end = s.find_last_not_of(" \t\r\n");
  s.erase(end == std::string::npos ? 0 : end + 1);
  return s.substr(std::min(s.size(), s.find_first_not_of(" \t\r\n")));
}

StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError(StrCat("cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The API server's answer to a request that failed, as a Status: its own
// message (a metav1.Status), the HTTP code and the request's verb and path.
Status ErrorOf(long code, const std::string& body, const char* method, const std::string& path) {
  std::string message, reason;
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    if (j.contains("message") && j["message"].is_string()) message = j["message"];
    if (j.contains("reason") && j["reason"].is_string()) reason = j["reason"];
  }
  if (message.empty()) message = body.substr(0, 200);
  const std::string text = StrCat(method, " ", path.substr(0, path.find('?')), ": HTTP ", code,
                                  reason.empty() ? "" : StrCat(" ", reason), ": ", message);
  switch (code) {
    case 400:
    case 422:
      return InvalidArgumentError(text);
    case 401:
    case 403:
      return Status(StatusCode::kPermissionDenied, text);
    case 404:
      return NotFoundError(text);
    case 409:
      return reason == "AlreadyExists" ? Status(StatusCode::kAlreadyExists, text)
                                       : Status(StatusCode::kAborted, text);
    case 410:
      return Status(StatusCode::kOutOfRange, text);  // a continue token that expired
    case 429:
      return Status(StatusCode::kResourceExhausted, text);
    default:
      return UnavailableError(text);
  }
}

std::string Query(const Selector& selector) {
  std::string q;
  auto add = [&](const char* key, const std::string& value) {
    if (value.empty()) return;
    q += q.empty() ? "?" : "&";
    q += StrCat(key, "=", Escape(value));
  };
  add("fieldSelector", selector.fields);
  add("labelSelector", selector.labels);
  return q;
}

}  // namespace

// A watch's answer as it arrives: whole lines are events; a body that is not
// a 200's (an error) is kept for the message.
struct Client::Stream {
  const std::function<void(const Json&)>& on_event;
  WatchCancel* cancel;
  const std::string& collection;
  size_t cap;
  void* curl = nullptr;    // CURL*: the answer's code, from inside the write
  std::string pending;     // the part of a line not yet ended
  std::string error_body;  // a non-200 answer
  Status error;            // an ERROR event, or a line that is no JSON

  static size_t Write(char* data, size_t size, size_t n, void* out) {
    Stream* s = static_cast<Stream*>(out);
    const size_t len = size * n;
    long code = 0;
    LoadCurl().easy_getinfo(static_cast<CURL*>(s->curl), CURLINFO_RESPONSE_CODE, &code);
    if (code != 200) {
      s->error_body.append(data,
                           std::min(len, 4096 - std::min<size_t>(4096, s->error_body.size())));
      return len;
    }
    s->pending.append(data, len);
    size_t start = 0;
    for (size_t end; (end = s->pending.find('\n', start)) != std::string::npos; start = end + 1) {
      const std::string_view line(s->pending.data() + start, end - start);
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      Json event = Json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!event.is_object()) {
        s->error = UnavailableError(StrCat("watch of ", s->collection, ": an event is not JSON"));
        return 0;
      }
      const auto type = event.find("type");
      if (type != event.end() && type->is_string() && *type == "ERROR") {
        const Json object = event.value("object", Json::object());
        const long status =
            object.is_object() && object.contains("code") && object["code"].is_number_integer()
                ? object["code"].get<long>()
                : 500;
        s->error = ErrorOf(status, object.dump(), "WATCH", s->collection);
        return 0;
      }
      s->on_event(event);
    }
    s->pending.erase(0, start);
    if (s->pending.size() > s->cap) {
      s->error = UnavailableError(
          StrCat("watch of ", s->collection, ": an event is larger than ", s->cap, " bytes"));
      return 0;
    }
    return len;
  }
  // The watch's own connection, which WatchCancel can shut down.
  static curl_socket_t Open(void* out, curlsocktype, curl_sockaddr* address) {
    Stream* s = static_cast<Stream*>(out);
    const int fd = socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
    if (fd < 0) return CURL_SOCKET_BAD;
    if (s->cancel != nullptr && !s->cancel->Opened(fd)) {
      close(fd);
      return CURL_SOCKET_BAD;
    }
    return fd;
  }
  static int Close(void* out, curl_socket_t fd) {
    Stream* s = static_cast<Stream*>(out);
    if (s->cancel != nullptr) s->cancel->Opened(-1);
    return close(fd);
  }
};

void WatchCancel::Cancel() {
  MutexLock lock(mu_);
  cancelled_ = true;
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

bool WatchCancel::cancelled() const {
  MutexLock lock(mu_);
  return cancelled_;
}

bool WatchCancel::Opened(int fd) {
  MutexLock lock(mu_);
  fd_ = fd;
  return !cancelled_;
}

std::string Escape(const std::string& text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

StatusOr<Credentials> InCluster(const std::string& dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr || *host == '\0' || *port == '\0')
    return FailedPreconditionError(
        "not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set");
  Credentials c;
  const std::string h = host;
  // An IPv6 service address goes in brackets.
  c.server =
      StrCat("https://", h.find(':') != std::string::npos ? StrCat("[", h, "]") : h, ":", port);
  c.ca_file = dir + "/ca.crt";
  c.token_file = dir + "/token";
  for (const std::string& f : {c.ca_file, c.token_file}) {
    struct stat st;
    if (stat(f.c_str(), &st) != 0)
      return FailedPreconditionError(StrCat("no service account credentials: ", f, " is missing"));
  }
  return c;
}

Client::Client(Options options) : options_(std::move(options)) {
  const Curl& lib = LoadCurl();
  MutexLock lock(mu_);
  if (lib.error.empty()) curl_ = lib.easy_init();
  token_ = options_.credentials.token;
}

Client::~Client() {
  MutexLock lock(mu_);
  if (curl_ != nullptr) LoadCurl().easy_cleanup(static_cast<CURL*>(curl_));
}

std::string Client::Bearer() {
  const std::string& file = options_.credentials.token_file;
  if (!file.empty()) {
    struct stat st;
    const int64_t mtime =
        stat(file.c_str(), &st) == 0
            ? static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec
            : -1;
    if (mtime != token_mtime_ns_) {
      // Kept as it was when the file cannot be read: the next request tries again.
      if (auto text = ReadAll(file); text.ok()) {
        token_ = Trim(*text);
        token_mtime_ns_ = mtime;
      }
    }
  }
  return token_.empty() ? std::string() : StrCat("Authorization: Bearer ", token_);
}

StatusOr<Client::Response> Client::Call(const char* method, const std::string& path_and_query,
                                        const std::string* body,
                                        std::optional<std::chrono::milliseconds> timeout) {
  using Clock = std::chrono::steady_clock;
  const std::chrono::milliseconds limit = timeout.value_or(options_.timeout);
  const auto until = Clock::now() + limit;
  for (int retries = 0;; ++retries) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    StatusOr<Response> r =
        CallOnce(method, path_and_query, body, retries == 0 ? limit : std::max(left, kMinAttempt));
    if (!r.ok() || (r->code != 429 && r->code != 503) || r->retry_after_s <= 0 ||
        retries >= options_.throttle_retries)
      return r;
    // Retry-After, plus up to a quarter more: agents told alike spread.
    thread_local std::minstd_rand jitter(
        static_cast<uint32_t>(std::hash<std::thread::id>()(std::this_thread::get_id()) ^
                              static_cast<size_t>(Clock::now().time_since_epoch().count())));
    const int64_t base_ms = std::min<int64_t>(r->retry_after_s, kMaxRetryAfterS) * 1000;
    const auto wait = std::chrono::milliseconds(
        base_ms + static_cast<int64_t>(jitter() % static_cast<uint32_t>(base_ms / 4 + 1)));
    if (Clock::now() + wait + kMinAttempt > until) return r;  // no time for another
    std::this_thread::sleep_for(wait);
  }
}

StatusOr<Client::Response> Client::CallOnce(const char* method, const std::string& path_and_query,
                                            const std::string* body,
                                            std::chrono::milliseconds timeout, Stream* stream) {
  MutexLock lock(mu_);
  const Curl& lib = LoadCurl();
  if (!lib.error.empty()) return UnavailableError(lib.error);
  CURL* curl = static_cast<CURL*>(curl_);
  if (curl == nullptr) return InternalError("curl_easy_init failed");
  // Options go back to their defaults; the connection and TLS session stay.
  lib.easy_reset(curl);
  const Credentials& c = options_.credentials;
  // Whatever the credentials came from: nothing goes over plain HTTP to
  // another host.
  if (std::string why = CheckApiServerUrl(c.server); !why.empty())
    return FailedPreconditionError(StrCat("API server ", why));
  const std::string url = c.server + path_and_query;
  Response response;
  char error[CURL_ERROR_SIZE] = {0};
  curl_slist* headers = nullptr;
  headers = lib.slist_append(headers, "Accept: application/json");
  if (body) headers = lib.slist_append(headers, "Content-Type: application/json");
  const std::string bearer = c.client_cert.empty() ? Bearer() : std::string();
  if (!bearer.empty()) headers = lib.slist_append(headers, bearer.c_str());
  lib.easy_setopt(curl, CURLOPT_URL, url.c_str());
  lib.easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
  lib.easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  lib.easy_setopt(curl, CURLOPT_USERAGENT, options_.user_agent.c_str());
  lib.easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  const long timeout_ms = static_cast<long>(timeout.count());
  lib.easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  lib.easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  lib.easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  Body collected{{}, options_.max_response_bytes, false};
  if (stream == nullptr) {
    lib.easy_setopt(curl, CURLOPT_WRITEFUNCTION, Collect);
    lib.easy_setopt(curl, CURLOPT_WRITEDATA, &collected);
  } else {
    // A watch: events as they come, on a connection of its own that is
    // closed after it (so that a cancel shuts down this one only).
    stream->curl = curl;
    lib.easy_setopt(curl, CURLOPT_WRITEFUNCTION, Stream::Write);
    lib.easy_setopt(curl, CURLOPT_WRITEDATA, stream);
    lib.easy_setopt(curl, CURLOPT_FRESH_CONNECT, 1L);
    lib.easy_setopt(curl, CURLOPT_FORBID_REUSE, 1L);
    lib.easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, Stream::Open);
    lib.easy_setopt(curl, CURLOPT_OPENSOCKETDATA, stream);
    lib.easy_setopt(curl, CURLOPT_CLOSESOCKETFUNCTION, Stream::Close);
    lib.easy_setopt(curl, CURLOPT_CLOSESOCKETDATA, stream);
    lib.easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
    lib.easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.timeout.count()));
  }
  lib.easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "https,http");
  if (!c.ca_file.empty()) lib.easy_setopt(curl, CURLOPT_CAINFO, c.ca_file.c_str());
  if (!c.client_cert.empty()) {
    lib.easy_setopt(curl, CURLOPT_SSLCERT, c.client_cert.c_str());
    lib.easy_setopt(curl, CURLOPT_SSLKEY, c.client_key.c_str());
  }
  // PEM in memory (a kubeconfig's *-data): libcurl copies each blob.
  auto blob = [&](CURLoption option, const std::string& pem) {
    if (pem.empty()) return;
    curl_blob b{const_cast<char*>(pem.data()), pem.size(), CURL_BLOB_COPY};
    lib.easy_setopt(curl, option, &b);
  };
  if (c.ca_file.empty()) blob(CURLOPT_CAINFO_BLOB, c.ca_pem);
  if (c.client_cert.empty()) {
    blob(CURLOPT_SSLCERT_BLOB, c.client_cert_pem);
    blob(CURLOPT_SSLKEY_BLOB, c.client_key_pem);
  }
  if (body) {
    lib.easy_setopt(curl, CURLOPT_POSTFIELDS, body->data());
    lib.easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  }
  const CURLcode rc = lib.easy_perform(curl);
  lib.slist_free_all(headers);
  if (collected.over)
    return UnavailableError(
        StrCat(method, " ", c.server, path_and_query.substr(0, path_and_query.find('?')),
               ": the answer is larger than ", options_.max_response_bytes, " bytes; not read"));
  response.body = std::move(collected.text);
  if (rc != CURLE_OK)
    return UnavailableError(StrCat(method, " ", c.server,
                                   path_and_query.substr(0, path_and_query.find('?')), ": ",
                                   error[0] ? error : lib.easy_strerror(rc)));
  lib.easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.code);
  curl_off_t retry_after = 0;  // seconds; libcurl reads the header (an HTTP date too)
  if (lib.easy_getinfo(curl, CURLINFO_RETRY_AFTER, &retry_after) == CURLE_OK && retry_after > 0)
    response.retry_after_s = static_cast<int64_t>(retry_after);
  return response;
}

namespace {

StatusOr<Json> Parse(const std::string& body, const char* method, const std::string& path) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return UnavailableError(StrCat(method, " ", path, ": the answer is not JSON"));
  return j;
}

}  // namespace

StatusOr<Json> Client::Get(const std::string& path) {
  auto r = Call("GET", path, nullptr);
  if (!r.ok()) return r.status();
  if (r->code != 200) return ErrorOf(r->code, r->body, "GET", path);
  return Parse(r->body, "GET", path);
}

StatusOr<Json> Client::List(const std::string& path, const Selector& selector) {
  Json all = {{"items", Json::array()}, {"metadata", Json::object()}};
  std::string next;
  int64_t pages = 0;
  for (bool first = true; first || !next.empty(); first = false) {
    std::string query = Query(selector);
    if (options_.page_size > 0)
      query += StrCat(query.empty() ? "?" : "&", "limit=", options_.page_size);
    if (!next.empty()) query += StrCat(query.empty() ? "?" : "&", "continue=", Escape(next));
    auto page = Get(path + query);
    if (!page.ok()) return page.status();
    if (!page->is_object())
      return UnavailableError(StrCat("GET ", path, ": a page of the list is not an object"));
    if (page->contains("items") && (*page)["items"].is_array())
      for (auto& item : (*page)["items"]) all["items"].push_back(std::move(item));
    const Json meta = page->value("metadata", Json::object());
    if (first && meta.is_object() && meta.contains("resourceVersion"))
      all["metadata"]["resourceVersion"] = meta["resourceVersion"];
    std::string token =
        meta.is_object() && meta.contains("continue") && meta["continue"].is_string()
            ? meta["continue"].get<std::string>()
            : std::string();
    // A server that hands back a token it was just given would loop for
    // ever; so would one whose pages never end.
    if (!token.empty() && (token == next || ++pages > options_.max_pages))
      return UnavailableError(StrCat("GET ", path, ": the list does not end (continue token ",
                                     token == next ? "repeated" : "after too many pages", ")"));
    next = std::move(token);
  }
  return all;
}

StatusOr<Json> Client::Create(const std::string& collection, const Json& object) {
  const std::string body = object.dump();
  auto r = Call("POST", collection, &body);
  if (!r.ok()) return r.status();
  if (r->code != 200 && r->code != 201 && r->code != 202)
    return ErrorOf(r->code, r->body, "POST", collection);
  return Parse(r->body, "POST", collection);
}

StatusOr<Json> Client::Replace(const std::string& path, const Json& object) {
  const std::string body = object.dump();
  auto r = Call("PUT", path, &body);
  if (!r.ok()) return r.status();
  if (r->code != 200 && r->code != 201) return ErrorOf(r->code, r->body, "PUT", path);
  return Parse(r->body, "PUT", path);
}

StatusOr<Json> Client::Update(const std::string& path, const std::function<Status(Json&)>& change) {
  Status last;
  for (int attempt = 0; attempt <= options_.conflict_retries; ++attempt) {
    auto object = Get(path);
    if (!object.ok()) return object.status();
    if (Status st = change(*object); !st.ok()) return st;
    auto written = Replace(path, *object);
    if (written.ok() || written.status().code() != StatusCode::kAborted) return written;
    last = written.status();
  }
  return Status(StatusCode::kAborted, StrCat(last.message(), " (", options_.conflict_retries + 1,
                                             " conflicts in a row)"));
}

Status Client::Delete(const std::string& path) {
  auto r = Call("DELETE", path, nullptr);
  if (!r.ok()) return r.status();
  if (r->code != 200 && r->code != 202) return ErrorOf(r->code, r->body, "DELETE", path);
  return OkStatus();
}

Status Client::Watch(const std::string& collection, const Selector& selector,
                     const std::string& resource_version, std::chrono::seconds timeout,
                     const std::function<void(const Json& event)>& on_event, WatchCancel* cancel,
                     std::chrono::seconds* retry_after) {
  auto cancelled = [&] {
    return Status(StatusCode::kCancelled, StrCat("watch of ", collection, " cancelled"));
  };
  if (cancel != nullptr && cancel->cancelled()) return cancelled();
  std::string query = Query(selector);
  query += StrCat(query.empty() ? "?" : "&",
                  "watch=1&allowWatchBookmarks=true&timeoutSeconds=", timeout.count());
  if (!resource_version.empty()) query += StrCat("&resourceVersion=", Escape(resource_version));
  Stream stream{on_event, cancel, collection, options_.max_response_bytes, nullptr, {}, {}, {}};
  // The server ends it after `timeout`; one that does not is given a
  // request's time more.
  auto r = CallOnce(
      "GET", collection + query, nullptr,
      std::chrono::duration_cast<std::chrono::milliseconds>(timeout) + options_.timeout, &stream);
  if (cancel != nullptr && cancel->cancelled()) return cancelled();
  if (!stream.error.ok()) return stream.error;
  if (!r.ok()) return r.status();
  if (r->code != 200) {
    if (retry_after != nullptr) *retry_after = std::chrono::seconds(r->retry_after_s);
    return ErrorOf(r->code, stream.error_body, "WATCH", collection);
  }
  return OkStatus();
}

Status Client::DeleteCollection(const std::string& collection, const Selector& selector,
                                std::optional<std::chrono::milliseconds> timeout) {
  const std::string path = collection + Query(selector);
  auto r = Call("DELETE", path, nullptr, timeout);
  if (!r.ok()) return r.status();
  if (r->code != 200 && r->code != 202) return ErrorOf(r->code, r->body, "DELETE", path);
  return OkStatus();
}

}  // namespace devplug::kube
