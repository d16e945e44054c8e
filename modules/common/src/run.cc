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

void Trim(std::string& out) {
  if (out.size() > kKeepOutput) out.erase(0, out.size() - kKeepOutput);
}

// The last non-empty line of `text`, at most 200 characters of its end.
std::string_view LastLine(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r'))
    text.remove_suffix(1);
  if (const size_t nl = text.rfind('\n'); nl != std::string_view::npos) text.remove_prefix(nl + 1);
  if (text.size() > 200) text = text.substr(text.size() - 200);
  return text;
}

}  // namespace

std::string RunResult::Describe(const std::string& program,
                                std::chrono::milliseconds timeout) const {
  if (!started) return "cannot run " + program + ": " + error;
  std::string what;
  if (timed_out)
    what = program + " timed out after " + FormatDuration(timeout);
  else if (signal != 0)
    what = program + " was killed by signal " + std::to_string(signal);
  else
    what = program + " exited with status " + std::to_string(exit_code);
  // The last line it wrote to stderr says most; stdout when stderr is empty.
  std::string_view last = LastLine(errors);
  if (last.empty()) last = LastLine(output);
  if (!last.empty()) what += ": " + std::string(last);
  return what;
}

RunResult RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     std::chrono::milliseconds timeout) {
  RunResult r;
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/') {
    r.error = "not an absolute path";
    return r;
  }
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    r.error = std::strerror(errno);
    return r;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    r.error = std::strerror(errno);
    close(out_pipe[0]);
    close(out_pipe[1]);
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
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    r.error = std::strerror(rc);
    return r;
  }
  r.started = true;
  // Never block on a pipe: a program may leave a child behind that holds it.
  int fds[2] = {out_pipe[0], err_pipe[0]};
  bool open[2] = {true, true};
  for (int fd : fds) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  // Reads what is there now; false once the pipe is closed or broken.
  auto drain = [&](int k) {
    char buf[4096];
    for (;;) {
      const ssize_t got = read(fds[k], buf, sizeof buf);
      if (got > 0) {
        Keep(r.output, buf, static_cast<size_t>(got));
        if (k == 1) Keep(r.errors, buf, static_cast<size_t>(got));
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      return got < 0 && errno == EAGAIN;
    }
  };

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::milliseconds nap(1);
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
      for (int k = 0; k < 2; k++)
        if (open[k]) drain(k);
      break;
    }
    if (open[0] || open[1]) {
      // Output until the program closes both pipes (normally: when it exits).
      pollfd p[2];
      nfds_t n = 0;
      int which[2];
      for (int k = 0; k < 2; k++)
        if (open[k]) {
          which[n] = k;
          p[n++] = {fds[k], POLLIN, 0};
        }
      if (poll(p, n, static_cast<int>(std::min<int64_t>(left.count(), 50))) > 0)
        for (nfds_t i = 0; i < n; i++)
          if (p[i].revents) open[which[i]] = drain(which[i]);
    } else {
      // Both pipes closed: the program is exiting (or left a child that
      // closed them). Short naps first, so its exit is seen within ~1 ms.
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(left, nap));
      nap = std::min(nap * 2, std::chrono::milliseconds(10));
    }
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      // What it wrote last, if anything is still in the pipes.
      for (int k = 0; k < 2; k++)
        if (open[k]) drain(k);
      break;
    }
  }
  close(fds[0]);
  close(fds[1]);
  Trim(r.output);
  Trim(r.errors);
  if (!r.timed_out) {
    if (WIFEXITED(status))
      r.exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
      r.signal = WTERMSIG(status);
  }
  return r;
}

}  // namespace devplug::common
