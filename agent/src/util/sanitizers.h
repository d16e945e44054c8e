// Which sanitizer this build runs under, whatever the compiler: GCC defines
// __SANITIZE_ADDRESS__ and __SANITIZE_THREAD__, clang 14 answers
// __has_feature instead. Code that takes another path in sanitizer builds
// (freeing at exit what a normal build leaves to the process's end, telling
// the leak checker of objects leaked on purpose) tests DEVPLUG_ASAN and
// DEVPLUG_TSAN.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define DEVPLUG_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define DEVPLUG_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(DEVPLUG_ASAN)
#define DEVPLUG_ASAN 1
#endif
#if __has_feature(thread_sanitizer) && !defined(DEVPLUG_TSAN)
#define DEVPLUG_TSAN 1
#endif
#endif
