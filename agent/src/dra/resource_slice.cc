#include "dra/resource_slice.h"

#include <cstdio>
#include <map>

#include "model/dra_names.h"
#include "util/hash.h"
#include "util/utf8.h"

namespace devplug::dra {
namespace {

using Json = nlohmann::json;

bool Alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// `text` with the characters `keep` allows, alphanumeric at both ends, at
// most `max` characters; unchanged when it already was, else with a hash.
std::string Sanitize(std::string_view text, size_t max, bool dots) {
  auto allowed = [&](char c) { return Alnum(c) || c == '-' || (dots && c == '.'); };
  bool clean = !text.empty() && text.size() <= max && Alnum(text.front()) && Alnum(text.back());
  for (char c : text) clean = clean && allowed(c);
  if (clean) return std::string(text);
  std::string out;
  for (char c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    out += allowed(c) ? c : '-';
  }
  char suffix[10];
  std::snprintf(suffix, sizeof(suffix), "-%08x", Fnv1a32(text));
  // Room for the suffix; no '-' or '.' left at the ends.
  out.resize(std::min(out.size(), max - 9));
  while (!out.empty() && !Alnum(out.back())) out.pop_back();
  size_t start = 0;
  while (start < out.size() && !Alnum(out[start])) ++start;
  out.erase(0, start);
  if (out.empty()) return std::string(suffix + 1);  // the hash alone starts alphanumeric
  return out + suffix;
}

// A reason as a taint's value (a label value: at most 63 characters of
// [A-Za-z0-9_.-], alphanumeric at both ends); "" when nothing is left.
std::string TaintValue(std::string_view reason) {
  std::string out;
  for (char c : reason) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    out += ok ? c : '-';
    if (out.size() == 63) break;
  }
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  while (!out.empty() && !alnum(out.back())) out.pop_back();
  size_t start = 0;
  while (start < out.size() && !alnum(out[start])) ++start;
  return out.substr(start);
}

// `d` as its slice lists it; `shares` > 0 for a device shared by that
// many claims (d is its first share).
Json DeviceJson(const Device& d, size_t shares) {
  Json attrs = Json::object();
  Json capacity = Json::object();
  // Attribute strings hold 64 characters at most, and JSON valid UTF-8.
  attrs[kAttributeId] = {
      {"string", PrintableUtf8(shares ? d.share_of : d.id, kMaxAttributeValueLength)}};
  // The standard attributes (resource.kubernetes.io): one NUMA node, the
  // lowest of several; none without NUMA affinity.
  if (d.numa_node >= 0) attrs[kAttributeNumaNode] = {{"int", d.numa_node}};
  if (!d.pci_address.empty()) attrs[kAttributePciBusId] = {{"string", d.pci_address}};
  if (!d.pcie_root.empty()) attrs[kAttributePcieRoot] = {{"string", d.pcie_root}};
  // The module's, checked by the sink (model/dra_names.h).
  for (const DeviceAttribute& a : d.attributes) {
    switch (a.type) {
      case DeviceAttribute::Type::kString:
        attrs[a.name] = {{"string", a.text}};
        break;
      case DeviceAttribute::Type::kInt:
        attrs[a.name] = {{"int", a.number}};
        break;
      case DeviceAttribute::Type::kBool:
        attrs[a.name] = {{"bool", a.number != 0}};
        break;
      case DeviceAttribute::Type::kVersion:
        attrs[a.name] = {{"version", a.text}};
        break;
      case DeviceAttribute::Type::kCapacity:
        capacity[a.name] = {{"value", std::to_string(a.number)}};
        // Shared, a claim takes none of it unless it asks (without a
        // policy it would take all, and share the device with nobody).
        if (shares)
          capacity[a.name]["requestPolicy"] = {
              {"default", "0"}, {"validRange", {{"min", "0"}, {"max", std::to_string(a.number)}}}};
        break;
    }
  }
  Json out = {{"name", DraName(d)}, {"attributes", std::move(attrs)}};
  if (shares) {
    const std::string n = std::to_string(shares);
    Json range = {{"min", "1"}, {"max", n}};
    // The API server refuses a step when min + step passes the value: one
    // share left (the others withheld, or gone) takes none.
    if (shares > 1) range["step"] = "1";
    capacity[kSharesCapacity] = {
        {"value", n}, {"requestPolicy", {{"default", "1"}, {"validRange", std::move(range)}}}};
    out["allowMultipleAllocations"] = true;
  }
  if (!capacity.empty()) out["capacity"] = std::move(capacity);
  return out;
}

}  // namespace

