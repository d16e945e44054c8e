#include "kube/kubeconfig.h"

#include <yaml.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "model/api_server_url.h"

namespace devplug::kube {
namespace {

// A YAML document as JSON: scalars as strings (a kubeconfig's fields are
// strings but for insecure-skip-tls-verify). Aliases may point back up, or
// nest so that the tree doubles at each level: depth and the number of
// nodes made are bounded (`budget`, counted down; below 0 the result is cut).
Json ToJson(yaml_document_t* doc, yaml_node_t* node, int depth, int64_t& budget) {
  if (node == nullptr || depth > 32 || --budget < 0) return nullptr;
  switch (node->type) {
    case YAML_SCALAR_NODE:
      return std::string(reinterpret_cast<const char*>(node->data.scalar.value),
                         node->data.scalar.length);
    case YAML_SEQUENCE_NODE: {
      Json out = Json::array();
      for (yaml_node_item_t* i = node->data.sequence.items.start; i < node->data.sequence.items.top;
           ++i)
        out.push_back(ToJson(doc, yaml_document_get_node(doc, *i), depth + 1, budget));
      return out;
    }
    case YAML_MAPPING_NODE: {
      Json out = Json::object();
      for (yaml_node_pair_t* p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top;
           ++p) {
        const Json key = ToJson(doc, yaml_document_get_node(doc, p->key), depth + 1, budget);
        if (key.is_string())
          out[key.get<std::string>()] =
              ToJson(doc, yaml_document_get_node(doc, p->value), depth + 1, budget);
      }
      return out;
    }
    default:
      return nullptr;
  }
}

// A kubeconfig has tens of nodes; one of a large cluster, a few thousand.
constexpr int64_t kMaxNodes = 100'000;

StatusOr<Json> ParseYaml(const std::string& text, const std::string& path) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return InternalError("yaml_parser_initialize failed");
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  yaml_document_t doc;
  if (!yaml_parser_load(&parser, &doc)) {
    Status st = InvalidArgumentError(StrCat(path, ":", parser.problem_mark.line + 1, ": ",
                                            parser.problem ? parser.problem : "not YAML"));
    yaml_parser_delete(&parser);
    return st;
  }
  int64_t budget = kMaxNodes;
  Json out = ToJson(&doc, yaml_document_get_root_node(&doc), 0, budget);
  yaml_document_delete(&doc);
  yaml_parser_delete(&parser);
  if (budget < 0)
    return InvalidArgumentError(StrCat(path, ": more than ", kMaxNodes,
                                       " YAML nodes (aliases that expand?); not a kubeconfig"));
  return out;
}

// RFC 4648 base64, padding optional, line breaks ignored; nullopt on any
// other character.
std::optional<std::string> DecodeBase64(const std::string& in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+')
      v = 62;
    else if (c == '/')
      v = 63;
    else if (c == '=' || c == '\n' || c == '\r')
      continue;
    else
      return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

// The entry named `name` of the list `list` ("clusters", "users",
// "contexts"), its inner object (`inner`: "cluster", "user", "context").
const Json* Named(const Json& config, const char* list, const char* inner,
                  const std::string& name) {
  if (!config.contains(list) || !config[list].is_array()) return nullptr;
  for (const Json& e : config[list])
    if (e.is_object() && e.value("name", Json()).is_string() &&
        e["name"].get<std::string>() == name && e.contains(inner) && e[inner].is_object())
      return &e[inner];
  return nullptr;
}

std::string Str(const Json& obj, const char* key) {
  return obj.contains(key) && obj[key].is_string() ? obj[key].get<std::string>() : std::string();
}

// A YAML 1.1 spelling of false (or an empty value).
bool IsYamlFalse(const Json& v) {
  if (v.is_null()) return true;
  if (!v.is_string()) return false;
  for (const char* f :
       {"", "false", "False", "FALSE", "no", "No", "NO", "n", "N", "off", "Off", "OFF"})
    if (v.get<std::string>() == f) return true;
  return false;
}

}  // namespace

StatusOr<Credentials> ParseKubeconfig(const std::string& text, const std::string& path) {
  auto bad = [&](const std::string& why) { return InvalidArgumentError(StrCat(path, ": ", why)); };
  auto parsed = ParseYaml(text, path);
  if (!parsed.ok()) return parsed.status();
  const Json& config = *parsed;
  if (!config.is_object()) return bad("not a kubeconfig (no mapping at the top)");

  std::string context_name = Str(config, "current-context");
  if (context_name.empty()) {
    const Json contexts = config.value("contexts", Json::array());
    if (!contexts.is_array() || contexts.size() != 1)
      return bad("no current-context, and not exactly one context to take");
    context_name = Str(contexts[0], "name");
  }
  const Json* context = Named(config, "contexts", "context", context_name);
  if (context == nullptr) return bad(StrCat("context \"", context_name, "\" is not defined"));
  const std::string cluster_name = Str(*context, "cluster"), user_name = Str(*context, "user");
  const Json* cluster = Named(config, "clusters", "cluster", cluster_name);
  if (cluster == nullptr)
    return bad(StrCat("cluster \"", cluster_name, "\" (of context \"", context_name,
                      "\") is not defined"));
  const Json* user = Named(config, "users", "user", user_name);
  if (user == nullptr && !user_name.empty())
    return bad(
        StrCat("user \"", user_name, "\" (of context \"", context_name, "\") is not defined"));

  const std::string dir = path.substr(0, path.find_last_of('/') + 1);
  auto file = [&](const std::string& f) {
    return f.empty() || f.front() == '/' || dir.empty() ? f : dir + f;
  };
  Credentials c;
  c.server = Str(*cluster, "server");
  if (std::string why = CheckApiServerUrl(c.server); !why.empty())
    return bad(StrCat("cluster \"", cluster_name, "\": server: ", why));
  while (!c.server.empty() && c.server.back() == '/') c.server.pop_back();
  // Scalars come as strings; YAML 1.1 (which kubectl reads) has many
  // spellings of true. Anything but a spelling of false is refused.
  if (cluster->contains("insecure-skip-tls-verify") &&
      !IsYamlFalse(cluster->at("insecure-skip-tls-verify")))
    return bad(
        StrCat("cluster \"", cluster_name, "\": insecure-skip-tls-verify is refused: give its CA"));
  // Fields that change whom devplugd connects to, or as whom: refused rather
  // than ignored, so it never acts as another identity than the file says.
  for (const char* unsupported : {"tls-server-name", "proxy-url"})
    if (cluster->contains(unsupported) && !Str(*cluster, unsupported).empty())
      return bad(
          StrCat("cluster \"", cluster_name, "\": ", unsupported,
                 " is not supported (devplugd connects to the server's own name, directly)"));
  c.ca_file = file(Str(*cluster, "certificate-authority"));
  if (c.ca_file.empty() && cluster->contains("certificate-authority-data")) {
    auto pem = DecodeBase64(Str(*cluster, "certificate-authority-data"));
    if (!pem)
      return bad(
          StrCat("cluster \"", cluster_name, "\": certificate-authority-data is not base64"));
    c.ca_pem = std::move(*pem);
  }
  if (user == nullptr) return c;  // no credentials: anonymous

  for (const char* unsupported : {"exec", "auth-provider", "username", "password"})
    if (user->contains(unsupported))
      return bad(StrCat("user \"", user_name, "\": ", unsupported,
                        " is not supported (use a token, a tokenFile, or a client certificate)"));
  for (const char* unsupported : {"as", "as-uid", "as-groups", "as-user-extra"})
    if (user->contains(unsupported) && !user->at(unsupported).is_null())
      return bad(StrCat("user \"", user_name, "\": ", unsupported,
                        " (impersonation) is not supported: give the identity itself"));
  c.token = Str(*user, "token");
  c.token_file = file(Str(*user, "tokenFile"));
  c.client_cert = file(Str(*user, "client-certificate"));
  c.client_key = file(Str(*user, "client-key"));
  for (auto [key, out] : {std::pair{"client-certificate-data", &c.client_cert_pem},
                          std::pair{"client-key-data", &c.client_key_pem}}) {
    if (!user->contains(key)) continue;
    auto pem = DecodeBase64(Str(*user, key));
    if (!pem) return bad(StrCat("user \"", user_name, "\": ", key, " is not base64"));
    *out = std::move(*pem);
  }
  const bool cert = !c.client_cert.empty() || !c.client_cert_pem.empty();
  const bool key = !c.client_key.empty() || !c.client_key_pem.empty();
  if (cert != key)
    return bad(StrCat("user \"", user_name,
                      "\": a client certificate needs its key, and a key its certificate"));
  return c;
}

StatusOr<Credentials> LoadKubeconfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgumentError(StrCat("cannot read kubeconfig ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return ParseKubeconfig(text.str(), path);
}

StatusOr<Credentials> ChooseCredentials(const std::string& kubeconfig, Credentials given) {
  if (!kubeconfig.empty()) return LoadKubeconfig(kubeconfig);
  if (given.server.empty()) return InCluster();
  return given;
}

StatusOr<Credentials> ChooseCredentials(const config::AgentConfig& cfg) {
  Credentials given;
  given.server = cfg.api_server;
  given.ca_file = cfg.api_ca_file;
  given.token_file = cfg.api_token_file;
  given.client_cert = cfg.api_client_cert;
  given.client_key = cfg.api_client_key;
  return ChooseCredentials(cfg.api_kubeconfig, std::move(given));
}

}  // namespace devplug::kube
