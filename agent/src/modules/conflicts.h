// Cross-resource safety: the kubelet merges the Allocate answers of every
// resource of a container in random order and keeps the first value of each
// env key, container path and annotation key. Two resources that can emit
// the same one with different values make a container's environment depend
// on chance. This finds such pairs from the resources' device recipes.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/device.h"

namespace devplug {

// One warning line per conflicting pair and item, naming both resources.
std::vector<std::string> FindRecipeConflicts(
    const std::vector<std::pair<std::string, DeviceListPtr>>& resources);

}  // namespace devplug
