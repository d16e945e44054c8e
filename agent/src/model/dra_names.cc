#include "model/dra_names.h"

#include "util/status.h"

namespace devplug::dra {
namespace {

bool Lower(char c) { return c >= 'a' && c <= 'z'; }
bool Digit(char c) { return c >= '0' && c <= '9'; }
bool Hex(char c) { return Digit(c) || (c >= 'a' && c <= 'f'); }
bool Alnum(char c) { return Lower(c) || Digit(c); }

std::string CheckIdentifier(std::string_view id) {
  if (id.empty()) return "has an empty identifier";
  if (id.size() > 32)
    return StrCat("identifier \"", id, "\" is ", id.size(), " characters; at most 32");
  auto letter = [](char c) { return Lower(c) || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!letter(id.front())) return StrCat("identifier \"", id, "\" must start with a letter or '_'");
  for (char c : id)
    if (!letter(c) && !Digit(c))
      return StrCat("identifier \"", id, "\" holds '", std::string(1, c),
                    "' (a C identifier holds A-Z, a-z, 0-9 and '_')");
  return "";
}

// A dot-separated semver identifier list: alphanumerics and '-', none
// empty; numeric ones without leading zeros where `numeric_rule`.
std::string CheckIdentifiers(std::string_view part, const char* what, bool numeric_rule) {
  size_t start = 0;
  while (start <= part.size()) {
    size_t dot = part.find('.', start);
    if (dot == std::string_view::npos) dot = part.size();
    const std::string_view id = part.substr(start, dot - start);
    if (id.empty()) return StrCat("has an empty ", what, " identifier");
    bool all_digits = true;
    for (char c : id) {
      if (!Alnum(c) && !(c >= 'A' && c <= 'Z') && c != '-')
        return StrCat("holds '", std::string(1, c), "' in its ", what);
      all_digits = all_digits && Digit(c);
    }
    if (numeric_rule && all_digits && id.size() > 1 && id.front() == '0')
      return StrCat("has a numeric ", what, " identifier with a leading zero (\"", id, "\")");
    start = dot + 1;
  }
  return "";
}

}  // namespace

bool IsAgentAttribute(std::string_view name) {
  return name == kAttributeId || name == kAttributeNumaNode || name == kAttributePciBusId ||
         name == kAttributePcieRoot;
}

std::string CheckDnsSubdomain(std::string_view name, size_t max) {
  if (name.empty()) return "is empty";
  if (name.size() > max) return StrCat("is ", name.size(), " characters; at most ", max);
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    const std::string_view label = name.substr(start, dot - start);
    if (label.empty()) return "has an empty label (two dots, or a dot at an end)";
    if (!Alnum(label.front()) || !Alnum(label.back()))
      return StrCat("label \"", label, "\" must start and end with a lower-case letter or digit");
    for (char c : label)
      if (!Alnum(c) && c != '-')
        return StrCat("label \"", label, "\" holds '", std::string(1, c),
                      "' (a DNS subdomain holds a-z, 0-9, '-' and '.')");
    start = dot + 1;
  }
  return "";
}

std::string CheckAttributeName(std::string_view name) {
  const size_t slash = name.find('/');
  if (slash == std::string_view::npos) return CheckIdentifier(name);
  if (std::string why = CheckDnsSubdomain(name.substr(0, slash), 63); !why.empty())
    return StrCat("domain ", why);
  return CheckIdentifier(name.substr(slash + 1));
}

std::string CheckVersion(std::string_view v) {
  if (v.size() > kMaxAttributeValueLength)
    return StrCat("is ", v.size(), " characters; at most ", kMaxAttributeValueLength);
  const size_t plus = v.find('+');
  const std::string_view build = plus == std::string_view::npos ? "" : v.substr(plus + 1);
  const std::string_view rest = v.substr(0, plus);
  const size_t dash = rest.find('-');
  const std::string_view core = rest.substr(0, dash);
  // MAJOR.MINOR.PATCH, each a number without a leading zero.
  int parts = 0;
  size_t start = 0;
  while (start <= core.size()) {
    size_t dot = core.find('.', start);
    if (dot == std::string_view::npos) dot = core.size();
    const std::string_view n = core.substr(start, dot - start);
    if (n.empty()) return "is not MAJOR.MINOR.PATCH";
    for (char c : n)
      if (!Digit(c)) return "is not MAJOR.MINOR.PATCH";
    if (n.size() > 1 && n.front() == '0')
      return StrCat("has a number with a leading zero (\"", n, "\")");
    ++parts;
    start = dot + 1;
  }
  if (parts != 3) return "is not MAJOR.MINOR.PATCH";
  if (dash != std::string_view::npos)
    if (std::string why = CheckIdentifiers(rest.substr(dash + 1), "pre-release", true);
        !why.empty())
      return why;
  if (plus != std::string_view::npos)
    if (std::string why = CheckIdentifiers(build, "build", false); !why.empty()) return why;
  return "";
}

bool IsPcieRoot(std::string_view name) {
  if (name.size() < 3 + 4 + 1 + 2 || name.substr(0, 3) != "pci") return false;
  const std::string_view rest = name.substr(3);
  const size_t colon = rest.find(':');
  if (colon == std::string_view::npos || colon < 4 || rest.size() - colon - 1 != 2) return false;
  for (size_t i = 0; i < rest.size(); ++i)
    if (i != colon && !Hex(rest[i])) return false;
  return true;
}

}  // namespace devplug::dra
