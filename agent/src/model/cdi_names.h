// Container Device Interface names devplugd gives a resource's devices:
// the kind (vendor/class), qualified names, the spec file's name and the
// annotation key, with the CDI library's rules for each part. The
// configuration checks a resource's kind with these; cdi/spec.h writes it.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace devplug::cdi {

// Every file devplugd writes in a spec folder starts with this; no other
// file there is ever touched.
inline constexpr std::string_view kFilePrefix = "devplug-";

// vendor/class. devplugd's own vendor per resource domain, so that its
// names never meet those of a spec someone else writes for the same
// hardware (two files that define one name make it unresolvable):
// "devices.kubevirt.io/tun" -> "devplug.devices.kubevirt.io/tun". The class
// is the resource's name part with '.' written as '_' (dots in a class need
// cdiVersion 0.6.0): "nvidia.com/mig-1g.10gb" -> "devplug.nvidia.com/mig-1g_10gb".
struct Kind {
  std::string vendor;
  std::string device_class;
  std::string str() const { return vendor + "/" + device_class; }
  bool operator==(const Kind&) const = default;
};

// The kind of a resource's devices, or why it cannot have one (a name part
// that starts with a digit: a class must start with a letter).
StatusOr<Kind> KindOf(std::string_view resource);
// "devplug-<vendor>-<class>.json".
std::string SpecFileName(const Kind& kind);
// What a module answers only in Allocate (its allocate() hook: macvtap's
// /dev/tap<N>) goes into a spec of its own per container allocation:
// "devplug-<vendor>-<class>@<name>.json", whose one device is
// AllocationName(ids). '@' is in no vendor or class, so these files are
// told apart from every kind's spec file. The allocations a resource has
// written are listed in "devplug-<vendor>-<class>@allocations" (not a spec:
// runtimes read only *.json and *.yaml).
std::string AllocationFileName(const Kind& kind, std::string_view name);
std::string AllocationIndexName(const Kind& kind);
// "alloc-<16 hex digits>", from the set of `ids` (in any order).
std::string AllocationName(std::vector<std::string> ids);
// Whether `file` (a name in a spec folder) is one that a resource of
// `kind` writes: its spec, an allocation's spec, or the index.
bool KindOwnsFile(const Kind& kind, std::string_view file);
// "<vendor>/<class>=<device>".
std::string QualifiedName(const Kind& kind, std::string_view device);

// "" when `text` may be a vendor, a class (cdiVersion 0.5.0) or a device
// name as the CDI library parses them, else why not.
std::string CheckVendor(std::string_view text);
std::string CheckClass(std::string_view text);
std::string CheckDeviceName(std::string_view text);

// The annotation that carries a resource's CDI names to runtimes through
// kubelets that predate field 5: "cdi.k8s.io/devplug_<resource>_<hash>",
// unique per resource (the kubelet keeps one value per key and container,
// so a key two resources shared would lose one of them), at most 63
// characters after the prefix, as the library requires.
std::string AnnotationKey(std::string_view resource);

}  // namespace devplug::cdi
