// The nvidia resources of one devplugd, and when two of them would meet in
// one container: the kubelet keeps one value of an environment variable two
// Allocate answers set, so two resources that both set
// NVIDIA_VISIBLE_DEVICES to different values ("envvar" with anything but
// "cdi"; "volume-mounts" only with "envvar") lose one's devices.
//
// Thread safety: thread-safe (instances start and stop on their workers).
#pragma once

#include <string>
#include <vector>

#include "settings.h"

namespace devplug::nvidia {

// Whether a container given devices of both loses one's.
bool StrategiesCollide(Strategy a, Strategy b);

// Registers `owner` (an instance) serving `resource`; returns one warning
// for each other resource it collides with. The same resource name again
// (its replacement during a reload) is no peer.
std::vector<std::string> JoinPeers(const void* owner, const std::string& resource,
                                   Strategy strategy);
void LeavePeers(const void* owner);

}  // namespace devplug::nvidia
