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

}  // namespace devplug::common
