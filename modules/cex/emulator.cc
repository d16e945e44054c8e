#include "emulator.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

namespace devplug::cex {
namespace {

namespace fs = std::filesystem;

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

void Put(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

class Emulator : public ZcryptOps {
 public:
  int Create(const common::HostRoot& root, const std::string& raw) const override {
    std::lock_guard lock(mu_);
    int rc = Open(root.Path(std::string(kZcryptClass) + "/create"));
    std::string name = Trim(raw).substr(0, kMaxNodeName);
    if (rc == 0) rc = DoCreate(root, name);
    Log(root, "create " + name + " " + std::to_string(rc));
    return rc;
  }
  int Destroy(const common::HostRoot& root, const std::string& raw) const override {
    std::lock_guard lock(mu_);
    int rc = Open(root.Path(std::string(kZcryptClass) + "/destroy"));
    const std::string name = Trim(raw).substr(0, kMaxNodeName);
    if (rc == 0) {
      const std::string dir = root.Path(std::string(kZcryptNodes) + "/" + name);
      if (name.empty() || !fs::is_directory(dir)) {
        rc = -ENOENT;
      } else {
        std::error_code ec;
        fs::remove_all(dir, ec);
        fs::remove(root.Path(std::string(kZcryptClass) + "/" + name), ec);
        fs::remove(root.Path("/dev/" + name), ec);
      }
    }
    Log(root, "destroy " + name + " " + std::to_string(rc));
    return rc;
  }
  int WriteMask(const std::string& path, const std::string& text) const override {
    std::lock_guard lock(mu_);
    int rc = 0;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      rc = -ENOENT;
    } else {
      Mask mask;
      std::ifstream in(path);
      std::string now;
      std::getline(in, now);
      ApplyMaskWrite(now, mask);
      if (!ApplyMaskWrite(text, mask))
        rc = -EINVAL;
      else
        Put(path, FormatMask(mask) + "\n");
    }
    // <root>/sys/devices/virtual/zcrypt/<node>/<file>
    const size_t at = path.find(kZcryptNodes);
    const std::string rel =
        at == std::string::npos ? path : path.substr(at + std::strlen(kZcryptNodes) + 1);
    LogAt(path.substr(0, at == std::string::npos ? 0 : at),
          "mask " + rel + " " + text + " " + std::to_string(rc));
    return rc;
  }

 private:
  static int Open(const std::string& path) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) return -EISDIR;
    if (!fs::exists(path, ec)) return -ENOENT;  // no multi-node support
    return 0;
  }
  static void LogAt(const std::string& root, const std::string& line) {
    std::ofstream(root + "/zcrypt-ops.log", std::ios::app) << line << "\n";
  }
  static void Log(const common::HostRoot& root, const std::string& line) {
    LogAt(root.root(), line);
  }
  static int DoCreate(const common::HostRoot& root, std::string name) {
    const std::string nodes = root.Path(kZcryptNodes);
    std::error_code ec;
    fs::create_directories(nodes, ec);
    std::set<int> minors;
    for (const auto& e : fs::directory_iterator(nodes, ec)) {
      std::ifstream in(e.path() / "dev");
      std::string dev;
      std::getline(in, dev);
      if (auto colon = dev.find(':'); colon != std::string::npos)
        minors.insert(std::atoi(dev.c_str() + colon + 1));
    }
    if (!name.empty() && fs::exists(nodes + "/" + name)) return -EEXIST;
    if (static_cast<int>(minors.size()) >= kMaxNodes) return -ENOSPC;
    int minor = 0;
    while (minors.count(minor)) ++minor;
    if (name.empty()) name = "zcrypt_" + std::to_string(minor);
    const std::string control = root.Path("/zcrypt-emulator");
    int major = 250;
    if (std::ifstream in(control + "/major"); in) in >> major;
    const std::string dir = nodes + "/" + name;
    fs::create_directories(dir, ec);
    const std::string zero = FormatMask(Mask()) + "\n";
    for (const char* m : {"apmask", "aqmask", "ioctlmask"}) Put(dir + "/" + m, zero);
    if (!fs::exists(control + "/no-admask")) Put(dir + "/admask", zero);
    Put(dir + "/dev", std::to_string(major) + ":" + std::to_string(minor) + "\n");
    Put(dir + "/uevent", "MAJOR=" + std::to_string(major) + "\nMINOR=" + std::to_string(minor) +
                             "\nDEVNAME=" + name + "\n");
    fs::create_directories(root.Path(kZcryptClass), ec);
    fs::create_symlink("../../devices/virtual/zcrypt/" + name,
                       root.Path(std::string(kZcryptClass) + "/" + name), ec);
    if (geteuid() == 0 && !fs::exists(control + "/no-dev")) {
      fs::create_directories(root.Path("/dev"), ec);
      const std::string node = root.Path("/dev/" + name);
      if (mknod(node.c_str(), S_IFCHR | 0600, makedev(major, minor)) == 0)
        chmod(node.c_str(), 0600);
    }
    return 0;
  }

  mutable std::mutex mu_;
};

}  // namespace

const ZcryptOps& EmulatorOps() {
  static const Emulator ops;
  return ops;
}

}  // namespace devplug::cex
