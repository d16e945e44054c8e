// Names and values a DRA ResourceSlice holds, with the rules
// resource.k8s.io/v1 checks them by: driver names, attribute and capacity
// names, semantic versions, and the attributes devplugd sets itself.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace devplug::dra {

// Attributes and capacities of one device, together
// (ResourceSliceMaxAttributesAndCapacitiesPerDevice).
inline constexpr size_t kMaxAttributesPerDevice = 32;
// A string or version attribute's value (DeviceAttributeMaxValueLength).
inline constexpr size_t kMaxAttributeValueLength = 64;

// The attributes devplugd sets itself; a module may not set them.
inline constexpr std::string_view kAttributeId = "id";
inline constexpr std::string_view kAttributeNumaNode = "resource.kubernetes.io/numaNode";
inline constexpr std::string_view kAttributePciBusId = "resource.kubernetes.io/pciBusID";
inline constexpr std::string_view kAttributePcieRoot = "resource.kubernetes.io/pcieRoot";
bool IsAgentAttribute(std::string_view name);

// Why `name` is no DNS subdomain of at most `max` characters (lower-case
// labels of a-z, 0-9 and '-', alphanumeric at both ends); "" when it is.
std::string CheckDnsSubdomain(std::string_view name, size_t max);

// Why `name` is no attribute or capacity name: a C identifier of at most 32
// characters, or a DNS subdomain of at most 63, '/' and such an identifier;
// "" when it is one.
std::string CheckAttributeName(std::string_view name);

// Why `v` is no Semantic Versioning 2.0.0 version of at most 64 characters;
// "" when it is one.
std::string CheckVersion(std::string_view v);

// True for a PCIe root complex as sysfs names its folder under
// /sys/devices: "pci" <domain, 4 or more hex digits> ':' <bus, 2>.
bool IsPcieRoot(std::string_view name);

}  // namespace devplug::dra
