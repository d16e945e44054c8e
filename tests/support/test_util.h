// Test helpers: temporary trees, device nodes, and a devplugd child process.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace devplug::testing {

// A temporary directory removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

// Writes `content` to `path`, creating parent directories.
void WriteFile(const std::string& path, const std::string& content);
std::string ReadFile(const std::string& path);
// Creates a character device node (needs CAP_MKNOD); false if not allowed.
bool MakeCharDevice(const std::string& path, unsigned major, unsigned minor);
bool IsRoot();
bool FileExists(const std::string& path);
// Which file is at `path` (following symlinks): its inode and change time
// in ns, since a file made anew may get the inode number the old one just
// gave up; nullopt when there is none.
std::optional<std::pair<uint64_t, int64_t>> FileIdentity(const std::string& path);

// A Unix socket of `type` listening at `path`: the fd (close it to stop), or
// -1 when it cannot be made.
int ListenUnix(const std::string& path, int type = SOCK_STREAM);
// A Unix socket file at `path` nobody listens on, as a process that died
// leaves one; false when it cannot be made.
bool LeaveDeadUnixSocket(const std::string& path);

// A real misc device of this machine whose uevent file a test writes to (the
// kernel then sends a real "change" uevent naming it): kvm where the machine
// has /sys/class/misc/kvm, else tun, which nearly every kernel has. The
// environment variable DEVPLUG_TEST_MISC_DEVICE=<name> picks one. nullopt
// when there is none, or it cannot be written to (not root).
struct MiscDevice {
  std::string name;     // "kvm", "tun"
  std::string node;     // its device node: "/dev/kvm", "/dev/net/tun"
  std::string uevent;   // "/sys/class/misc/kvm/uevent"
  std::string syspath;  // "/sys/devices/virtual/misc/kvm", as events name it
  unsigned major = 0, minor = 0;
};
std::optional<MiscDevice> RealMiscDevice();

// Starts argv[0] with argv; stderr (and stdout too if `both`) to `log_path`.
// -1 on failure.
pid_t SpawnProcess(const std::vector<std::string>& argv, const std::string& log_path,
                   bool both = false);
// Sends `sig` and reaps the process; its exit code, or 128 + signal.
int StopProcess(pid_t pid, int sig);

// Starts the suite's fake API server (tests/support/fake_apiserver.py, at
// `script`) with `extra` arguments and its log in `log_path`, and waits up
// to 30 s for the port it writes to `port_file`. Its pid and that port, or
// -1 and "" when it did not come up (its log says why).
struct FakeApiServer {
  pid_t pid = -1;
  std::string port;
};
FakeApiServer StartFakeApiServer(const std::string& script, const std::string& port_file,
                                 const std::string& log_path,
                                 const std::vector<std::string>& extra = {});

// Paths baked in by CMake.
std::string DevplugdPath();
std::string ModuleDir();      // in-tree modules (kvm.so, ...)
std::string FakeModuleDir();  // tests/support/fake_module.c variants
std::string DevplugctlPath();

// devplugd as a child process with stderr captured to a file.
class AgentProcess {
 public:
  // Starts devplugd with `args` (after the binary name).
  explicit AgentProcess(const std::vector<std::string>& args);
  ~AgentProcess();
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Sends `sig` and waits up to `timeout` for the exit; the exit code, or
  // nullopt if it did not exit (then it is killed) or died by a signal.
  std::optional<int> Stop(int sig, std::chrono::milliseconds timeout);
  // True until the process has exited (reaps it if it just did).
  bool Running();
  // Waits for the process to exit by itself.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  std::string Log() const;
  // How the process ended ("exited with status 0", "killed by signal 11
  // (Segmentation fault)", ...), or "" while it runs.
  const std::string& ending() const { return ending_; }
  bool WaitForLog(const std::string& needle, std::chrono::milliseconds timeout) const;

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string ending_;
  std::string log_path_;
};

// Asks `f` every 10 ms until it holds or `timeout` passes; whether it held.
template <typename F>
bool Eventually(F f, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  for (auto end = std::chrono::steady_clock::now() + timeout;
       std::chrono::steady_clock::now() < end;
       std::this_thread::sleep_for(std::chrono::milliseconds(10)))
    if (f()) return true;
  return f();
}

// Waits up to `timeout` for child `pid` to end (reaping it): its exit
// status, or nullopt (still running, or killed: `ending` says which;
// `exited` is set once it ended).
std::optional<int> WaitPid(pid_t pid, std::chrono::milliseconds timeout, bool* exited,
                           std::string* ending);

// Runs devplugd to completion (for --check-config and config errors).
struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout + stderr
};
RunResult RunDevplugd(const std::vector<std::string>& args);
// Runs argv (argv[0] a path) to completion.
RunResult RunProcess(const std::vector<std::string>& argv);

}  // namespace devplug::testing
