#include "node_labels.h"

#include "kube/client.h"
#include "kube/kubeconfig.h"

namespace devplug {

StatusOr<std::map<std::string, std::string>> ReadNodeLabels(const config::AgentConfig& cfg) {
  auto creds = kube::ChooseCredentials(cfg);
  if (!creds.ok()) return creds.status();
  kube::Client::Options o;
  o.credentials = std::move(*creds);
  o.timeout = cfg.call_timeout;
  kube::Client client(std::move(o));
  auto node = client.Get(StrCat("/api/v1/nodes/", cfg.node_name));
  if (!node.ok()) return node.status();
  std::map<std::string, std::string> labels;
  const auto meta = node->is_object() ? node->value("metadata", nlohmann::json::object())
                                      : nlohmann::json::object();
  const auto found =
      meta.is_object() ? meta.value("labels", nlohmann::json::object()) : nlohmann::json::object();
  if (found.is_object())
    for (const auto& [key, value] : found.items())
      if (value.is_string()) labels[key] = value.get<std::string>();
  return labels;
}

StatusOr<config::AgentConfig> LoadWithNodeLabels(const Loader& load, config::LoadOptions options,
                                                 bool must_read) {
  auto first = load(options);
  if (!first.ok() || !config::UsesNodeLabel(*first)) return first;
  auto labels = ReadNodeLabels(*first);
  if (!labels.ok()) {
    const std::string why = StrCat(
        "cannot read node ", first->node_name, "'s labels (", first->api_label,
        " chooses the API of a resource with api = \"node-label\"): ", labels.status().message());
    if (must_read) return UnavailableError(why);
    options.node_labels_error = labels.status().message();
    return load(options);
  }
  options.node_labels = std::move(*labels);
  return load(options);
}

}  // namespace devplug
