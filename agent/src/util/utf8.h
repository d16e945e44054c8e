// UTF-8 well-formedness as the Unicode standard defines it (Table 3-7 of
// the Unicode Core Specification): no overlong forms, no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequence.
//
// It is the rule protobuf applies to proto3 string fields on both ends of
// the wire (Go's utf8.ValidString in the kubelet, the C++ parser here): a
// string it rejects makes the peer drop the whole message. A unit test
// compares this function with protobuf's own parser on every lead and
// second byte.
#pragma once

#include <string>
#include <string_view>

namespace devplug {

bool IsValidUtf8(std::string_view s);

// Module text made safe for logs, JSON and protobuf strings: at most
// `max_bytes` of it, every byte that does not start a valid UTF-8 sequence
// (including a sequence cut by the limit) replaced by '?', and control
// characters by ' '.
std::string PrintableUtf8(std::string_view s, size_t max_bytes);

}  // namespace devplug
