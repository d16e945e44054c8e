#include "gbs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

namespace devplug::fpga {
namespace {

uint64_t Le(std::string_view b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(b[at + i])) << (8 * i);
  return v;
}

// A clock frequency: a number (MHz; > 0 asks for a user clock), a string
// ("auto", "auto-312.5": the tool decides), or absent.
std::variant<bool, std::string> UserClock(const nlohmann::json& image, const char* key) {
  auto it = image.find(key);
  if (it == image.end() || it->is_null()) return false;
  if (it->is_number()) {
    const double mhz = it->get<double>();
    if (!(mhz >= 0)) return std::string(key) + " is negative";
    return mhz > 0;
  }
  if (it->is_string()) return !it->get<std::string>().empty();
  return std::string(key) + " is neither a number nor a string";
}

std::string ClockText(const nlohmann::json& image, const char* key) {
  auto it = image.find(key);
  if (it == image.end() || it->is_null()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// pread() until `n` bytes or the end of the file; the bytes read.
size_t ReadAt(int fd, char* buf, size_t n, uint64_t at) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = pread(fd, buf + done, n - done, static_cast<off_t>(at + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

}  // namespace

bool GbsInfo::HasAfu(std::string_view id) const {
  for (const std::string& a : afu_ids)
    if (a == id) return true;
  return false;
}

std::optional<std::string> CanonicalId(std::string_view text) {
  std::string out;
  out.reserve(32);
  for (char c : text) {
    if (c == '-') continue;
    if (c >= '0' && c <= '9')
      out += c;
    else if (c >= 'a' && c <= 'f')
      out += c;
    else if (c >= 'A' && c <= 'F')
      out += static_cast<char>(c - 'A' + 'a');
    else
      return std::nullopt;
    if (out.size() > 32) return std::nullopt;
  }
  if (out.size() != 32) return std::nullopt;
  return out;
}

std::variant<GbsInfo, std::string> ParseGbs(std::string_view head, uint64_t file_size) {
  if (head.size() < kGbsHeaderSize || file_size < kGbsHeaderSize)
    return std::string("not a GBS file (shorter than its 20-byte header)");
  if (Le(head, 0, 8) != kGbsGuid1 || Le(head, 8, 8) != kGbsGuid2)
    return std::string("not a GBS file (its header GUIDs are wrong)");
  const uint64_t len = Le(head, 16, 4);
  if (len > kGbsMaxMetadata)
    return "metadata length " + std::to_string(len) + " is implausible (over 1 MiB)";
  if (file_size < kGbsHeaderSize + len || head.size() < kGbsHeaderSize + len)
    return "truncated: the header announces " + std::to_string(len) +
           " bytes of metadata, the file is shorter";
  std::string_view meta = head.substr(kGbsHeaderSize, len);
  // Tools pad the metadata with NUL bytes.
  while (!meta.empty() && (meta.back() == '\0' || meta.back() == ' ' || meta.back() == '\n'))
    meta.remove_suffix(1);
  GbsInfo info;
  info.bitstream_offset = kGbsHeaderSize + len;
  info.bitstream_size = file_size - info.bitstream_offset;
  nlohmann::json j = nlohmann::json::parse(meta, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::string("metadata is not valid JSON");
  if (!j.is_object()) return std::string("metadata is not a JSON object");
  auto image = j.find("afu-image");
  if (image == j.end() || !image->is_object())
    return std::string("metadata has no \"afu-image\" object");
  auto iface = image->find("interface-uuid");
  if (iface == image->end() || !iface->is_string())
    return std::string("metadata has no afu-image.interface-uuid");
  auto canonical = CanonicalId(iface->get<std::string>());
  if (!canonical)
    return "afu-image.interface-uuid \"" + iface->get<std::string>() + "\" is not a UUID";
  info.interface_id = *canonical;
  auto clusters = image->find("accelerator-clusters");
  if (clusters == image->end() || !clusters->is_array() || clusters->empty())
    return std::string("metadata has no afu-image.accelerator-clusters");
  for (const nlohmann::json& c : *clusters) {
    if (!c.is_object()) return std::string("an accelerator-clusters item is not an object");
    auto type = c.find("accelerator-type-uuid");
    if (type == c.end() || !type->is_string())
      return std::string("an accelerator-clusters item has no accelerator-type-uuid");
    auto id = CanonicalId(type->get<std::string>());
    if (!id) return "accelerator-type-uuid \"" + type->get<std::string>() + "\" is not a UUID";
    info.afu_ids.push_back(*id);
  }
  for (const char* key : {"clock-frequency-high", "clock-frequency-low"}) {
    auto clock = UserClock(*image, key);
    if (auto* err = std::get_if<std::string>(&clock)) return "afu-image." + *err;
    info.user_clock = info.user_clock || std::get<bool>(clock);
  }
  info.clock_text = ClockText(*image, "clock-frequency-high") + "/" +
                    ClockText(*image, "clock-frequency-low") + " MHz";
  return info;
}

std::variant<GbsInfo, std::string> ReadGbs(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return path + ": " + std::strerror(errno);
  struct stat st {};
  std::string head(kGbsHeaderSize, '\0');
  std::string err;
  if (fstat(fd, &st) != 0) {
    err = path + ": " + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    err = path + ": not a regular file";
  } else {
    head.resize(ReadAt(fd, head.data(), kGbsHeaderSize, 0));
    if (head.size() == kGbsHeaderSize) {
      const uint64_t len = Le(head, 16, 4);
      if (len <= kGbsMaxMetadata && len <= static_cast<uint64_t>(st.st_size)) {
        head.resize(kGbsHeaderSize + len);
        head.resize(kGbsHeaderSize + ReadAt(fd, head.data() + kGbsHeaderSize, len, kGbsHeaderSize));
      }
    }
  }
  close(fd);
  if (!err.empty()) return err;
  auto parsed = ParseGbs(head, static_cast<uint64_t>(st.st_size));
  if (auto* e = std::get_if<std::string>(&parsed)) return path + ": " + *e;
  return parsed;
}

std::string ReadBitstream(const std::string& path, const GbsInfo& info, std::string* bits) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return path + ": " + std::strerror(errno);
  bits->assign(info.bitstream_size, '\0');
  const size_t got = ReadAt(fd, bits->data(), bits->size(), info.bitstream_offset);
  close(fd);
  if (got != bits->size()) return path + ": shorter than its header says";
  return "";
}

}  // namespace devplug::fpga
