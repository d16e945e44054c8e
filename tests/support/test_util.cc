#include "test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace devplug::testing {
namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string tmpl = (fs::temp_directory_path() / "devplug-test.XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void WriteFile(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::trunc | std::ios::binary);
  out << content;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool MakeCharDevice(const std::string& path, unsigned major, unsigned minor) {
  fs::create_directories(fs::path(path).parent_path());
  return mknod(path.c_str(), S_IFCHR | 0600, makedev(major, minor)) == 0;
}

bool IsRoot() { return geteuid() == 0; }

std::optional<std::pair<uint64_t, int64_t>> FileIdentity(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  return std::make_pair(
      static_cast<uint64_t>(st.st_ino),
      static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec);
}

namespace {
int BindUnix(const std::string& path, int type) {
  const int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const bool fits = path.size() < sizeof(addr.sun_path);
  if (fits) path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  if (!fits || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}
}  // namespace

int ListenUnix(const std::string& path, int type) {
  const int fd = BindUnix(path, type);
  if (fd >= 0 && listen(fd, 8) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool LeaveDeadUnixSocket(const std::string& path) {
  const int fd = BindUnix(path, SOCK_STREAM);
  if (fd < 0) return false;
  close(fd);
  return true;
}

bool FileExists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

std::string DevplugdPath() { return DEVPLUG_TEST_DEVPLUGD; }
std::string ModuleDir() { return DEVPLUG_TEST_MODULE_DIR; }
std::string FakeModuleDir() { return DEVPLUG_TEST_FAKE_MODULE_DIR; }
std::string DevplugctlPath() { return DEVPLUG_TEST_DEVPLUGCTL; }

FakeApiServer StartFakeApiServer(const std::string& script, const std::string& port_file,
                                 const std::string& log_path,
                                 const std::vector<std::string>& extra) {
  std::remove(port_file.c_str());
  std::vector<std::string> argv{"/usr/bin/python3", script, "--port-file", port_file};
  argv.insert(argv.end(), extra.begin(), extra.end());
  FakeApiServer server;
  server.pid = SpawnProcess(argv, log_path);
  if (server.pid < 0) return server;
  struct stat st;
  for (int i = 0; i < 3000 && stat(port_file.c_str(), &st) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (stat(port_file.c_str(), &st) != 0) {
    StopProcess(server.pid, SIGTERM);
    return {};
  }
  server.port = ReadFile(port_file);
  return server;
}

pid_t SpawnProcess(const std::vector<std::string>& args, const std::string& log_path, bool both) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (both) posix_spawn_file_actions_adddup2(&fa, 2, 1);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

int StopProcess(pid_t pid, int sig) {
  kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

namespace {
pid_t Spawn(const std::vector<std::string>& args, const std::string& out_path, bool both) {
  std::vector<std::string> argv{DevplugdPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  return SpawnProcess(argv, out_path, both);
}

}  // namespace

std::optional<int> WaitPid(pid_t pid, std::chrono::milliseconds timeout, bool* exited,
                           std::string* ending) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      *exited = true;
      if (WIFEXITED(status)) {
        *ending = "exited with status " + std::to_string(WEXITSTATUS(status));
        return WEXITSTATUS(status);
      }
      *ending = "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
                strsignal(WTERMSIG(status)) + ")" + (WCOREDUMP(status) ? ", core dumped" : "");
      return std::nullopt;
    }
    if (std::chrono::steady_clock::now() > end) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

AgentProcess::AgentProcess(const std::vector<std::string>& args) {
  char tmpl[] = "/tmp/devplugd-log.XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd >= 0) close(fd);
  log_path_ = tmpl;
  pid_ = Spawn(args, log_path_, false);
  if (pid_ < 0) throw std::runtime_error("cannot start " + DevplugdPath());
}

AgentProcess::~AgentProcess() {
  if (!exited_) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
  unlink(log_path_.c_str());
}

std::optional<int> AgentProcess::Stop(int sig, std::chrono::milliseconds timeout) {
  if (exited_) return std::nullopt;
  kill(pid_, sig);
  auto rc = WaitPid(pid_, timeout, &exited_, &ending_);
  if (!exited_) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    exited_ = true;
    ending_ = "still running " + std::to_string(timeout.count()) + " ms after signal " +
              std::to_string(sig) + "; killed";
  }
  return rc;
}

bool AgentProcess::Running() {
  if (!exited_) WaitPid(pid_, std::chrono::milliseconds(0), &exited_, &ending_);
  return !exited_;
}

std::optional<int> AgentProcess::Wait(std::chrono::milliseconds timeout) {
  if (exited_) return std::nullopt;
  return WaitPid(pid_, timeout, &exited_, &ending_);
}

std::string AgentProcess::Log() const { return ReadFile(log_path_); }

bool AgentProcess::WaitForLog(const std::string& needle, std::chrono::milliseconds timeout) const {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (Log().find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Log().find(needle) != std::string::npos;
}

RunResult RunProcess(const std::vector<std::string>& argv) {
  char tmpl[] = "/tmp/devplug-out.XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd >= 0) close(fd);
  RunResult res;
  const pid_t pid = SpawnProcess(argv, tmpl, true);
  if (pid < 0) return res;
  int status = 0;
  waitpid(pid, &status, 0);
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  res.output = ReadFile(tmpl);
  unlink(tmpl);
  return res;
}

std::optional<MiscDevice> RealMiscDevice() {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> candidates = {{"kvm", "/dev/kvm"},
                                                                 {"tun", "/dev/net/tun"}};
  if (const char* want = std::getenv("DEVPLUG_TEST_MISC_DEVICE"))
    std::erase_if(candidates, [&](const auto& c) { return c.first != want; });
  for (const auto& [name, node] : candidates) {
    MiscDevice d;
    d.name = name;
    d.node = node;
    d.uevent = "/sys/class/misc/" + name + "/uevent";
    if (!IsRoot() || access(d.uevent.c_str(), W_OK) != 0) continue;
    std::error_code ec;
    d.syspath = fs::canonical("/sys/class/misc/" + name, ec).string();
    if (ec || std::sscanf(ReadFile("/sys/class/misc/" + name + "/dev").c_str(), "%u:%u", &d.major,
                          &d.minor) != 2)
      continue;
    return d;
  }
  return std::nullopt;
}

RunResult RunDevplugd(const std::vector<std::string>& args) {
  std::vector<std::string> argv{DevplugdPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv);
}

}  // namespace devplug::testing
