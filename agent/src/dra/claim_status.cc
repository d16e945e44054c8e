#include "dra/claim_status.h"

#include <algorithm>

#include "util/status.h"

namespace devplug::dra {

using Json = nlohmann::json;

std::vector<Json> StatusEntries(const std::string& driver, const std::string& node,
                                const std::vector<PreparedDevice>& devices,
                                const std::string& now) {
  std::vector<Json> entries;
  for (const PreparedDevice& d : devices) {
    // A share that took several of the module's devices is one entry.
    auto same = std::find_if(entries.begin(), entries.end(), [&](const Json& e) {
      return e["device"] == d.device && e.value("shareID", "") == d.share_id;
    });
    if (same != entries.end()) {
      for (const std::string& id : d.cdi_ids) (*same)["data"]["cdiDevices"].push_back(id);
      (*same)["data"]["moduleDevices"].push_back(d.id);
      continue;
    }
    Json e = {
        {"driver", driver},
        {"pool", d.pool},
        {"device", d.device},
        {"conditions", Json::array({{{"type", "Ready"},
                                     {"status", "True"},
                                     {"reason", "Prepared"},
                                     {"message", StrCat("devplugd on ", node, " prepared it")},
                                     {"lastTransitionTime", now}}})},
        {"data", {{"moduleDevices", {d.id}}, {"cdiDevices", d.cdi_ids}}}};
    if (!d.share_id.empty()) e["shareID"] = d.share_id;
    // The interface the module made for it (macvtap's link), as the tools
    // that wire pods to networks read it.
    if (!d.interface_name.empty()) e["networkData"]["interfaceName"] = d.interface_name;
    if (!d.hardware_address.empty()) e["networkData"]["hardwareAddress"] = d.hardware_address;
    entries.push_back(std::move(e));
  }
  return entries;
}

void ReplaceStatusEntries(Json& status, const std::string& driver, const std::string& node,
                          std::vector<Json> entries) {
  Json kept = Json::array();
  if (status.is_object() && status.contains("devices") && status["devices"].is_array())
    for (const Json& e : status["devices"])
      if (!e.is_object() || e.value("driver", "") != driver || e.value("pool", "") != node)
        kept.push_back(e);
  for (Json& e : entries) kept.push_back(std::move(e));
  if (kept.empty()) {
    if (status.is_object()) status.erase("devices");
  } else
    status["devices"] = std::move(kept);
}

std::vector<PreparedDevice> KubeletDevices(const std::vector<PreparedDevice>& devices) {
  std::vector<PreparedDevice> out;
  for (const PreparedDevice& d : devices) {
    if (!d.share_id.empty() && std::any_of(out.begin(), out.end(), [&](const PreparedDevice& o) {
          return o.share_id == d.share_id && o.device == d.device && o.request == d.request;
        }))
      continue;
    out.push_back(d);
  }
  return out;
}

}  // namespace devplug::dra
