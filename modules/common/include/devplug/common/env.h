// Names of the environment variables modules give containers.
#pragma once

#include <string>
#include <string_view>

namespace devplug::common {

// "<prefix>_<resource>" with the resource name upper-cased and every '.'
// and '/' turned into '_': EnvNameForResource("PCI_RESOURCE",
// "intel.com/qat_vf") is "PCI_RESOURCE_INTEL_COM_QAT_VF". This is the rule
// KubeVirt and DPDK-based workloads use to find the variable, so other
// characters (such as '-') are kept as they are.
std::string EnvNameForResource(std::string_view prefix, std::string_view resource);

}  // namespace devplug::common
