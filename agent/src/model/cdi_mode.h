// How a resource hands out its devices by Container Device Interface name:
// set by the configuration ([agent] cdi, a [[resource]]'s cdi), used by the
// resource's CDI spec and by Allocate.
#pragma once

namespace devplug {

// kOff: no spec, no names. kCri: the names in ContainerAllocateResponse's
// cdi_devices (field 5; kubelet 1.28+, on by default since 1.29). kAnnotations:
// the names in a cdi.k8s.io/ annotation, which older kubelets pass on too.
// kBoth: both. In every mode but kOff devplugd writes the resource's spec.
enum class CdiMode { kOff, kCri, kAnnotations, kBoth };

inline bool CdiNames(CdiMode m) { return m == CdiMode::kCri || m == CdiMode::kBoth; }
inline bool CdiAnnotations(CdiMode m) { return m == CdiMode::kAnnotations || m == CdiMode::kBoth; }

}  // namespace devplug
