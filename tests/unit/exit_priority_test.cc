// At a stop, every thread of devplugd takes a higher priority, the ones
// started by libraries (gRPC's) as well: Linux keeps one nice value per
// thread, and setting the process's alone would leave them behind the load.
#include "util/exit_priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

namespace devplug {
namespace {

int NiceOf(pid_t tid) {
  errno = 0;
  return getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
}

TEST(ExitPriorityTest, EveryThreadOfTheProcessIsRaised) {
  if (geteuid() != 0) GTEST_SKIP() << "raising a priority needs CAP_SYS_NICE (root)";
  // In a child: the raised priority stays with the threads, and this test
  // process must keep its own.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<pid_t> tid{0};
    std::atomic<bool> done{false};
    std::thread other([&] {
      tid = static_cast<pid_t>(syscall(SYS_gettid));
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    while (tid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
    const int base = NiceOf(self);  // whatever the test runs at
    const int raised = base - 7 < -20 ? -20 : base - 7;
    int code = 0;
    if (NiceOf(tid) != base || raised == base) code = 2;
    if (!RaiseExitPriority(raised)) code = 3;
    if (NiceOf(tid) != raised) code = 4;  // the other thread, not only this one
    if (NiceOf(self) != raised) code = 5;
    done = true;
    other.join();
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: not at the base before; 3: refused; 4: another thread "
                                       "kept its priority; 5: the calling thread kept its";
}

TEST(ExitPriorityTest, WithoutThePrivilegeNothingChanges) {
  // A raise the process may not make is refused, and its threads keep their
  // priority: an unprivileged devplugd stops as before.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Drop the privilege for good: a non-root user cannot lower nice.
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(9);
    const int before = NiceOf(0);
    const bool raised = RaiseExitPriority(before - 5);
    _exit(raised ? 2 : NiceOf(0) == before ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: an unprivileged raise was reported done; 3: the "
                                       "nice value changed; 9: could not drop root";
}

}  // namespace
}  // namespace devplug
