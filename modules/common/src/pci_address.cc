#include "devplug/common/pci_address.h"

#include <cctype>

namespace devplug::common {

bool IsPciAddress(std::string_view s) {
  // <domain>:bb:dd.f in lower-case hex, as the kernel prints it ("%04x"): a
  // domain of 4 digits, or up to 8 without leading zeros (Intel VMD puts its
  // devices in domains 10000 and up); device (slot) 00-1f; function 0-7.
  auto lower_hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  if (s.size() < 12 || s.size() > 16) return false;
  const size_t d = s.size() - 8;  // domain digits
  if (d > 4 && s[0] == '0') return false;
  if (s[d] != ':' || s[d + 3] != ':' || s[d + 6] != '.') return false;
  for (size_t i = 0; i < d; ++i)
    if (!lower_hex(s[i])) return false;
  for (size_t i : {d + 1, d + 2, d + 5})
    if (!lower_hex(s[i])) return false;
  return (s[d + 4] == '0' || s[d + 4] == '1') && s[d + 7] >= '0' && s[d + 7] <= '7';
}

std::optional<std::string> NormalizePciAddress(std::string_view s) {
  std::string out;
  if (s.size() == 7) out = "0000:";  // "3b:02.1": domain 0
  out += s;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // A domain written with more digits than the kernel uses ("00010000").
  while (out.size() > 12 && out[0] == '0' && out.find(':') > 4) out.erase(0, 1);
  if (!IsPciAddress(out)) return std::nullopt;
  return out;
}

}  // namespace devplug::common
