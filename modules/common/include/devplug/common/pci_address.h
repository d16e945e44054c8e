// PCI function addresses as sysfs names them ("0000:3b:00.0"). Its own
// object library: the agent checks the addresses modules report with the
// same rules, and links only this of the toolkit.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace devplug::common {

// True for a PCI function address in sysfs's form: "0000:3b:00.0", lower
// case; domains above ffff have more digits ("10000:01:00.0", Intel VMD).
bool IsPciAddress(std::string_view s);

// "0000:3b:00.0" (lower case), also accepting "3b:00.0" (domain 0),
// upper-case hex and a zero-padded domain ("00010000:01:00.0"); nullopt if
// it is not a PCI function address.
std::optional<std::string> NormalizePciAddress(std::string_view s);

}  // namespace devplug::common
