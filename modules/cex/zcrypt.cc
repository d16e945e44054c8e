#include "zcrypt.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace devplug::cex {

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// strtoul with base 0, as simple_strtoul: decimal, 0x hex or 0 octal.
bool Number(std::string_view& s, unsigned long* out) {
  std::string buf(s.substr(0, std::min<size_t>(s.size(), 32)));
  char* end = nullptr;
  *out = std::strtoul(buf.c_str(), &end, 0);
  const size_t used = static_cast<size_t>(end - buf.c_str());
  if (used == 0 || buf[0] == '-' || buf[0] == '+' ||
      std::isspace(static_cast<unsigned char>(buf[0])))
    return false;
  s.remove_prefix(used);
  return true;
}

}  // namespace

bool ApplyMaskWrite(std::string_view text, Mask& mask) {
  Mask m;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    m = mask;
    while (!text.empty()) {
      const char sign = text[0];
      if (sign != '+' && sign != '-') return false;
      text.remove_prefix(1);
      unsigned long a = 0, z = 0;
      if (!Number(text, &a) || a >= m.size()) return false;
      z = a;
      if (!text.empty() && text[0] == '-') {
        text.remove_prefix(1);
        if (!Number(text, &z) || a > z || z >= m.size()) return false;
      }
      for (unsigned long i = a; i <= z; ++i) m.set(i, sign == '+');
      while (!text.empty() && (text[0] == ',' || text[0] == '\n')) text.remove_prefix(1);
    }
  } else {
    if (text.size() >= 2 && text[0] == '0' && text[1] == 'x') text.remove_prefix(1);
    if (!text.empty() && text[0] == 'x') text.remove_prefix(1);
    size_t i = 0;
    while (!text.empty() && HexValue(text[0]) >= 0 && i < m.size()) {
      const int b = HexValue(text[0]);
      for (int n = 0; n < 4; ++n)
        if (b & (0x8 >> n)) m.set(i + static_cast<size_t>(n));
      i += 4;
      text.remove_prefix(1);
    }
    if (!text.empty() && text[0] == '\n') text.remove_prefix(1);
    if (!text.empty()) return false;
  }
  mask = m;
  return true;
}

std::string FormatMask(const Mask& mask) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out = "0x";
  for (size_t i = 0; i < mask.size(); i += 4) {
    int v = 0;
    for (size_t n = 0; n < 4; ++n) v = (v << 1) | (mask.test(i + n) ? 1 : 0);
    out += kDigits[v];
  }
  return out;
}

std::string NodeName(const Apqn& apqn, int share) {
  return std::string(kNodePrefix) + apqn.Name() + "-" + std::to_string(share);
}

bool ParseNodeName(std::string_view name, Apqn* apqn, int* share) {
  if (name.rfind(kNodePrefix, 0) != 0) return false;
  name.remove_prefix(kNodePrefix.size());
  if (name.size() < 9 || name[7] != '-') return false;
  auto a = ParseApqn(name.substr(0, 7));
  if (!a) return false;
  std::string_view k = name.substr(8);
  int v = 0;
  for (char c : k) {
    if (c < '0' || c > '9' || v > 1000) return false;
    v = v * 10 + (c - '0');
  }
  if (k.empty() || (k.size() > 1 && k[0] == '0')) return false;
  *apqn = *a;
  *share = v;
  return true;
}

int WriteFile(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  const ssize_t n = write(fd, text.data(), text.size());
  const int err = errno;
  close(fd);
  if (n < 0) return -err;
  return n == static_cast<ssize_t>(text.size()) ? 0 : -EIO;
}

namespace {

class Kernel : public ZcryptOps {
 public:
  int Create(const common::HostRoot& root, const std::string& name) const override {
    return WriteFile(root.Path(std::string(kZcryptClass) + "/create"), name + "\n");
  }
  int Destroy(const common::HostRoot& root, const std::string& name) const override {
    return WriteFile(root.Path(std::string(kZcryptClass) + "/destroy"), name + "\n");
  }
  int WriteMask(const std::string& path, const std::string& text) const override {
    return WriteFile(path, text + "\n");
  }
};

}  // namespace

const ZcryptOps& KernelOps() {
  static const Kernel ops;
  return ops;
}

}  // namespace devplug::cex
