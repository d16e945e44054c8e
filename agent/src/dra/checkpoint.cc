#include "dra/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "util/hash.h"
#include "util/replace_file.h"

namespace devplug::dra {
namespace {

using Json = nlohmann::json;
constexpr int kVersion = 1;

Json ToJson(const PreparedClaim& c) {
  Json devices = Json::array();
  for (const PreparedDevice& d : c.devices) {
    devices.push_back({{"request", d.request},
                       {"pool", d.pool},
                       {"device", d.device},
                       {"id", d.id},
                       {"cdiIDs", d.cdi_ids}});
    // Only where there is one: a file of before shares reads the same.
    if (!d.share_id.empty()) devices.back()["shareID"] = d.share_id;
    if (!d.interface_name.empty()) devices.back()["interfaceName"] = d.interface_name;
    if (!d.hardware_address.empty()) devices.back()["hardwareAddress"] = d.hardware_address;
  }
  Json out = {{"uid", c.uid},
              {"namespace", c.ns},
              {"name", c.name},
              {"devices", std::move(devices)},
              {"specFile", c.spec_file},
              {"spec", c.spec}};
  if (!c.metadata.empty()) out["metadata"] = c.metadata;  // a file of before reads the same
  return out;
}

PreparedClaim FromJson(const Json& j) {
  PreparedClaim c;
  c.uid = j.at("uid").get<std::string>();
  c.ns = j.at("namespace").get<std::string>();
  c.name = j.at("name").get<std::string>();
  for (const Json& d : j.at("devices"))
    c.devices.push_back({d.at("request").get<std::string>(), d.at("pool").get<std::string>(),
                         d.at("device").get<std::string>(), d.at("id").get<std::string>(),
                         d.at("cdiIDs").get<std::vector<std::string>>(), d.value("shareID", ""),
                         d.value("interfaceName", ""), d.value("hardwareAddress", "")});
  c.spec_file = j.value("specFile", "");
  c.spec = j.value("spec", "");
  if (j.contains("metadata"))
    c.metadata = j.at("metadata").get<std::map<std::string, std::string>>();
  return c;
}

std::string Checksum(const Json& claims) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", Fnv1a32(claims.dump()));
  return text;
}

}  // namespace

StatusOr<Checkpoint> Checkpoint::Load(const std::string& path, const std::string& node) {
  Checkpoint cp(path);
  cp.version_ = VersionOf(path);
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return cp;
    return UnavailableError(StrCat("checkpoint ", path, ": ", std::strerror(errno)));
  }
  std::ifstream in(path);
  if (!in) return UnavailableError(StrCat("checkpoint ", path, ": cannot be read"));
  std::ostringstream text;
  text << in.rdbuf();
  const Json j = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) {
    return DataLossError(StrCat("checkpoint ", path, ": ", why,
                                "; the claims it held are not known (move it aside to start "
                                "without them)"));
  };
  if (!j.is_object()) return bad("not JSON");
  // Each field's type is checked before it is read: a wrong type is a
  // damaged checkpoint (DATA_LOSS), never an exception out of devplugd.
  const Json version = j.value("version", Json());
  if (!version.is_number_integer() || version.get<int64_t>() != kVersion)
    return bad(StrCat("version ", version.dump(), ", expected ", kVersion));
  if (!j.contains("claims") || !j["claims"].is_array()) return bad("no claims");
  const Json checksum = j.value("checksum", Json());
  if (!checksum.is_string() || checksum.get<std::string>() != Checksum(j["claims"]))
    return bad("checksum mismatch");
  try {
    for (const Json& c : j["claims"]) {
      PreparedClaim claim = FromJson(c);
      const auto other = std::find_if(claim.devices.begin(), claim.devices.end(),
                                      [&](const PreparedDevice& d) { return d.pool != node; });
      if (!node.empty() && other != claim.devices.end()) {
        spdlog::warn(
            "checkpoint {}: claim {}/{} ({}) holds device \"{}\" of pool \"{}\", not this "
            "node's (\"{}\"): another node's entry, left alone (give each node a state folder "
            "of its own)",
            path, claim.ns, claim.name, claim.uid, other->device, other->pool, node);
        cp.foreign_.push_back(std::move(claim));
        continue;
      }
      cp.Put(std::move(claim));
    }
  } catch (const Json::exception& e) {
    return bad(e.what());
  }
  return cp;
}

Status Checkpoint::Save() const {
  Json claims = Json::array();
  for (const auto& [uid, c] : claims_) claims.push_back(ToJson(c));
  for (const PreparedClaim& c : foreign_) claims.push_back(ToJson(c));
  const Json j = {{"version", kVersion}, {"checksum", Checksum(claims)}, {"claims", claims}};
  const std::string text = j.dump(1) + "\n";
  const size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash);
  const std::string name = path_.substr(slash == std::string::npos ? 0 : slash + 1);
  if (Status st = ReplaceFile(dir, name, text, 0600, StrCat(".", name, "."), /*durable=*/true);
      !st.ok())
    return UnavailableError(StrCat("checkpoint ", st.message()));
  version_ = VersionOf(path_);
  return OkStatus();
}

Checkpoint::Version Checkpoint::VersionOf(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return {};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
          static_cast<int64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

bool Checkpoint::ChangedOnDisk() const { return !(VersionOf(path_) == version_); }

const PreparedClaim* Checkpoint::Find(const std::string& uid) const {
  auto it = claims_.find(uid);
  return it == claims_.end() ? nullptr : &it->second;
}

void Checkpoint::Put(PreparedClaim claim) {
  std::string uid = claim.uid;
  claims_[uid] = std::move(claim);
}

bool Checkpoint::Remove(const std::string& uid) { return claims_.erase(uid) > 0; }

}  // namespace devplug::dra
