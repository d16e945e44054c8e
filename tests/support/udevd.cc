#include "udevd.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace devplug::testing {

namespace {
constexpr char kUdevd[] = "/lib/systemd/systemd-udevd";
constexpr char kUnshare[] = "/usr/bin/unshare";
}  // namespace

Udevd::Udevd() {
  if (geteuid() != 0 || access(kUdevd, X_OK) != 0 || access(kUnshare, X_OK) != 0) return;
  pid_ = fork();
  if (pid_ == 0) {
    execl(kUnshare, "unshare", "-m", "--propagation", "private", "sh", "-c",
          "mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /lib/udev/rules.d && "
          "mount -t tmpfs tmpfs /etc/udev/rules.d && exec /lib/systemd/systemd-udevd "
          "--resolve-names=never 2>/dev/null",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  if (pid_ < 0) return;
  // unshare execs sh, which execs udevd: one pid throughout. It is ready when
  // its control socket exists inside its own mount namespace.
  const std::string control = control_path();
  for (int i = 0; i < 500 && !ready_; ++i) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    ready_ = access(control.c_str(), F_OK) == 0;
    if (!ready_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string Udevd::control_path() const {
  return "/proc/" + std::to_string(pid_) + "/root/run/udev/control";
}

Udevd::~Udevd() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status;
  waitpid(pid_, &status, 0);
}

}  // namespace devplug::testing
