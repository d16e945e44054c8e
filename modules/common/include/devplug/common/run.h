// Running a helper program from a module (a vendor tool that programs a
// device, an operator's clean-up script): no shell, a given environment,
// output captured, and a hard time limit.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace devplug::common {

struct RunResult {
  bool started = false;    // false: the program could not be run (see error)
  bool timed_out = false;  // killed (SIGKILL) at the time limit
  int exit_code = -1;      // exit status, when it exited
  int signal = 0;          // the signal that ended it, when one did
  std::string output;      // stdout and stderr together, the last 4 KiB
  std::string errors;      // stderr alone, the last 4 KiB
  std::string error;       // why it could not be started

  bool ok() const { return started && !timed_out && signal == 0 && exit_code == 0; }
  // "exited with status 2: <last line>", "timed out after 20s: <last line>",
  // "killed by signal 9", "cannot run /usr/bin/x: No such file or directory".
  // The last line is the last non-empty line of stderr, or of stdout when
  // the program wrote nothing to stderr.
  std::string Describe(const std::string& program, std::chrono::milliseconds timeout) const;
};

// Runs argv[0] (an absolute path; not looked up in PATH) with exactly `env`
// ("KEY=value" entries; PATH is added when missing) and stdin from
// /dev/null, in its own process group. Past `timeout` the whole group is
// killed with SIGKILL. Blocks the calling thread until the program ends.
RunResult RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     std::chrono::milliseconds timeout);

}  // namespace devplug::common
