// The agent's UTF-8 rule must be protobuf's rule: a device ID protobuf
// refuses makes the kubelet drop the whole ListAndWatch message.
#include "util/utf8.h"

#include <string>

#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>

#include "deviceplugin/v1beta1/api.pb.h"

namespace devplug {
namespace {

// Protobuf's verdict: a message carrying `s` survives serialising and
// parsing (proto3 strings are checked when parsed).
bool ProtobufAccepts(const std::string& s) {
  v1beta1::Device d;
  d.set_id(s);
  std::string wire;
  if (!d.SerializeToString(&wire)) return false;
  v1beta1::Device back;
  return back.ParseFromString(wire);
}

TEST(Utf8Test, AgreesWithProtobufOnEveryLeadAndSecondByte) {
  google::protobuf::LogSilencer quiet;  // protobuf logs each string it refuses
  // Past the second byte only the continuation range matters: its edges
  // and a byte on either side.
  const unsigned char tails[] = {0x41, 0x7f, 0x80, 0xbf, 0xc0};
  size_t checked = 0;
  for (unsigned a = 0; a < 256; ++a) {
    for (unsigned b = 0; b < 256; ++b) {
      for (size_t len = b == 0 ? 1 : 2; len <= 4; ++len) {  // length 1: once per lead
        for (unsigned char c : tails) {
          for (unsigned char d : tails) {
            std::string s = {static_cast<char>(a), static_cast<char>(b), static_cast<char>(c),
                             static_cast<char>(d)};
            s.resize(len);
            ASSERT_EQ(IsValidUtf8(s), ProtobufAccepts(s))
                << "bytes " << std::hex << a << " " << b << " " << unsigned{c} << " " << unsigned{d}
                << ", length " << len;
            ++checked;
            if (len < 4) break;  // the fourth byte only matters at length 4
          }
          if (len < 3) break;
        }
      }
    }
  }
  EXPECT_EQ(checked, 256u * 256u * (1 + 1 + 5 + 25) - 256u * 255u);
}

TEST(Utf8Test, PrintableUtf8KeepsTextAndReplacesTheRest) {
  EXPECT_EQ(PrintableUtf8("caf\xC3\xA9 ok", 100), "caf\xC3\xA9 ok");
  // Overlong, surrogate, above U+10FFFF, stray continuation: one '?' per byte.
  EXPECT_EQ(PrintableUtf8("a\xC0\xAE"
                          "b",
                          100),
            "a??b");
  EXPECT_EQ(PrintableUtf8("\xED\xA0\x80", 100), "???");
  EXPECT_EQ(PrintableUtf8("\xF4\x90\x80\x80", 100), "????");
  EXPECT_EQ(PrintableUtf8("\x80x", 100), "?x");
  // Control characters become spaces; the limit may cut a character.
  EXPECT_EQ(PrintableUtf8("line\nnext\ttab\x7f", 100), "line next tab ");
  EXPECT_EQ(PrintableUtf8("ab\xC3\xA9", 3), "ab?");
  for (int b = 0; b < 256; b++) {
    const std::string one(1, static_cast<char>(b));
    EXPECT_TRUE(IsValidUtf8(PrintableUtf8(one + "\xC3\xA9" + one, 100))) << b;
  }
}

TEST(Utf8Test, TheFormsANaiveDecoderAccepts) {
  for (const char* bad :
       {"\xc0\xae", "\xc1\x85", "\xe0\x80\x80", "\xe0\x9f\xbf", "\xed\xa0\x80", "\xed\xbf\xbf",
        "\xf0\x80\x80\x80", "\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xf4\xb3\xb3\xbb",
        "\xf5\x80\x80\x80", "\xe2\x82", "\x80", "\xff"})
    EXPECT_FALSE(IsValidUtf8(bad)) << bad;
  for (const char* good : {"", "fake-0", "caf\xc3\xa9", "\xe2\x82\xac", "\xed\x9f\xbf",
                           "\xee\x80\x80", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf"})
    EXPECT_TRUE(IsValidUtf8(good)) << good;
}

}  // namespace
}  // namespace devplug
