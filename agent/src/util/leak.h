// An object that must outlive a thread devplugd gave up on (stuck in a
// module call or a request to the API server) is leaked on purpose; the
// leak checker of sanitizer builds is told so.
#pragma once

#include <memory>

#include "util/sanitizers.h"

#if defined(DEVPLUG_ASAN)
#include <sanitizer/lsan_interface.h>
#endif

namespace devplug {

// Keeps `owner`'s object alive for the rest of the process.
template <typename T>
void LeakOnPurpose(const std::shared_ptr<T>& owner) {
  auto* kept = new std::shared_ptr<T>(owner);
#if defined(DEVPLUG_ASAN)
  __lsan_ignore_object(kept);
#else
  (void)kept;
#endif
}

}  // namespace devplug
