// A resource's Container Device Interface spec: its kind, its file, and one
// CDI device per device ID holding that device's container edits (device
// nodes, mounts, env), written as cdiVersion 0.5.0, the newest that
// Debian 12's podman accepts and all that these edits need.
//
// The rules a spec must follow (what the CDI library checks when a runtime
// loads a file; one broken device drops the whole file) are stated in
// Validate() and docs/design.md, "Devices by CDI name".
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/cdi_names.h"
#include "model/device.h"
#include "util/status.h"

namespace devplug::cdi {

inline constexpr std::string_view kSpecVersion = "0.5.0";

// What a device node on the host is: written into the spec so that the
// runtime need not find it again (it fails on a symlink or a missing node).
struct NodeInfo {
  char type = 'c';  // 'c' or 'b'
  uint32_t major = 0;
  uint32_t minor = 0;
};
// Looks up a host path (a device node, or a symlink to one); nullopt when
// it is none.
using NodeLookup = std::function<std::optional<NodeInfo>(const std::string& host_path)>;

// The container edits of a recipe as CDI JSON: an empty object when the
// recipe has none a CDI device can carry (annotations cannot be carried in
// 0.5.0; they stay in the Allocate answer).
nlohmann::json Edits(const Recipe& recipe, const NodeLookup& lookup);

struct Rendered {
  std::string json;                                          // the file's content
  std::vector<std::string> devices;                          // the IDs it names, sorted
  std::vector<std::pair<std::string, std::string>> skipped;  // (ID, why) it leaves out
};
// One CDI device per device ID, in ID order, from each device's default
// recipe. IDs that cannot be a CDI name, and devices with no edits, are left
// out (and listed in `skipped`); with no device left, `json` is "".
Rendered Render(const Kind& kind, const DeviceList& devices, const NodeLookup& lookup);

// A spec of one CDI device `name` carrying `edits` (an allocation's).
std::string RenderOne(const Kind& kind, const std::string& name, nlohmann::json edits);
// A spec of several CDI devices, (name, edits) each, in this order (a DRA
// claim's).
std::string RenderMany(const Kind& kind,
                       std::vector<std::pair<std::string, nlohmann::json>> devices);
// Whether edits (as Edits() makes them) hold nothing a CDI device can carry.
bool EditsEmpty(const nlohmann::json& edits);

// Every rule a loaded spec must follow, for cdiVersion 0.3.0 to 0.5.0:
// one message per broken rule, none for a valid spec.
std::vector<std::string> Validate(const nlohmann::json& spec);

}  // namespace devplug::cdi
