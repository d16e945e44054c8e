// Which kubelet API serves a resource's devices: set per [[resource]] by
// the configuration, used by the resource, shown by the status.
#pragma once

namespace devplug {

// kDevicePlugin: the device plugin API (an extended resource the kubelet
// counts; Allocate per container). kDra: Dynamic Resource Allocation
// (resource.k8s.io/v1): the devices are published as ResourceSlices of one
// pool for this node, the scheduler allocates them to ResourceClaims, and
// the kubelet asks the driver to prepare each claim (kubelets 1.32 and
// later; v1 from 1.34).
enum class ServingApi { kDevicePlugin, kDra };

}  // namespace devplug
