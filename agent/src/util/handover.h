// Handing a running devplugd over to a new process of the same program
// (`devplugctl handover`; the package's upgrade under systemd): the process
// mechanics. The old devplugd starts the program at the path it was started
// with (after an upgrade, the installed binary), with its own arguments and
// environment, and hands it one end of a socket pair as descriptor
// kChildFd, named by $DEVPLUG_HANDOVER_FD. The new one writes one line on
// it, "ready <version>", once it serves; the old one's end closes when the
// old process ends, which tells the new one that it is alone.
//
// Thread safety: thread-compatible; Spawn is safe in a process with threads
// (posix_spawn, the signal mask reset for the new program).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "util/status.h"

namespace devplug::handover {

inline constexpr int kChildFd = 3;
inline constexpr char kFdEnv[] = "DEVPLUG_HANDOVER_FD";

struct Child {
  pid_t pid = -1;
  int fd = -1;  // our end of the pair (close-on-exec, non-blocking)
};

// Starts argv[0] (looked up in $PATH when it has no slash) with `argv` and
// this process's environment, less WATCHDOG_PID (the new process is
// watched once it is the service's main process), plus kFdEnv.
StatusOr<Child> Spawn(const std::vector<std::string>& argv);

// In the new process: the descriptor the old one passed, taken out of the
// environment and made close-on-exec; -1 when there is none, or it is not
// a socket (an environment copied by mistake).
int TakePredecessorFd();

// What the other end said so far, read without blocking. `buffer` keeps a
// partial line between calls.
struct Reading {
  enum Kind { kNothingYet, kReady, kClosed } kind = kNothingYet;
  std::string version;  // kReady
};
Reading Read(int fd, std::string* buffer);

// The line the new process writes once it serves.
std::string ReadyLine(const std::string& version);

// How a child ended ("exited with status 78", "was killed by SIGKILL"), or
// "" while it runs (`wait`: block until it ends).
std::string Reap(pid_t pid, bool wait);

}  // namespace devplug::handover
