#include "node_labels.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <utility>

#include "kube/client.h"
#include "kube/kubeconfig.h"

namespace devplug {
namespace {

// The labels of a Node object.
std::map<std::string, std::string> LabelsOf(const nlohmann::json& node) {
  std::map<std::string, std::string> labels;
  const auto meta = node.is_object() ? node.value("metadata", nlohmann::json::object())
                                     : nlohmann::json::object();
  const auto found =
      meta.is_object() ? meta.value("labels", nlohmann::json::object()) : nlohmann::json::object();
  if (found.is_object())
    for (const auto& [key, value] : found.items())
      if (value.is_string()) labels[key] = value.get<std::string>();
  return labels;
}

std::string VersionOf(const nlohmann::json& object) {
  const auto meta = object.is_object() ? object.value("metadata", nlohmann::json::object())
                                       : nlohmann::json::object();
  const auto rv =
      meta.is_object() ? meta.value("resourceVersion", nlohmann::json()) : nlohmann::json();
  return rv.is_string() ? rv.get<std::string>() : std::string();
}

}  // namespace

StatusOr<std::map<std::string, std::string>> ReadNodeLabels(const config::AgentConfig& cfg) {
  auto creds = kube::ChooseCredentials(cfg);
  if (!creds.ok()) return creds.status();
  kube::Client::Options o;
  o.credentials = std::move(*creds);
  o.timeout = cfg.call_timeout;
  kube::Client client(std::move(o));
  auto node = client.Get(StrCat("/api/v1/nodes/", cfg.node_name));
  if (!node.ok()) return node.status();
  return LabelsOf(*node);
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

NodeLabelWatch::NodeLabelWatch(Options options, Seen seen)
    : options_(std::move(options)), seen_(std::move(seen)), thread_([this] { Run(); }) {}

NodeLabelWatch::~NodeLabelWatch() {
  Cancel();
  thread_.join();
}

void NodeLabelWatch::Cancel() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  cancel_.Cancel();
}

bool NodeLabelWatch::Sleep(std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  MutexLock lock(mu_);
  while (!stop_ && std::chrono::steady_clock::now() < until) cv_.wait_until(mu_, until);
  return !stop_;
}

void NodeLabelWatch::Run() {
  kube::Client::Options o;
  o.credentials = options_.credentials;
  o.timeout = options_.call_timeout;
  kube::Client client(std::move(o));
  std::minstd_rand random(static_cast<uint32_t>(
      std::hash<std::string>()(options_.node) ^
      static_cast<size_t>(std::chrono::steady_clock::now().time_since_epoch().count())));
  const kube::Selector selector{StrCat("metadata.name=", options_.node), ""};
  auto tell = [&](const nlohmann::json& node) {
    const auto labels = LabelsOf(node);
    const auto it = labels.find(options_.label);
    seen_(it == labels.end() ? std::nullopt : std::optional<std::string>(it->second));
  };
  std::string version;  // "": list the Node first
  bool listed = false;  // `version` is the last list's, not yet watched from
  std::chrono::milliseconds backoff = options_.backoff_first;
  std::string last_error;
  // After an error: the backoff, with up to half of it again as jitter.
  auto wait_after = [&](const Status& st, std::chrono::seconds retry_after) {
    if (st.message() != last_error)
      spdlog::warn("node {}'s label {}: {}; trying again with backoff", options_.node,
                   options_.label, st.message());
    last_error = st.message();
    auto wait = backoff + std::chrono::milliseconds(random() % (backoff.count() / 2 + 1));
    wait = std::max<std::chrono::milliseconds>(wait, retry_after);
    backoff = std::min(backoff * 2, options_.backoff_max);
    return Sleep(wait);
  };
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stop_) return;
    }
    if (version.empty()) {
      // A list of this one Node: its version is the collection's, current
      // even when the Node has not changed for long (a Node's own version
      // may be older than what the server still keeps for a watch).
      auto list = client.List("/api/v1/nodes", selector);
      if (!list.ok()) {
        if (!wait_after(list.status(), std::chrono::seconds(0))) return;
        continue;
      }
      if (!last_error.empty())
        spdlog::info("node {}'s label {}: read again", options_.node, options_.label);
      last_error.clear();
      version = VersionOf(*list);
      listed = true;
      const auto items = list->is_object() ? list->value("items", nlohmann::json::array())
                                           : nlohmann::json::array();
      if (items.is_array())
        for (const auto& node : items) tell(node);
      if (version.empty()) {  // no version to watch from: read again later
        if (!wait_after(UnavailableError("the API server's list of nodes has no resourceVersion"),
                        std::chrono::seconds(0)))
          return;
        continue;
      }
    }
    const auto lasts =
        options_.watch_timeout +
        std::chrono::seconds(random() % static_cast<uint32_t>(options_.watch_timeout.count() + 1));
    const auto began = std::chrono::steady_clock::now();
    std::chrono::seconds retry_after{0};
    const Status st = client.Watch(
        "/api/v1/nodes", selector, version, lasts,
        [&](const nlohmann::json& event) {
          const auto type = event.find("type");
          const auto object = event.find("object");
          if (type == event.end() || !type->is_string() || object == event.end()) return;
          if (std::string v = VersionOf(*object); !v.empty()) version = std::move(v);
          if (*type == "ADDED" || *type == "MODIFIED") tell(*object);
        },
        &cancel_, &retry_after);
    const bool fresh = std::exchange(listed, false);
    if (st.code() == StatusCode::kCancelled) return;
    if (st.code() == StatusCode::kOutOfRange) {
      version.clear();  // too old: the Node again, from a list
      // Refused from a version just listed: not again at once.
      if (fresh && !wait_after(st, std::chrono::seconds(0))) return;
      continue;
    }
    if (st.ok()) {
      // A server that ends watches at once is not asked again at once.
      if (std::chrono::steady_clock::now() - began >= std::chrono::seconds(10)) {
        backoff = options_.backoff_first;
        continue;
      }
      if (!Sleep(backoff)) return;
      backoff = std::min(backoff * 2, options_.backoff_max);
      continue;
    }
    if (!wait_after(st, retry_after)) return;
  }
}

std::optional<NodeLabelWatch::Options> NodeLabelWatchOptions(const config::AgentConfig& cfg,
                                                             std::string* why) {
  if (!config::UsesNodeLabel(cfg)) return std::nullopt;
  auto creds = kube::ChooseCredentials(cfg);
  if (!creds.ok()) {
    *why = creds.status().message();
    return std::nullopt;
  }
  NodeLabelWatch::Options o;
  o.credentials = std::move(*creds);
  o.node = cfg.node_name;
  o.label = cfg.api_label;
  o.call_timeout = cfg.call_timeout;
  return o;
}

}  // namespace devplug
