#include "devplug/common/env.h"

namespace devplug::common {

std::string EnvNameForResource(std::string_view prefix, std::string_view resource) {
  std::string out(prefix);
  out += '_';
  for (char c : resource) {
    if (c == '.' || c == '/')
      out += '_';
    else if (c >= 'a' && c <= 'z')
      out += static_cast<char>(c - 'a' + 'A');
    else
      out += c;
  }
  return out;
}

std::string EnvNameStrict(std::string_view prefix, std::string_view resource) {
  std::string out(prefix);
  out += '_';
  for (char c : resource) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    const bool keep = (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    out += keep ? c : '_';
  }
  return out;
}

}  // namespace devplug::common
