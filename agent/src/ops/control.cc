#include "ops/control.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "util/unix_socket.h"

namespace devplug::ops {
namespace {

// Requests are one short line; answers can be large (thousands of devices).
constexpr size_t kMaxRequest = 4096;
constexpr auto kClientTimeout = std::chrono::seconds(2);
constexpr auto kAnswerTimeout = std::chrono::seconds(5);
constexpr auto kHandoverAnswerTimeout = std::chrono::minutes(10);
// Clients served at once; more are refused at once with an error.
constexpr size_t kMaxClients = 8;

bool FillAddress(const std::string& path, sockaddr_un* a) {
  if (path.size() >= sizeof(a->sun_path)) return false;
  a->sun_family = AF_UNIX;
  std::memcpy(a->sun_path, path.c_str(), path.size() + 1);
  return true;
}

void SetTimeouts(int fd, std::chrono::milliseconds t) {
  timeval tv{static_cast<time_t>(t.count() / 1000),
             static_cast<suseconds_t>((t.count() % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

bool WriteAll(int fd, const std::string& data) {
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

StatusOr<ControlQuery> ParseControlQuery(std::string_view line) {
  using nlohmann::json;
  const json request = json::parse(line, nullptr, /*allow_exceptions=*/false);
  constexpr const char* kForms =
      "expected {\"status\": {\"resource\": NAME, \"devices\": BOOL}}, {\"metrics\": {}} or "
      "{\"handover\": {}}";
  if (!request.is_object() || request.size() != 1)
    return InvalidArgumentError(StrCat("unknown request (", kForms, ")"));
  ControlQuery q;
  const auto first = request.begin();  // (items()'s proxy would not outlive this line)
  const std::string& name = first.key();
  const json& body = first.value();
  if (!body.is_object()) return InvalidArgumentError(StrCat("\"", name, "\" must be an object"));
  if (name == "metrics") {
    q.kind = ControlQuery::Kind::kMetrics;
    if (!body.empty()) return InvalidArgumentError("\"metrics\" takes no fields");
    return q;
  }
  if (name == "handover") {
    q.kind = ControlQuery::Kind::kHandover;
    if (!body.empty()) return InvalidArgumentError("\"handover\" takes no fields");
    return q;
  }
  if (name != "status") return InvalidArgumentError(StrCat("unknown request (", kForms, ")"));
  for (const auto& [key, value] : body.items()) {
    if (key == "devices") {
      if (!value.is_boolean()) return InvalidArgumentError("status.devices must be true or false");
      q.devices = value.get<bool>();
    } else if (key == "resource") {
      if (!value.is_string()) return InvalidArgumentError("status.resource must be a string");
      q.resource = value.get<std::string>();
    } else {
      return InvalidArgumentError(StrCat("status has no field \"", key, "\""));
    }
  }
  return q;
}

ControlServer::~ControlServer() { Stop(); }

Status ControlServer::Start(const std::string& path, Handler handler) {
  path_ = path;
  handler_ = std::move(handler);
  sockaddr_un addr{};
  if (!FillAddress(path, &addr))
    return InvalidArgumentError(StrCat("control socket path ", path, " is too long"));
  if (UnixSocketIsLive(path))
    return FailedPreconditionError(
        StrCat("control socket ", path, " is served by another process (a second devplugd?)"));
  // A dead socket of ours is replaced; anything else at the path (a file
  // named by mistake) is the operator's and stays.
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode))
    return FailedPreconditionError(
        StrCat("control socket ", path, " exists and is not a socket; not replacing it"));
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  unlink(path.c_str());  // a dead one
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return InternalError(StrCat("socket: ", std::strerror(errno)));
  // Root only: the answers name pods and the socket is not meant for others.
  const mode_t old = umask(0177);
  const int rc = bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old);
  if (rc != 0 || listen(listen_fd_, 16) != 0) {
    const std::string why = std::strerror(errno);
    close(listen_fd_);
    listen_fd_ = -1;
    return UnavailableError(StrCat("cannot serve the control socket ", path, ": ", why));
  }
  if (lstat(path.c_str(), &st) == 0) bound_ = {st.st_dev, st.st_ino};
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  thread_ = std::thread([this] { Loop(); });
  return OkStatus();
}

void ControlServer::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
  thread_.join();
  close(listen_fd_);
  close(stop_fd_);
  listen_fd_ = stop_fd_ = -1;
  // Only our own socket: whatever replaced it meanwhile is left alone.
  UnlinkIfSame(path_, bound_);
}

void ControlServer::Abandon() {
  if (!thread_.joinable()) return;
  // Its threads are not even woken: each thread woken now is one more for
  // a loaded node to schedule before the process can end.
  UnlinkIfSame(path_, bound_);
  bound_ = {0, 0};  // Stop() later removes nothing more
}

void ControlServer::WaitAnswered(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (serving_.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

std::chrono::milliseconds AnswerTimeout(ControlQuery::Kind kind) {
  return kind == ControlQuery::Kind::kHandover ? kHandoverAnswerTimeout : kAnswerTimeout;
}

void ControlServer::Loop() {
  pthread_setname_np(pthread_self(), "dp:control");
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents & POLLIN) break;
    if (!(fds[0].revents & POLLIN)) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::erase_if(clients_, [](Client& c) {
      if (!c.done->load()) return false;
      c.thread.join();
      return true;
    });
    if (clients_.size() >= kMaxClients) {
      // Every slot is held by a slow client: this one is told at once
      // instead of waiting behind them.
      WriteAll(fd, "{\"error\": \"devplugd is busy with other control clients\"}\n");
      close(fd);
      continue;
    }
    // One short-lived thread per client, each under one deadline for its
    // whole request: a client that sends slowly (or nothing) holds only
    // its own thread, never the next status request or readiness probe.
    auto done = std::make_shared<std::atomic<bool>>(false);
    serving_.fetch_add(1);
    clients_.push_back({std::thread([this, fd, done] {
                          Serve(fd);
                          close(fd);
                          done->store(true);
                          serving_.fetch_sub(1);
                        }),
                        done});
  }
  // stop_fd_ stays readable: every client thread sees it and ends.
  for (Client& c : clients_) c.thread.join();
  clients_.clear();
}

void ControlServer::Serve(int fd) {
  // A whole request within kClientTimeout, however it trickles in.
  const auto deadline = std::chrono::steady_clock::now() + kClientTimeout;
  SetTimeouts(fd, kClientTimeout);  // for the answer's send
  std::string request;
  char buf[512];
  while (request.find('\n') == std::string::npos && request.size() < kMaxRequest) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
            .count();
    if (left <= 0) return;  // too slow: no answer
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    const int ready = poll(fds, 2, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0 || (fds[1].revents & POLLIN)) return;  // stopping
    if (ready == 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // EOF ends a request too
    request.append(buf, static_cast<size_t>(n));
  }
  if (const size_t nl = request.find('\n'); nl != std::string::npos) request.resize(nl);
  const StatusOr<ControlQuery> query = ParseControlQuery(request);
  const auto wait = AnswerTimeout(query.ok() ? query->kind : ControlQuery::Kind::kStatus);
  auto call = std::make_shared<ControlCall>();
  call->request = std::move(request);
  std::future<std::string> answer = call->reply.get_future();
  handler_(call);
  if (answer.wait_for(wait) != std::future_status::ready) {
    WriteAll(fd, "{\"error\": \"devplugd did not answer in time\"}\n");
    return;
  }
  std::string reply;
  try {
    reply = answer.get();
  } catch (const std::future_error&) {  // dropped unanswered: the agent is stopping
    reply = "{\"error\": \"devplugd is stopping\"}";
  }
  if (reply.empty() || reply.back() != '\n') reply.push_back('\n');
  WriteAll(fd, reply);
}

StatusOr<std::string> ControlRequest(const std::string& path, const std::string& request,
                                     std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  if (!FillAddress(path, &addr)) return InvalidArgumentError(StrCat(path, ": path too long"));
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return InternalError(StrCat("socket: ", std::strerror(errno)));
  SetTimeouts(fd, timeout);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return UnavailableError(StrCat("cannot reach devplugd at ", path, ": ", why));
  }
  std::string answer;
  if (WriteAll(fd, request + "\n")) {
    char buf[65536];
    for (;;) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      answer.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  if (answer.empty()) return UnavailableError(StrCat("no answer from devplugd at ", path));
  return answer;
}

}  // namespace devplug::ops
