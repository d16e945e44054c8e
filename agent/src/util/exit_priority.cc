#include "util/exit_priority.h"

#include <dirent.h>
#include <sys/resource.h>

#include <cstdlib>

namespace devplug {

bool RaiseExitPriority(int nice) {
  // Linux keeps a nice value per thread: setpriority(PRIO_PROCESS, tid)
  // changes that thread only, so each one in /proc/self/task is set.
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return false;
  bool all = true;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const auto tid = static_cast<id_t>(std::strtoul(e->d_name, nullptr, 10));
    if (setpriority(PRIO_PROCESS, tid, nice) != 0) all = false;
  }
  closedir(dir);
  return all;
}

}  // namespace devplug
