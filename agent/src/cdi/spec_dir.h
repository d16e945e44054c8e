// devplugd's files in a CDI spec folder (/var/run/cdi by default): written
// whole and atomically, readable by every runtime, and only ever files
// that carry devplug's prefix.
//
// A write goes to ".devplug-XXXXXX.tmp" in the same folder (runtimes read
// only *.json and *.yaml, so they never see a partial file), is made mode
// 0644 (rootless podman and other non-root readers must read it; the CDI
// library's own writer leaves 0600), then renamed over the spec.
//
// Thread safety: the functions are thread-safe for different files.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "util/status.h"

namespace devplug::cdi {

// `path` (a spec folder as the runtime sees it) as devplugd reaches it:
// under host_root, unless that is "/".
std::string UnderHostRoot(const std::string& host_root, const std::string& path);
// Writes `content` to dir/name (creating dir and its parents, mode 0755, if
// missing).
Status WriteSpecFile(const std::string& dir, const std::string& name, const std::string& content);
// Removes dir/name; a file already gone is no error.
Status RemoveSpecFile(const std::string& dir, const std::string& name);
// Names of the files in `dir` that carry devplug's prefix (and leftover
// temporary files of an interrupted write: those at least
// kTemporaryFileAge old, never one a write may still hold), sorted; none
// when dir is missing.
inline constexpr std::chrono::seconds kTemporaryFileAge{60};
std::vector<std::string> OwnedFiles(const std::string& dir);

}  // namespace devplug::cdi
