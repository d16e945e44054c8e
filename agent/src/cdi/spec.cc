#include "cdi/spec.h"

#include <algorithm>
#include <set>

namespace devplug::cdi {
namespace {

using nlohmann::json;

bool IsSubsetOf(std::string_view text, std::string_view allowed) {
  std::string seen;
  for (char c : text) {
    if (allowed.find(c) == std::string_view::npos || seen.find(c) != std::string::npos)
      return false;
    seen += c;
  }
  return true;
}

// Keys a JSON object may hold; one message per other key.
void OnlyKeys(const json& obj, std::initializer_list<std::string_view> keys,
              const std::string& where, std::vector<std::string>& out) {
  for (const auto& [k, v] : obj.items()) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      out.push_back(StrCat(where, ": unknown field \"", k, "\" (the library rejects it)"));
  }
}

bool AbsolutePath(const json& v) {
  return v.is_string() && !v.get<std::string>().empty() && v.get<std::string>().front() == '/';
}

// Each object of the array edits[key] (a message per entry that is none),
// with "<where>: <what> <entry>" to name it.
template <typename F>
void EachObject(const json& edits, const char* key, const char* what, const std::string& where,
                std::vector<std::string>& out, F check) {
  if (!edits.contains(key)) return;
  const json& list = edits[key];
  if (!list.is_array()) {
    out.push_back(StrCat(where, ": ", key, " must be an array"));
    return;
  }
  for (const json& entry : list) {
    const std::string at = StrCat(where, ": ", what, " ", entry.dump());
    if (entry.is_object())
      check(entry, at);
    else
      out.push_back(StrCat(at, " is not an object"));
  }
}

void ValidateEdits(const json& edits, const std::string& where, std::vector<std::string>& out) {
  if (!edits.is_object()) {
    out.push_back(StrCat(where, ": containerEdits must be an object"));
    return;
  }
  OnlyKeys(edits, {"env", "deviceNodes", "mounts", "hooks"}, where, out);
  if (edits.contains("env")) {
    const json& env = edits["env"];
    if (!env.is_array()) out.push_back(StrCat(where, ": env must be an array"));
    for (const json& e : env.is_array() ? env : json::array()) {
      const std::string s = e.is_string() ? e.get<std::string>() : "";
      const size_t eq = s.find('=');
      if (!e.is_string() || eq == std::string::npos || eq == 0)
        out.push_back(StrCat(where, ": env entry ", e.dump(), " is not NAME=VALUE"));
    }
  }
  EachObject(
      edits, "deviceNodes", "deviceNode", where, out, [&](const json& n, const std::string& at) {
        OnlyKeys(
            n,
            {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"},
            at, out);
        if (!n.contains("path") || !AbsolutePath(n["path"]))
          out.push_back(StrCat(at, ": path must be an absolute path"));
        if (n.contains("hostPath") && !AbsolutePath(n["hostPath"]))
          out.push_back(StrCat(at, ": hostPath must be an absolute path"));
        if (n.contains("type")) {
          const std::string t = n["type"].is_string() ? n["type"].get<std::string>() : "?";
          if (t != "" && t != "b" && t != "c" && t != "u" && t != "p")
            out.push_back(StrCat(at, ": type must be \"\", \"b\", \"c\", \"u\" or \"p\""));
        }
        if (n.contains("permissions") && (!n["permissions"].is_string() ||
                                          !IsSubsetOf(n["permissions"].get<std::string>(), "rwm")))
          out.push_back(StrCat(at, ": permissions must be made of r, w and m, each at most once"));
        for (const char* k : {"major", "minor"})
          if (n.contains(k) && !n[k].is_number_integer())
            out.push_back(StrCat(at, ": ", k, " must be an integer"));
      });
  EachObject(edits, "mounts", "mount", where, out, [&](const json& m, const std::string& at) {
    OnlyKeys(m, {"hostPath", "containerPath", "options", "type"}, at, out);
    if (!m.contains("hostPath") || !m["hostPath"].is_string() ||
        m["hostPath"].get<std::string>().empty())
      out.push_back(StrCat(at, ": hostPath is required"));
    if (!m.contains("containerPath") || !AbsolutePath(m["containerPath"]))
      out.push_back(StrCat(at, ": containerPath must be an absolute path"));
    if (m.contains("options") &&
        (!m["options"].is_array() || std::any_of(m["options"].begin(), m["options"].end(),
                                                 [](const json& o) { return !o.is_string(); })))
      out.push_back(StrCat(at, ": options must be an array of strings"));
  });
  if (edits.contains("hooks") && !edits["hooks"].is_array())
    out.push_back(StrCat(where, ": hooks must be an array"));
}

}  // namespace

bool EditsEmpty(const json& edits) {
  if (!edits.is_object()) return true;
  for (const char* k : {"env", "deviceNodes", "mounts", "hooks"})
    if (edits.contains(k) && edits[k].is_array() && !edits[k].empty()) return false;
  return true;
}

std::string RenderOne(const Kind& kind, const std::string& name, json edits) {
  return RenderMany(kind, {{name, std::move(edits)}});
}

std::string RenderMany(const Kind& kind, std::vector<std::pair<std::string, json>> devices) {
  json list = json::array();
  for (auto& [name, edits] : devices)
    list.push_back({{"name", name}, {"containerEdits", std::move(edits)}});
  json spec = {{"cdiVersion", kSpecVersion}, {"kind", kind.str()}, {"devices", std::move(list)}};
  return spec.dump(1, '\t') + "\n";
}

json Edits(const Recipe& recipe, const NodeLookup& lookup) {
  json edits = json::object();
  if (!recipe.device_nodes.empty()) {
    json nodes = json::array();
    for (const DeviceNode& d : recipe.device_nodes) {
      json n = {{"path", d.container_path}, {"hostPath", d.host_path}};
      if (!d.permissions.empty() && IsSubsetOf(d.permissions, "rwm"))
        n["permissions"] = d.permissions;
      if (lookup) {
        if (std::optional<NodeInfo> info = lookup(d.host_path)) {
          n["type"] = std::string(1, info->type);
          n["major"] = info->major;
          n["minor"] = info->minor;
        }
      }
      nodes.push_back(std::move(n));
    }
    edits["deviceNodes"] = std::move(nodes);
  }
  if (!recipe.mounts.empty()) {
    json mounts = json::array();
    for (const MountSpec& m : recipe.mounts)
      mounts.push_back({{"hostPath", m.host_path},
                        {"containerPath", m.container_path},
                        {"type", "bind"},
                        {"options", {"rbind", m.read_only ? "ro" : "rw"}}});
    edits["mounts"] = std::move(mounts);
  }
  if (!recipe.envs.empty()) {
    json env = json::array();
    for (const auto& [k, v] : recipe.envs) env.push_back(StrCat(k, "=", v));
    edits["env"] = std::move(env);
  }
  return edits;
}

Rendered Render(const Kind& kind, const DeviceList& devices, const NodeLookup& lookup) {
  Rendered out;
  json list = json::array();
  for (const Device& d : devices) {
    if (std::string why = CheckDeviceName(d.id); !why.empty()) {
      out.skipped.emplace_back(d.id, why);
      continue;
    }
    json edits = Edits(d.recipe, lookup);
    if (EditsEmpty(edits)) {
      out.skipped.emplace_back(d.id, "no device node, mount or env to carry");
      continue;
    }
    list.push_back({{"name", d.id}, {"containerEdits", std::move(edits)}});
    out.devices.push_back(d.id);
  }
  if (list.empty()) return out;
  json spec = {{"cdiVersion", kSpecVersion}, {"kind", kind.str()}, {"devices", std::move(list)}};
  out.json = spec.dump(1, '\t') + "\n";
  return out;
}

std::vector<std::string> Validate(const json& spec) {
  std::vector<std::string> out;
  if (!spec.is_object()) return {"a spec is a JSON object"};
  OnlyKeys(spec, {"cdiVersion", "kind", "devices", "containerEdits"}, "spec", out);
  const std::string version = spec.contains("cdiVersion") && spec["cdiVersion"].is_string()
                                  ? spec["cdiVersion"].get<std::string>()
                                  : "";
  if (version != "0.3.0" && version != "0.4.0" && version != "0.5.0")
    out.push_back(StrCat("cdiVersion \"", version, "\" is not one of 0.3.0, 0.4.0, 0.5.0"));
  const std::string kind =
      spec.contains("kind") && spec["kind"].is_string() ? spec["kind"].get<std::string>() : "";
  const size_t slash = kind.find('/');
  if (slash == std::string::npos) {
    out.push_back(StrCat("kind \"", kind, "\" is not vendor/class"));
  } else {
    if (std::string why = CheckVendor(kind.substr(0, slash)); !why.empty()) out.push_back(why);
    if (std::string why = CheckClass(kind.substr(slash + 1)); !why.empty()) out.push_back(why);
  }
  if (spec.contains("containerEdits")) ValidateEdits(spec["containerEdits"], "spec", out);
  if (!spec.contains("devices") || !spec["devices"].is_array() || spec["devices"].empty()) {
    out.push_back("devices must be a non-empty array");
    return out;
  }
  std::set<std::string> names;
  for (const json& d : spec["devices"]) {
    const std::string name = d.is_object() && d.contains("name") && d["name"].is_string()
                                 ? d["name"].get<std::string>()
                                 : "";
    const std::string where = StrCat("device \"", name, "\"");
    if (!d.is_object()) {
      out.push_back("a device is not an object");
      continue;
    }
    OnlyKeys(d, {"name", "containerEdits"}, where, out);
    if (std::string why = CheckDeviceName(name); !why.empty()) out.push_back(why);
    if (!names.insert(name).second) out.push_back(StrCat(where, " is defined twice"));
    if (!d.contains("containerEdits") || EditsEmpty(d["containerEdits"])) {
      out.push_back(StrCat(where, ": invalid device, empty device edits"));
      continue;
    }
    ValidateEdits(d["containerEdits"], where, out);
  }
  return out;
}

}  // namespace devplug::cdi
