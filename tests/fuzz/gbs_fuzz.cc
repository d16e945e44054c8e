// libFuzzer target: the fpga-opae module's GBS reader (bitstream files an
// operator drops into bitstream_dir). Any input is either refused with a
// reason or yields IDs in canonical form and a bitstream that lies inside
// the file; nothing throws or crashes. A second pass with the input as the
// metadata of a well-formed header reaches the JSON side on every run.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include "gbs.h"

namespace {

void Check(std::string_view bytes) {
  auto r = devplug::fpga::ParseGbs(bytes, bytes.size());
  if (auto* err = std::get_if<std::string>(&r)) {
    if (err->empty()) std::abort();
    return;
  }
  const auto& g = std::get<devplug::fpga::GbsInfo>(r);
  auto canonical = [](const std::string& id) {
    if (id.size() != 32) return false;
    for (char c : id)
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
  };
  if (!canonical(g.interface_id) || g.afu_ids.empty()) std::abort();
  for (const std::string& a : g.afu_ids)
    if (!canonical(a) || !g.HasAfu(a)) std::abort();
  if (g.bitstream_offset < devplug::fpga::kGbsHeaderSize ||
      g.bitstream_offset + g.bitstream_size != bytes.size())
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20)) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  Check(in);
  // The same bytes as metadata behind a valid header, half of them as the
  // JSON and the rest as the bitstream.
  std::string file(devplug::fpga::kGbsHeaderSize, '\0');
  auto put = [&](size_t at, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) file[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  put(0, devplug::fpga::kGbsGuid1, 8);
  put(8, devplug::fpga::kGbsGuid2, 8);
  const size_t meta = size - size / 4;
  put(16, meta, 4);
  file.append(in);
  Check(file);
  return 0;
}
