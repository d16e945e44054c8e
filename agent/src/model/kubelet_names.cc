#include "model/kubelet_names.h"

#include "util/status.h"

namespace devplug::kubelet {
namespace {

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// DNS-1123 subdomain: lowercase labels of [a-z0-9-], starting and ending
// alphanumeric, joined by dots, at most 253 characters.
std::string CheckDnsSubdomain(std::string_view s) {
  if (s.empty()) return "the prefix is empty";
  if (s.size() > 253) return "the prefix is longer than 253 characters";
  size_t start = 0;
  while (start <= s.size()) {
    size_t dot = s.find('.', start);
    std::string_view label =
        s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty()) return "the prefix has an empty DNS label";
    if (!IsLowerAlnum(label.front()) || !IsLowerAlnum(label.back()))
      return "each DNS label of the prefix must start and end with [a-z0-9]";
    for (char c : label)
      if (!IsLowerAlnum(c) && c != '-')
        return "the prefix must be a lowercase DNS subdomain ([a-z0-9.-])";
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return "";
}

}  // namespace

std::string CheckResourceName(std::string_view name) {
  const size_t slash = name.find('/');
  if (slash == std::string_view::npos)
    return "it needs a domain prefix, as in vendor.example/device";
  if (name.find("kubernetes.io/") != std::string_view::npos)
    return "the kubernetes.io/ prefix is reserved for native resources";
  if (name.starts_with("requests.")) return "it must not start with \"requests.\"";
  if (name.find('/', slash + 1) != std::string_view::npos) return "it must contain exactly one '/'";
  // The kubelet checks "requests." + name as a qualified name.
  const std::string prefix = StrCat("requests.", name.substr(0, slash));
  if (std::string why = CheckDnsSubdomain(prefix); !why.empty()) {
    if (prefix.size() > 253) return "the prefix is longer than 244 characters";
    return why;
  }
  std::string_view part = name.substr(slash + 1);
  if (part.empty()) return "the name after '/' is empty";
  if (part.size() > 63) return "the name after '/' is longer than 63 characters";
  if (!IsAlnum(part.front()) || !IsAlnum(part.back()))
    return "the name after '/' must start and end with [A-Za-z0-9]";
  for (char c : part)
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.')
      return "the name after '/' may only hold [A-Za-z0-9._-]";
  return "";
}

std::string CheckSocketName(std::string_view socket, std::string_view dir,
                            std::string_view dir_key) {
  if (socket.empty()) return "is empty";
  if (socket.find('/') != std::string_view::npos)
    return "must be a bare file name (the kubelet joins it with its socket directory)";
  if (socket.front() == '.') return "must not start with '.'";
  for (char c : socket)
    if (!IsAlnum(c) && c != '.' && c != '_' && c != '-')
      return "may only hold the characters A-Z a-z 0-9 . _ -";
  if (socket == "kubelet.sock" || socket == "kubelet_internal_checkpoint")
    return "is a name the kubelet uses itself";
  const size_t full = dir.size() + 1 + socket.size();
  if (full > kMaxSocketPathBytes)
    return StrCat("with ", dir_key, " the path is ", full,
                  " bytes; a Unix socket path holds at most ", kMaxSocketPathBytes);
  return "";
}

namespace {
constexpr std::string_view kSocketPrefix = "devplug-";
constexpr std::string_view kSocketSuffix = ".sock";
}  // namespace

std::string DefaultSocketName(std::string_view resource_name) {
  std::string s(kSocketPrefix);
  for (char c : resource_name) s.push_back(c == '/' ? '_' : c);
  s += kSocketSuffix;
  return s;
}

std::string SecondSocketName(std::string_view socket) {
  if (socket.size() > kSocketSuffix.size() &&
      socket.substr(socket.size() - kSocketSuffix.size()) == kSocketSuffix)
    return StrCat(socket.substr(0, socket.size() - kSocketSuffix.size()), ".b", kSocketSuffix);
  return StrCat(socket, ".b");
}

bool IsDefaultSocketName(std::string_view f) {
  return f.size() > kSocketPrefix.size() + kSocketSuffix.size() &&
         f.substr(0, kSocketPrefix.size()) == kSocketPrefix &&
         f.substr(f.size() - kSocketSuffix.size()) == kSocketSuffix;
}

}  // namespace devplug::kubelet
