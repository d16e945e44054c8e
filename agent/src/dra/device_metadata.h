// Device metadata in the container (KEP-5304, beta in Kubernetes 1.37, the
// driver's part): for each request of a claim it prepares, a DRA driver
// writes a metadata.resource.k8s.io DeviceMetadata file naming the
// request's devices and their attributes, and bind-mounts it read-only into
// the claim's containers through the claim's CDI spec, at
//   /var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/<driver>-metadata.json
// or, for a claim made from a pod's ResourceClaimTemplate (the claim's
// resource.kubernetes.io/pod-claim-name annotation), under
// resourceclaimtemplates/<the pod's name for the claim>/, which a pod spec
// can name before the claim exists.
//
// devplugd keeps the files beside the claims' CDI specs, in
// <cdi_dir>/dra-device-metadata/<driver>/<claim UID>/<request>/metadata.json:
// transient like the specs (a reboot empties them, and the checkpoint
// writes both again), one folder per claim, removed at unprepare.
//
// Pure functions but the file ones at the end; thread-safe.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dra/claim_results.h"

namespace devplug::dra {

inline constexpr char kMetadataContainerDir[] = "/var/run/kubernetes.io/dra-device-attributes";
inline constexpr char kMetadataApiVersion[] = "metadata.resource.k8s.io/v1beta1";
// Under cdi_dir; not "devplug-" as its spec files are, so that no sweep of
// stale specs takes it for one.
inline constexpr char kMetadataDir[] = "dra-device-metadata";
// The annotation the ResourceClaim controller puts on a claim it makes from
// a pod's template: the pod's name for the claim.
inline constexpr char kPodClaimNameAnnotation[] = "resource.kubernetes.io/pod-claim-name";

// The claim's request a result names: a subrequest's "main/large" is "main".
std::string BaseRequest(std::string_view request);

// The pod's name for the claim when a template made it ("" otherwise).
// Never throws.
std::string PodClaimName(const nlohmann::json& claim);

// One device of a request, as the file names it.
struct MetadataDevice {
  std::string pool;
  std::string name;           // its DRA name
  nlohmann::json attributes;  // as its slice publishes them
};

struct RequestMetadata {
  std::string request;  // the base request
  // The file, relative to the spec folder, and where the container reads it.
  std::string file;
  std::string container_path;
  std::string content;
};

// The file of `request` (a base request) of `claim`, generation 1.
// INVALID_ARGUMENT when a name the paths are made of is not what the API
// server allows (a DNS label or subdomain): no file outside its folder.
StatusOr<RequestMetadata> Metadata(const std::string& driver, const ClaimRef& claim,
                                   const std::string& pod_claim_name, const std::string& request,
                                   const std::vector<MetadataDevice>& devices);

// The claim's folder of files, relative to the spec folder.
std::string MetadataClaimDir(const std::string& driver, const std::string& uid);

// The CDI mount of a request's file: read-only, `host_path` as the
// runtime sees it.
nlohmann::json MetadataMount(const std::string& host_path, const std::string& container_path);

// ---- the files, under `dir` (the spec folder as devplugd sees it) ----------

// Writes `file` (a RequestMetadata's, relative to `dir`) whole, making its
// folders.
Status WriteMetadataFile(const std::string& dir, const std::string& file,
                         const std::string& content);
// Removes the folder of claim `uid`'s files; one already gone is no error.
Status RemoveClaimMetadata(const std::string& dir, const std::string& driver,
                           const std::string& uid);
// Removes the folders of `driver`'s claims that `keep` (by UID) says no to.
void SweepMetadata(const std::string& dir, const std::string& driver,
                   const std::function<bool(const std::string& uid)>& keep);

}  // namespace devplug::dra
