// Reading a non-blocking inotify descriptor.
#pragma once

#include <sys/inotify.h>
#include <unistd.h>

namespace devplug {

// Calls fn(const inotify_event&) for every event pending on `fd` (opened
// with IN_NONBLOCK), until the kernel has none left.
template <class Fn>
void DrainInotify(int fd, Fn&& fn) {
  alignas(inotify_event) char buf[16384];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return;  // EAGAIN: drained
    for (const char* p = buf; p < buf + n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(p);
      p += sizeof(inotify_event) + ev->len;
      fn(*ev);
    }
  }
}

}  // namespace devplug
