// The module-owned part of the configuration: each module key's TOML value
// as a tree, compared by reloads and walked by devplug_host.config_value.
// Plain data, no TOML library.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace devplug::config {

struct ConfigMember;

// A module-owned TOML value at any depth, with its line (for messages that
// point into tables and arrays).
struct ConfigNode {
  enum class Kind { kString, kInt, kBool, kArray, kTable, kOther };
  Kind kind = Kind::kOther;
  std::string text;                   // kString; kOther: the value as TOML writes it
  int64_t integer = 0;                // kInt
  bool boolean = false;               // kBool
  std::vector<ConfigNode> items;      // kArray
  std::vector<ConfigMember> members;  // kTable, by name
  int line = 0;
};
struct ConfigMember {
  std::string first;  // the key
  ConfigNode second;  // its value
};
// Same values (lines do not matter).
bool SameValue(const ConfigNode& a, const ConfigNode& b);

// Where a configuration path ("paths[2].container_path", see
// devplug_host.config_value) leads inside `root`: the node, or nullptr with
// *error set to -ENOENT (not there) or -EINVAL (malformed, or indexing
// into the wrong kind). `root` is the top key's value; `rest` the path
// after the top key's name.
const ConfigNode* FindNode(const ConfigNode& root, std::string_view rest, int* error);
// The top key's name of a path ("paths" of "paths[2].type"), or "" when
// the path does not start with one.
std::string_view PathTopKey(std::string_view path);

}  // namespace devplug::config
