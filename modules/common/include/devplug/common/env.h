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

// The same with a stricter rule: every character outside A-Z, 0-9 and '_'
// (after upper-casing) becomes '_', so the name is a valid shell variable
// whatever the resource name holds: EnvNameStrict("FPGA_RESOURCE",
// "fpga.example.com/nlb-3") is "FPGA_RESOURCE_FPGA_EXAMPLE_COM_NLB_3".
std::string EnvNameStrict(std::string_view prefix, std::string_view resource);

}  // namespace devplug::common
