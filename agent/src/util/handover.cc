#include "util/handover.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

extern char** environ;

namespace devplug::handover {
namespace {

std::string Errno(const char* what, int err) { return StrCat(what, ": ", std::strerror(err)); }

}  // namespace

StatusOr<Child> Spawn(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0].empty()) return InvalidArgumentError("no program to start");
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return InternalError(Errno("socketpair", errno));
  // The child's end goes to kChildFd through dup2, which leaves the copy
  // open across exec; the original, close-on-exec, must not be kChildFd
  // itself (dup2 onto itself would keep the flag).
  int theirs = pair[1];
  if (theirs <= kChildFd) {
    theirs = fcntl(pair[1], F_DUPFD_CLOEXEC, kChildFd + 1);
    close(pair[1]);
    if (theirs < 0) {
      const int err = errno;
      close(pair[0]);
      return InternalError(Errno("fcntl", err));
    }
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view kv(*e);
    if (kv.starts_with("WATCHDOG_PID=") || kv.starts_with(StrCat(kFdEnv, "="))) continue;
    env_strings.emplace_back(kv);
  }
  env_strings.push_back(StrCat(kFdEnv, "=", kChildFd));
  std::vector<char*> env, args;
  for (std::string& s : env_strings) env.push_back(s.data());
  env.push_back(nullptr);
  std::vector<std::string> arg_strings = argv;
  for (std::string& s : arg_strings) args.push_back(s.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&actions, theirs, kChildFd);
  // A fresh program's signals: nothing blocked (the agent blocks the ones
  // its signalfd reads), SIGPIPE back to its default.
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const bool search = argv[0].find('/') == std::string::npos;
  const int rc = search ? posix_spawnp(&pid, args[0], &actions, &attr, args.data(), env.data())
                        : posix_spawn(&pid, args[0], &actions, &attr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(theirs);
  if (rc != 0) {
    close(pair[0]);
    return UnavailableError(StrCat("cannot start ", argv[0], ": ", std::strerror(rc)));
  }
  fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK);
  return Child{pid, pair[0]};
}

int TakePredecessorFd() {
  const char* value = std::getenv(kFdEnv);
  if (value == nullptr) return -1;
  char* end = nullptr;
  const long fd = std::strtol(value, &end, 10);
  unsetenv(kFdEnv);
  struct stat st;
  if (end == value || *end != '\0' || fd < 0 || fd > 1024 ||
      fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode))
    return -1;
  fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  fcntl(static_cast<int>(fd), F_SETFL, fcntl(static_cast<int>(fd), F_GETFL) | O_NONBLOCK);
  return static_cast<int>(fd);
}

std::string ReadyLine(const std::string& version) { return StrCat("ready ", version, "\n"); }

Reading Read(int fd, std::string* buffer) {
  Reading out;
  char buf[256];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      out.kind = Reading::kClosed;
      break;
    }
    buffer->append(buf, static_cast<size_t>(n));
    if (buffer->size() > 4096) buffer->erase(0, buffer->size() - 4096);  // a peer gone wrong
  }
  // A ready line counts even when the peer closed right after it.
  for (size_t nl; (nl = buffer->find('\n')) != std::string::npos;) {
    const std::string line = buffer->substr(0, nl);
    buffer->erase(0, nl + 1);
    if (line.starts_with("ready")) {
      out.kind = Reading::kReady;
      out.version = line.size() > 6 ? line.substr(6) : std::string();
      return out;
    }
  }
  return out;
}

std::string Reap(pid_t pid, bool wait) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &status, wait ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return "";
  if (r < 0) return Errno("waitpid", errno);
  if (WIFEXITED(status)) return StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return StrCat("was killed by SIG", name != nullptr ? name : "?");
  }
  return "ended";
}

}  // namespace devplug::handover
