#include "settings.h"

#include <linux/if_link.h>

#include <cctype>

#include "devplug/common/fs.h"
#include "devplug/common/netlink.h"
#include "devplug/common/pci.h"

namespace devplug::macvtap {

using common::Host;

std::string IfNameProblem(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.size() > kMaxIfName)
    return "has " + std::to_string(name.size()) + " characters, more than the 15 of IFNAMSIZ";
  if (name == "." || name == "..") return "is \".\" or \"..\"";
  for (char c : name)
    if (c == '/' || c == ':' || std::isspace(static_cast<unsigned char>(c)))
      return "holds '/', ':' or white space";
  return {};
}

namespace {

size_t Digits(int64_t n) {
  size_t d = 1;
  while (n >= 10) {
    n /= 10;
    ++d;
  }
  return d;
}

}  // namespace

std::optional<Settings> ParseSettings(Host& host) {
  Settings s;
  bool ok = true;
  auto bad = [&](const char* key, const std::string& why) {
    host.ConfigError(key, why);
    ok = false;
  };

  if (auto lower = host.String("lower_device")) {
    s.lower.text = *lower;
    if (auto mac = common::ParseMacAddress(*lower); !mac.empty()) {
      s.lower.kind = LowerSelector::kMac;
      s.lower.value = mac;
    } else if (auto pci = common::NormalizePciAddress(*lower)) {
      s.lower.kind = LowerSelector::kPci;
      s.lower.value = *pci;
    } else if (std::string why = IfNameProblem(*lower); !why.empty()) {
      bad("lower_device", "\"" + *lower + "\" is neither an interface name (it " + why +
                              "), a MAC address like \"52:54:00:12:34:56\" nor a PCI address " +
                              "like \"0000:3b:00.0\"");
    } else {
      s.lower.kind = LowerSelector::kName;
      s.lower.value = *lower;
    }
  } else {
    bad("lower_device",
        "is required: the link the macvtap links sit on (a name, MAC or PCI address)");
  }

  if (auto mode = host.String("mode")) {
    s.mode_name = *mode;
    if (*mode == "bridge")
      s.mode = MACVLAN_MODE_BRIDGE;
    else if (*mode == "vepa")
      s.mode = MACVLAN_MODE_VEPA;
    else if (*mode == "private")
      s.mode = MACVLAN_MODE_PRIVATE;
    else if (*mode == "passthru")
      s.mode = MACVLAN_MODE_PASSTHRU;
    else
      bad("mode",
          "must be \"bridge\", \"vepa\", \"private\" or \"passthru\", not \"" + *mode + "\"");
  } else {
    s.mode = MACVLAN_MODE_BRIDGE;
  }
  const bool passthru = s.mode == MACVLAN_MODE_PASSTHRU;
  if (passthru) s.capacity = 1;
  if (auto capacity = host.Int("capacity")) {
    if (*capacity < 1 || *capacity > kMaxCapacity)
      bad("capacity", "must be between 1 and " + std::to_string(kMaxCapacity));
    else if (passthru && *capacity != 1)
      bad("capacity",
          "must be 1 with mode = \"passthru\": the kernel lets one macvtap link "
          "take the whole lower link");
    else
      s.capacity = *capacity;
  }
  if (auto mtu = host.Int("mtu")) {
    if (*mtu != 0 && (*mtu < 68 || *mtu > 65535))
      bad("mtu", "must be between 68 and 65535 (0: the lower link's)");
    else
      s.mtu = static_cast<uint32_t>(*mtu);
  }
  if (auto netns = host.String("netns")) {
    if (!common::IsAbsolutePath(*netns))
      bad("netns", "\"" + *netns + "\" must be an absolute path, like /proc/1/ns/net");
    else
      s.netns = *netns;
  }
  s.require_link = host.Bool("require_link").value_or(false);

  // The peer's naming: <resource's short name>Mvp<n>, also the link name.
  const std::string_view resource = host.resource_name();
  const size_t slash = resource.rfind('/');
  const std::string_view short_name =
      slash == std::string_view::npos ? resource : resource.substr(slash + 1);
  const bool explicit_prefix = host.String("link_prefix").has_value();
  s.link_prefix = host.String("link_prefix").value_or(std::string(short_name) + "Mvp");
  const char* prefix_key = explicit_prefix ? "link_prefix" : "name";
  const size_t longest = s.link_prefix.size() + Digits(s.capacity - 1);
  if (s.link_prefix.empty()) {
    bad("link_prefix", "is empty");
  } else if (std::string why = IfNameProblem(s.link_prefix + "0");
             !why.empty() && longest <= kMaxIfName) {
    bad(prefix_key, "gives link names that are not interface names: \"" + s.link_prefix + "0\" " +
                        why + (explicit_prefix ? "" : "; set link_prefix"));
  } else if (longest > kMaxIfName) {
    const size_t room = kMaxIfName - std::min(kMaxIfName - 1, Digits(s.capacity - 1));
    bad(prefix_key, "device IDs are also link names, which have at most 15 characters: \"" +
                        s.link_prefix + std::to_string(s.capacity - 1) + "\" has " +
                        std::to_string(longest) + "; a prefix for capacity " +
                        std::to_string(s.capacity) + " has at most " + std::to_string(room) +
                        (explicit_prefix ? "" : ": set link_prefix"));
  }
  if (!ok) return std::nullopt;
  return s;
}

}  // namespace devplug::macvtap
