// Limits set by the kernel and the kubelet on what devplugd hands over: one
// definition each, shared by the config checks, the service, the module
// host and the kubelet simulator.
#pragma once

#include <chrono>
#include <cstddef>

namespace devplug::kubelet {

// sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
inline constexpr size_t kMaxSocketPathBytes = 107;

// The kubelet's (grpc-go's default) receive limit for every message from a
// plugin: a larger ListAndWatch message ends the stream for good, a larger
// Allocate answer fails the pod.
inline constexpr size_t kKubeletMaxMessageBytes = 4 * 1024 * 1024;

// How long the kubelet waits for PreStartContainer
// (pluginapi.KubeletPreStartContainerRPCTimeoutInSecs): an answer later
// than this reaches nobody.
inline constexpr std::chrono::seconds kKubeletPreStartWait{30};

// The device plugin API's limit on a device ID.
inline constexpr size_t kMaxDeviceIdLength = 63;

}  // namespace devplug::kubelet
