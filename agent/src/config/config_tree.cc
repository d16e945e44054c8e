#include "config/config_tree.h"

#include <algorithm>
#include <cerrno>

namespace devplug::config {
namespace {

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

}  // namespace

bool SameValue(const ConfigNode& a, const ConfigNode& b) {
  if (a.kind != b.kind || a.text != b.text || a.integer != b.integer || a.boolean != b.boolean ||
      a.items.size() != b.items.size() || a.members.size() != b.members.size())
    return false;
  for (size_t i = 0; i < a.items.size(); i++)
    if (!SameValue(a.items[i], b.items[i])) return false;
  for (size_t i = 0; i < a.members.size(); i++)
    if (a.members[i].first != b.members[i].first ||
        !SameValue(a.members[i].second, b.members[i].second))
      return false;
  return true;
}

namespace {

bool BareKeyChar(char c) { return IsAlnum(c) || c == '_' || c == '-'; }

}  // namespace

std::string_view PathTopKey(std::string_view path) {
  size_t n = 0;
  while (n < path.size() && BareKeyChar(path[n])) n++;
  return path.substr(0, n);
}

const ConfigNode* FindNode(const ConfigNode& root, std::string_view rest, int* error) {
  const ConfigNode* node = &root;
  size_t i = 0;
  auto fail = [&](int code) -> const ConfigNode* {
    *error = code;
    return nullptr;
  };
  while (i < rest.size()) {
    if (rest[i] == '[') {
      size_t j = i + 1;
      uint64_t index = 0;
      if (j >= rest.size() || rest[j] < '0' || rest[j] > '9') return fail(-EINVAL);
      for (; j < rest.size() && rest[j] >= '0' && rest[j] <= '9'; j++) {
        if (index > (uint64_t{1} << 40)) return fail(-EINVAL);
        index = index * 10 + static_cast<uint64_t>(rest[j] - '0');
      }
      if (j >= rest.size() || rest[j] != ']') return fail(-EINVAL);
      if (node->kind != ConfigNode::Kind::kArray) return fail(-EINVAL);
      if (index >= node->items.size()) return fail(-ENOENT);
      node = &node->items[index];
      i = j + 1;
    } else if (rest[i] == '.') {
      std::string name;
      size_t j = i + 1;
      if (j < rest.size() && rest[j] == '"') {
        bool closed = false;
        for (j++; j < rest.size(); j++) {
          if (rest[j] == '\\' && j + 1 < rest.size()) {
            name += rest[++j];
          } else if (rest[j] == '"') {
            closed = true;
            j++;
            break;
          } else {
            name += rest[j];
          }
        }
        if (!closed) return fail(-EINVAL);
      } else {
        for (; j < rest.size() && BareKeyChar(rest[j]); j++) name += rest[j];
        if (name.empty()) return fail(-EINVAL);
      }
      if (node->kind != ConfigNode::Kind::kTable) return fail(-EINVAL);
      auto it = std::find_if(node->members.begin(), node->members.end(),
                             [&](const auto& m) { return m.first == name; });
      if (it == node->members.end()) return fail(-ENOENT);
      node = &it->second;
      i = j;
    } else {
      return fail(-EINVAL);
    }
  }
  return node;
}

}  // namespace devplug::config