std::string DeviceName(std::string_view id) { return Sanitize(id, 63, /*dots=*/false); }

std::string DraName(const Device& d) { return DeviceName(d.share_of.empty() ? d.id : d.share_of); }

std::string ObjectName(std::string_view text) { return Sanitize(text, 253, /*dots=*/true); }

std::string SliceName(const Pool& pool, size_t index) {
  // '/' is in neither name: the pair is one text.
  char pair[9];
  std::snprintf(pair, sizeof(pair), "%08x", Fnv1a32(pool.node + "/" + pool.driver));
  return ObjectName(pool.node + "-" + pool.driver + "-" + pair + "-" + std::to_string(index));
}

Json DeviceAttributes(const Device& d) {
  return DeviceJson(d, d.share_of.empty() ? 0 : 1)["attributes"];
}

std::vector<DraDevice> DraDevices(const DeviceList& devices) {
  std::vector<DraDevice> out;
  std::map<std::string_view, size_t> shared;  // share_of -> its index in out
  for (const Device& d : devices) {
    if (d.share_of.empty()) {
      out.push_back({&d, 0, d.healthy ? nullptr : &d, !d.held_back});
      continue;
    }
    auto [it, added] = shared.emplace(d.share_of, out.size());
    if (added) out.push_back({&d, 0, nullptr, false});
    DraDevice& s = out[it->second];
    ++s.shares;
    s.offered = s.offered || !d.held_back;
    if (!d.healthy && !d.held_back && s.unhealthy == nullptr) s.unhealthy = &d;
  }
  return out;
}

std::vector<Json> PoolDevices(const DeviceList& devices, const UnhealthyTaint& taint) {
  std::vector<Json> listed;
  for (const DraDevice& x : DraDevices(devices)) {
    if (!x.offered) continue;
    Json dev = DeviceJson(*x.device, x.shares);
    if (const Device* unhealthy = x.unhealthy) {
      Json t = {{"key", kUnhealthyTaintKey}, {"effect", taint.effect}};
      if (std::string value = TaintValue(unhealthy->health_reason); !value.empty())
        t["value"] = value;
      if (taint.time_added)
        if (std::string at = taint.time_added(dev["name"]); !at.empty()) t["timeAdded"] = at;
      dev["taints"] = Json::array({std::move(t)});
    }
    listed.push_back(std::move(dev));
  }
  return listed;
}

size_t MaxDevicesPerSlice(const std::vector<Json>& devices) {
  for (const Json& d : devices)
    if (d.contains("taints") || d.contains("consumesCounters")) return kMaxTaintedDevicesPerSlice;
  return kMaxDevicesPerSlice;
}

std::vector<Json> Slices(const Pool& pool, std::vector<Json> devices,
                         const std::vector<size_t>& slice_of, size_t count) {
  count = std::max<size_t>(count, 1);
  std::vector<Json> lists(count, Json::array());
  for (size_t i = 0; i < devices.size() && i < slice_of.size(); ++i)
    if (slice_of[i] < count) lists[slice_of[i]].push_back(std::move(devices[i]));
  std::vector<Json> slices;
  for (size_t i = 0; i < count; ++i)
    slices.push_back({{"apiVersion", "resource.k8s.io/v1"},
                      {"kind", "ResourceSlice"},
                      {"metadata", {{"name", SliceName(pool, i)}}},
                      {"spec",
                       {{"driver", pool.driver},
                        {"nodeName", pool.node},
                        {"pool",
                         {{"name", pool.node},
                          {"generation", pool.generation},
                          {"resourceSliceCount", static_cast<int64_t>(count)}}},
                        {"devices", std::move(lists[i])}}}});
  return slices;
}

std::vector<Json> Slices(const Pool& pool, const DeviceList& devices, const UnhealthyTaint& taint) {
  std::vector<Json> listed = PoolDevices(devices, taint);
  const size_t max = MaxDevicesPerSlice(listed);
  std::vector<size_t> slice_of(listed.size());
  for (size_t i = 0; i < listed.size(); ++i) slice_of[i] = i / max;
  const size_t count = (listed.size() + max - 1) / max;
  return Slices(pool, std::move(listed), slice_of, count);
}

}  // namespace devplug::dra
