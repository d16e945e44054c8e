#include "devplug/common/run.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "devplug/common/duration.h"

namespace devplug::common {
namespace {

constexpr size_t kKeepOutput = 4096;

void Keep(std::string& out, const char* data, size_t n) {
  out.append(data, n);
  if (out.size() > 2 * kKeepOutput) out.erase(0, out.size() - kKeepOutput);
}

}  // namespace

std::string RunResult::Describe(const std::string& program,
                                std::chrono::milliseconds timeout) const {
  if (!started) return "cannot run " + program + ": " + error;
  std::string what;
  if (timed_out) what = program + " timed out after " + FormatDuration(timeout);
  else if (signal != 0) what = program + " was killed by signal " + std::to_string(signal);
  else what = program + " exited with status " + std::to_string(exit_code);
  // The last non-empty line of its output says most.
  std::string_view out = output;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.remove_suffix(1);
  if (const size_t nl = out.rfind('\n'); nl != std::string_view::npos) out.remove_prefix(nl + 1);
  if (out.size() > 200) out = out.substr(out.size() - 200);
  if (!out.empty()) what += ": " + std::string(out);
  return what;
}

RunResult RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     std::chrono::milliseconds timeout) {
  RunResult r;
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/') {
    r.error = "not an absolute path";
    return r;
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    r.error = std::strerror(errno);
    return r;
  }
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  bool has_path = false;
  for (const std::string& e : env) {
    has_path = has_path || e.rfind("PATH=", 0) == 0;
    envp.push_back(const_cast<char*>(e.c_str()));
  }
  static const char kPath[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  if (!has_path) envp.push_back(const_cast<char*>(kPath));
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    r.error = std::strerror(rc);
    return r;
  }
  r.started = true;
  // Never block on the pipe: a program may leave a child behind that holds it.
  fcntl(pipe_fds[0], F_SETFL, fcntl(pipe_fds[0], F_GETFL) | O_NONBLOCK);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool open = true;
  int status = 0;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    if (open) {
      // Output until the program closes it (normally: when it exits).
      pollfd p{pipe_fds[0], POLLIN, 0};
      const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 50)));
      if (n > 0) {
        char buf[4096];
        const ssize_t got = read(pipe_fds[0], buf, sizeof buf);
        if (got > 0) Keep(r.output, buf, static_cast<size_t>(got));
        else if (got == 0 || (errno != EINTR && errno != EAGAIN)) open = false;
      }
    } else {
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(left, std::chrono::milliseconds(10)));
    }
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      // What it wrote last, if anything is still in the pipe.
      char buf[4096];
      for (ssize_t got; open && (got = read(pipe_fds[0], buf, sizeof buf)) > 0;)
        Keep(r.output, buf, static_cast<size_t>(got));
      break;
    }
  }
  close(pipe_fds[0]);
  if (r.output.size() > kKeepOutput) r.output.erase(0, r.output.size() - kKeepOutput);
  if (!r.timed_out) {
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  }
  return r;
}

}  // namespace devplug::common
