#include "peers.h"

#include <map>
#include <mutex>

namespace devplug::nvidia {
namespace {

struct Peer {
  std::string resource;
  Strategy strategy;
};

std::mutex& PeersMutex() {
  static std::mutex mu;
  return mu;
}

std::map<const void*, Peer>& Peers() {
  static std::map<const void*, Peer> peers;
  return peers;
}

}  // namespace

bool StrategiesCollide(Strategy a, Strategy b) {
  // "cdi" sets no NVIDIA_VISIBLE_DEVICES: nothing to lose.
  if (a == Strategy::kCdi || b == Strategy::kCdi) return false;
  return a != b || a == Strategy::kEnvvar;
}

std::vector<std::string> JoinPeers(const void* owner, const std::string& resource,
                                   Strategy strategy) {
  std::vector<std::string> warnings;
  std::lock_guard lock(PeersMutex());
  for (const auto& [ptr, peer] : Peers()) {
    if (peer.resource == resource || !StrategiesCollide(peer.strategy, strategy)) continue;
    warnings.push_back("resources \"" + peer.resource + "\" (device_list_strategy = \"" +
                       StrategyName(peer.strategy) + "\") and \"" + resource + "\" (\"" +
                       StrategyName(strategy) +
                       "\") both serve NVIDIA devices: a container given both sees the devices "
                       "of only one in " +
                       kVisible +
                       " (the kubelet keeps one value); set device_list_strategy = "
                       "\"volume-mounts\" or \"cdi\" on both");
  }
  Peers()[owner] = Peer{resource, strategy};
  return warnings;
}

void LeavePeers(const void* owner) {
  std::lock_guard lock(PeersMutex());
  Peers().erase(owner);
}

}  // namespace devplug::nvidia
