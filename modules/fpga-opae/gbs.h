// GBS files: the bitstreams OPAE tools and this module program a port with.
//
// Layout (all little-endian):
//   offset  0  u64  GUID1 0x414750466e6f6558
//   offset  8  u64  GUID2 0x31303076534247b7
//   offset 16  u32  metadata length L
//   offset 20       L bytes of JSON metadata:
//                     afu-image.interface-uuid                 the FME interface it fits
//                     afu-image.accelerator-clusters[].accelerator-type-uuid
//                     afu-image.clock-frequency-high / -low    user clocks (MHz, or "auto")
//   offset 20+L     the raw bitstream, what the PR ioctl takes
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace devplug::fpga {

inline constexpr uint64_t kGbsGuid1 = 0x414750466e6f6558ULL;
inline constexpr uint64_t kGbsGuid2 = 0x31303076534247b7ULL;
inline constexpr size_t kGbsHeaderSize = 20;
// Metadata is a few hundred bytes; anything near this is no GBS file.
inline constexpr uint32_t kGbsMaxMetadata = 1u << 20;

struct GbsInfo {
  std::string interface_id;          // canonical (see CanonicalId)
  std::vector<std::string> afu_ids;  // accelerator-type UUIDs, canonical
  // A user clock the image needs: a frequency > 0, or "auto" (the tool
  // reads it from the image). Only fpgaconf sets user clocks.
  bool user_clock = false;
  std::string clock_text;         // as written, for messages ("312.5/156.25")
  uint64_t bitstream_offset = 0;  // 20 + metadata length
  uint64_t bitstream_size = 0;    // file size - offset

  bool HasAfu(std::string_view canonical_afu_id) const;
};

// 32 lower-case hex digits from a UUID written with or without dashes, in
// any case ("D8424DC4-A4A3-C413-F89E-433683F9040B"); nullopt for anything
// else.
std::optional<std::string> CanonicalId(std::string_view text);

// Parses the header and metadata. `head` holds the file's first bytes (at
// least 20 + L of them; more is fine), `file_size` the whole file's size.
// The error says what is wrong ("not a GBS file (bad GUID)", "metadata:
// ..."), without the file's name.
std::variant<GbsInfo, std::string> ParseGbs(std::string_view head, uint64_t file_size);

// Reads the header and metadata of the file at `path` (not the bitstream).
// The error names the file.
std::variant<GbsInfo, std::string> ReadGbs(const std::string& path);

// Reads the raw bitstream of the file at `path` (what ReadGbs described in
// `info`) into *bits: "" or why not, naming the file.
std::string ReadBitstream(const std::string& path, const GbsInfo& info, std::string* bits);

}  // namespace devplug::fpga
