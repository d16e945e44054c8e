// Replacing a file whole: a reader (a container runtime, devplugd after a
// crash) sees the old file or the new one, never part of one.
//
// Thread safety: thread-safe for different files.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "util/status.h"

namespace devplug {

// Writes `content` to "<dir>/<tmp_prefix>XXXXXX.tmp", gives it `mode`, and
// renames it to dir/name. `durable`: the file, then the folder, are flushed
// to disk before it returns (state that must survive a power cut). The
// folder must exist. A failed write leaves no temporary file behind.
Status ReplaceFile(const std::string& dir, const std::string& name, const std::string& content,
                   mode_t mode, std::string_view tmp_prefix, bool durable = false);

}  // namespace devplug
