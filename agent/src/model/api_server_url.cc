#include "model/api_server_url.h"

#include <arpa/inet.h>

#include "util/status.h"

namespace devplug {
namespace {

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost" || host == "[::1]") return true;
  in_addr a;
  const std::string h(host);
  return inet_pton(AF_INET, h.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

}  // namespace

std::string CheckApiServerUrl(std::string_view url) {
  constexpr std::string_view kHttps = "https://", kHttp = "http://";
  const bool https = url.substr(0, kHttps.size()) == kHttps;
  const bool http = url.substr(0, kHttp.size()) == kHttp;
  if (!https && !http) return StrCat("\"", url, "\" is not an https:// URL");
  std::string_view rest = url.substr(https ? kHttps.size() : kHttp.size());
  rest = rest.substr(0, rest.find('/'));
  if (rest.empty()) return StrCat("\"", url, "\" names no host");
  if (https) return "";
  // The host without its port: [v6]:port or name:port.
  std::string_view host = rest;
  if (host.front() == '[') {
    const size_t close = host.find(']');
    host = close == std::string_view::npos ? host : host.substr(0, close + 1);
  } else {
    host = host.substr(0, host.find(':'));
  }
  if (!IsLoopbackHost(host))
    return StrCat("\"", url,
                  "\" is plain http:// to another host: credentials would travel in clear "
                  "(use https://; http:// is accepted for 127.0.0.1, localhost and [::1] only)");
  return "";
}

}  // namespace devplug
