#include "model/cdi_names.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "util/hash.h"

namespace devplug::cdi {
namespace {

bool Alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool Digit(char c) { return c >= '0' && c <= '9'; }
bool Alnum(char c) { return Alpha(c) || Digit(c); }

// The library's shape for vendor and class: a letter first, an alphanumeric
// last, `extra` characters between.
std::string CheckPart(std::string_view what, std::string_view text, std::string_view extra) {
  if (text.empty()) return StrCat(what, " is empty");
  if (!Alpha(text.front())) return StrCat(what, " \"", text, "\" must start with a letter");
  if (!Alnum(text.back())) return StrCat(what, " \"", text, "\" must end with a letter or digit");
  for (char c : text)
    if (!Alnum(c) && extra.find(c) == std::string_view::npos)
      return StrCat(what, " \"", text, "\" holds '", std::string(1, c),
                    "' (allowed: letters, digits, ", extra, ")");
  return "";
}

}  // namespace

std::string CheckVendor(std::string_view text) { return CheckPart("vendor", text, "_.-"); }
std::string CheckClass(std::string_view text) { return CheckPart("class", text, "_-"); }

std::string CheckDeviceName(std::string_view text) {
  if (text.empty()) return "device name is empty";
  if (!Alnum(text.front()) || !Alnum(text.back()))
    return StrCat("device name \"", text, "\" must start and end with a letter or digit");
  for (char c : text)
    if (!Alnum(c) && std::string_view("_.:-").find(c) == std::string_view::npos)
      return StrCat("device name \"", text, "\" holds '", std::string(1, c),
                    "' (allowed: letters, digits, _ . : -)");
  return "";
}

StatusOr<Kind> KindOf(std::string_view resource) {
  const size_t slash = resource.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == resource.size())
    return InvalidArgumentError(StrCat("\"", resource, "\" is not <domain>/<name>"));
  Kind kind;
  kind.vendor = StrCat("devplug.", resource.substr(0, slash));
  kind.device_class = std::string(resource.substr(slash + 1));
  std::replace(kind.device_class.begin(), kind.device_class.end(), '.', '_');
  if (std::string why = CheckVendor(kind.vendor); !why.empty()) return InvalidArgumentError(why);
  if (std::string why = CheckClass(kind.device_class); !why.empty())
    return InvalidArgumentError(StrCat("its CDI ", why));
  return kind;
}

std::string SpecFileName(const Kind& kind) {
  return StrCat(kFilePrefix, kind.vendor, "-", kind.device_class, ".json");
}

namespace {
std::string Stem(const Kind& kind) {
  return StrCat(kFilePrefix, kind.vendor, "-", kind.device_class);
}
}  // namespace

std::string AllocationFileName(const Kind& kind, std::string_view name) {
  return StrCat(Stem(kind), "@", name, ".json");
}

std::string AllocationIndexName(const Kind& kind) { return StrCat(Stem(kind), "@allocations"); }

std::string AllocationName(std::vector<std::string> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bits
  for (const std::string& id : ids) {
    for (unsigned char c : id) {
      h ^= c;
      h *= 1099511628211ull;
    }
    h ^= 0xff;  // no ID holds this byte: {"ab"} and {"a","b"} differ
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return StrCat("alloc-", hex);
}

bool KindOwnsFile(const Kind& kind, std::string_view file) {
  const std::string stem = Stem(kind);
  if (file == SpecFileName(kind)) return true;
  return file.size() > stem.size() && file.substr(0, stem.size()) == stem &&
         file[stem.size()] == '@';
}

std::string QualifiedName(const Kind& kind, std::string_view device) {
  return StrCat(kind.vendor, "/", kind.device_class, "=", device);
}

std::string AnnotationKey(std::string_view resource) {
  std::string part;
  for (char c : resource) part += Alnum(c) || c == '.' || c == '-' ? c : '_';
  // "devplug_" + part + "_" + 8 hex digits <= 63 characters.
  constexpr size_t kMaxPart = 63 - 8 - 1 - 8;
  if (part.size() > kMaxPart) part.resize(kMaxPart);
  while (!part.empty() && !Alnum(part.back())) part.pop_back();
  char hash[9];
  std::snprintf(hash, sizeof hash, "%08x", Fnv1a32(resource));
  return StrCat("cdi.k8s.io/devplug_", part, "_", hash);
}

}  // namespace devplug::cdi
