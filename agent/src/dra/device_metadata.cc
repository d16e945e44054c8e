#include "dra/device_metadata.h"

#include <cctype>
#include <filesystem>

#include "model/dra_names.h"
#include "util/replace_file.h"

namespace devplug::dra {

using Json = nlohmann::json;

std::string BaseRequest(std::string_view request) {
  return std::string(request.substr(0, request.find('/')));
}

std::string PodClaimName(const Json& claim) {
  if (!claim.is_object()) return "";
  auto m = claim.find("metadata");
  if (m == claim.end() || !m->is_object()) return "";
  auto a = m->find("annotations");
  if (a == m->end() || !a->is_object()) return "";
  auto v = a->find(kPodClaimNameAnnotation);
  return v != a->end() && v->is_string() ? v->get<std::string>() : "";
}

std::string MetadataClaimDir(const std::string& driver, const std::string& uid) {
  return StrCat(kMetadataDir, "/", driver, "/", uid);
}

StatusOr<RequestMetadata> Metadata(const std::string& driver, const ClaimRef& claim,
                                   const std::string& pod_claim_name, const std::string& request,
                                   const std::vector<MetadataDevice>& devices) {
  // Every part of a path is a name the API server checked; checked again,
  // so that no claim writes outside its folder.
  auto check = [](std::string_view what, const std::string& name, size_t max) -> Status {
    if (std::string why = CheckDnsSubdomain(name, max); !why.empty())
      return InvalidArgumentError(StrCat("device metadata: ", what, " \"", name, "\" ", why));
    return OkStatus();
  };
  if (Status st = check("driver", driver, 63); !st.ok()) return st;
  if (Status st = check("claim", claim.name, 253); !st.ok()) return st;
  if (Status st = check("request", request, 63); !st.ok()) return st;
  if (!pod_claim_name.empty())
    if (Status st = check("pod claim name", pod_claim_name, 63); !st.ok()) return st;
  for (char c : claim.uid)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-'))
      return InvalidArgumentError(StrCat("device metadata: claim UID \"", claim.uid, "\" is odd"));
  if (claim.uid.empty()) return InvalidArgumentError("device metadata: the claim has no UID");

  RequestMetadata out;
  out.request = request;
  out.file = StrCat(MetadataClaimDir(driver, claim.uid), "/", request, "/metadata.json");
  out.container_path = pod_claim_name.empty()
                           ? StrCat(kMetadataContainerDir, "/resourceclaims/", claim.name, "/",
                                    request, "/", driver, "-metadata.json")
                           : StrCat(kMetadataContainerDir, "/resourceclaimtemplates/",
                                    pod_claim_name, "/", request, "/", driver, "-metadata.json");
  Json list = Json::array();
  for (const MetadataDevice& d : devices) {
    Json dev = {{"driver", driver}, {"pool", d.pool}, {"name", d.name}};
    if (d.attributes.is_object() && !d.attributes.empty()) dev["attributes"] = d.attributes;
    list.push_back(std::move(dev));
  }
  Json doc = {
      {"kind", "DeviceMetadata"},
      {"apiVersion", kMetadataApiVersion},
      {"metadata",
       {{"name", claim.name}, {"namespace", claim.ns}, {"uid", claim.uid}, {"generation", 1}}},
      {"requests", Json::array({{{"name", request}, {"devices", std::move(list)}}})}};
  if (!pod_claim_name.empty()) doc["podClaimName"] = pod_claim_name;
  // One version in the stream: v1beta1, which 1.37 reads.
  out.content = doc.dump(2) + "\n";
  return out;
}

Json MetadataMount(const std::string& host_path, const std::string& container_path) {
  return {{"hostPath", host_path},
          {"containerPath", container_path},
          {"type", "bind"},
          {"options", {"ro", "rbind"}}};
}

Status WriteMetadataFile(const std::string& dir, const std::string& file,
                         const std::string& content) {
  const std::string path = StrCat(dir, "/", file);
  const std::string folder = path.substr(0, path.rfind('/'));
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) return InternalError(StrCat("cannot create ", folder, ": ", ec.message()));
  return ReplaceFile(folder, path.substr(path.rfind('/') + 1), content, 0644, ".devplug-");
}

Status RemoveClaimMetadata(const std::string& dir, const std::string& driver,
                           const std::string& uid) {
  const std::string folder = StrCat(dir, "/", MetadataClaimDir(driver, uid));
  std::error_code ec;
  std::filesystem::remove_all(folder, ec);
  if (ec) return InternalError(StrCat("cannot remove ", folder, ": ", ec.message()));
  return OkStatus();
}

void SweepMetadata(const std::string& dir, const std::string& driver,
                   const std::function<bool(const std::string& uid)>& keep) {
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(dir) / kMetadataDir / driver, ec))
    if (!keep(e.path().filename().string()))
      (void)RemoveClaimMetadata(dir, driver, e.path().filename().string());
}

}  // namespace devplug::dra
