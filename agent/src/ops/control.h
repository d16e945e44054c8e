// devplugd's control socket ([agent] control_socket): requests from
// devplugctl (status and metrics, which only read, and handover), one JSON
// line in, one answer out, then
// the connection closes. Its own thread accepts clients, and each client is
// served on a short-lived thread of its own with one deadline for its whole
// request, so a slow or silent client holds up neither the agent's main
// loop nor other clients (the readiness probe); the answer is built by the
// main loop, which owns the state (see Handler).
//
// The socket is created with mode 0600 (root only). A live socket at the
// path (another devplugd) is left alone and Start fails.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "util/status.h"

namespace devplug::ops {

// What a request line asks for. The JSON forms:
//   {"status": {"resource": "NAME", "devices": true}}   (both fields optional)
//   {"metrics": {}}
//   {"handover": {}}   start the installed devplugd beside this one and
//                      leave once it serves (answered then, or with why not)
struct ControlQuery {
  enum class Kind { kStatus, kMetrics, kHandover };
  Kind kind = Kind::kStatus;
  bool devices = false;  // status: every resource's devices too
  std::string resource;  // status: only this resource ("" = all)
};

// Parses one request line. Never throws: anything else (not JSON, another
// request, a field of the wrong type) is INVALID_ARGUMENT with a reason that
// names the field.
StatusOr<ControlQuery> ParseControlQuery(std::string_view line);

// One request waiting for its answer.
struct ControlCall {
  std::string request;              // the JSON line the client sent
  std::promise<std::string> reply;  // set by the handler's owner
};

class ControlServer {
 public:
  // Hands a call to the main loop; the answer comes through call->reply.
  using Handler = std::function<void(std::shared_ptr<ControlCall> call)>;

  ControlServer() = default;
  ~ControlServer();  // Stop()
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  Status Start(const std::string& path, Handler handler);
  // Stops serving and removes the socket (idempotent).
  void Stop();
  // Waits up to `timeout` for the clients being served to get their
  // answers (a handover's, before the process ends).
  void WaitAnswered(std::chrono::milliseconds timeout);
  // The process is about to end: removes the socket (if still ours), and
  // leaves the serving threads be (they end with the process; Stop() or the
  // destructor still stops and joins them). A client already connected
  // learns that devplugd stops.
  void Abandon();

 private:
  void Loop();
  void Serve(int fd);

  std::string path_;
  // The socket file we bound (device, inode): only that one is removed.
  std::pair<dev_t, ino_t> bound_{0, 0};
  Handler handler_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
  struct Client {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Client> clients_;  // the accepting thread's only
  std::atomic<int> serving_{0};  // clients whose thread has not ended
};

// How long a client is answered within: a handover waits for a new
// devplugd to start (its modules' start_timeout, then registration).
std::chrono::milliseconds AnswerTimeout(ControlQuery::Kind kind);

// The client side (devplugctl): sends `request` (one line) and returns the
// whole answer; UNAVAILABLE when nothing answers at `path`.
StatusOr<std::string> ControlRequest(const std::string& path, const std::string& request,
                                     std::chrono::milliseconds timeout);

}  // namespace devplug::ops
