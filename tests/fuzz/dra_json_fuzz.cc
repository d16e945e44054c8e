// libFuzzer target: what devplugd reads from outside for DRA, as JSON or
// YAML: a ResourceClaim's allocation results (from the API server), the
// prepared-claims checkpoint (from its state folder) and a kubeconfig. The
// first byte picks the reader, the rest is the text. Every input ends in a
// value or an error naming the claim or the file; nothing crashes, throws or
// hangs; a checkpoint that loads saves and loads again to the same claims,
// and a kubeconfig that loads names a server devplugd may send credentials to.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "dra/checkpoint.h"
#include "dra/claim_results.h"
#include "kube/kubeconfig.h"
#include "model/api_server_url.h"

namespace {

const std::string& Folder() {
  static const std::string dir = [] {
    spdlog::set_level(spdlog::level::off);  // another node's claims are logged
    char t[] = "/tmp/devplug-fuzz-dra.XXXXXX";
    if (mkdtemp(t) == nullptr) std::abort();
    return std::string(t);
  }();
  return dir;
}

void Claim(const std::string& text) {
  (void)Folder();
  const nlohmann::json claim = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (claim.is_discarded()) return;
  const devplug::dra::ClaimRef ref{"ns", "uid-1", "c"};
  auto results = devplug::dra::ClaimResults(ref, claim, "dra.example.com", "node-1");
  if (!results.ok()) {
    if (results.status().message().rfind("claim ns/c", 0) != 0) std::abort();
    return;
  }
  if (results->empty()) std::abort();
}

void Checkpoint(const std::string& text) {
  const std::string path = Folder() + "/claims.json";
  {
    std::ofstream out(path, std::ios::trunc);
    out << text;
  }
  auto cp = devplug::dra::Checkpoint::Load(path, "node-1");
  if (!cp.ok()) {
    if (cp.status().message().find(path) == std::string::npos) std::abort();
    return;
  }
  const auto claims = cp->claims();
  if (!cp->Save().ok()) std::abort();
  auto again = devplug::dra::Checkpoint::Load(path, "node-1");
  if (!again.ok() || again->claims() != claims) std::abort();
}

void Kubeconfig(const std::string& text) {
  (void)Folder();
  auto creds = devplug::kube::ParseKubeconfig(text, "/fuzz/kubeconfig");
  if (!creds.ok()) {
    if (creds.status().message().rfind("/fuzz/kubeconfig", 0) != 0) std::abort();
    return;
  }
  if (!devplug::CheckApiServerUrl(creds->server).empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      Claim(text);
      break;
    case 1:
      Checkpoint(text);
      break;
    default:
      Kubeconfig(text);
      break;
  }
  return 0;
}
