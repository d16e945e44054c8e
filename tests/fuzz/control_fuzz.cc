// libFuzzer target: the control socket's request parser (what a client of
// /run/devplug/control.sock sends, up to its 4 KiB line). Any input ends in a
// query or an INVALID_ARGUMENT with a reason; nothing throws or crashes, and
// a query written back out as the documented JSON form parses to the same
// query.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ops/control.h"

using devplug::ops::ControlQuery;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;  // the server reads at most this much
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  auto q = devplug::ops::ParseControlQuery(line);
  if (!q.ok()) {
    if (q.status().code() != devplug::StatusCode::kInvalidArgument) std::abort();
    if (q.status().message().empty()) std::abort();
    return 0;
  }
  nlohmann::json again;
  if (q->kind == ControlQuery::Kind::kMetrics) {
    again = {{"metrics", nlohmann::json::object()}};
  } else if (q->kind == ControlQuery::Kind::kHandover) {
    again = {{"handover", nlohmann::json::object()}};
  } else {
    again = {{"status", {{"devices", q->devices}, {"resource", q->resource}}}};
  }
  auto r = devplug::ops::ParseControlQuery(again.dump());
  if (!r.ok() || r->kind != q->kind || r->devices != q->devices || r->resource != q->resource)
    std::abort();
  return 0;
}
