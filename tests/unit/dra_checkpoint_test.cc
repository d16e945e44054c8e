// The prepared-claims checkpoint: what a restarted devplugd reads back,
// and how it refuses a file it cannot trust.
#include "dra/checkpoint.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

namespace devplug::dra {
namespace {

using devplug::testing::ReadFile;
using devplug::testing::TempDir;
using devplug::testing::WriteFile;

PreparedClaim Claim(const std::string& uid, int devices = 1) {
  PreparedClaim c{uid, "ns", "claim-" + uid, {}, "", "", {}};
  for (int i = 0; i < devices; ++i)
    c.devices.push_back({"gpu",
                         "node-1",
                         "tun" + std::to_string(i),
                         "tun" + std::to_string(i),
                         {"devplug.io/tun=" + uid + "-tun" + std::to_string(i)},
                         "",
                         "",
                         ""});
  return c;
}

TEST(DraCheckpointTest, AMissingFileIsAnEmptyCheckpoint) {
  TempDir dir;
  auto cp = Checkpoint::Load(dir / "prepared.json");
  ASSERT_TRUE(cp.ok()) << cp.status().message();
  EXPECT_TRUE(cp->claims().empty());
}

TEST(DraCheckpointTest, ClaimsSurviveASaveAndALoad) {
  TempDir dir;
  auto cp = Checkpoint::Load(dir / "prepared.json");
  ASSERT_TRUE(cp.ok());
  cp->Put(Claim("uid-a", 2));
  PreparedClaim shared = Claim("uid-b");
  shared.devices[0].share_id = "5b1e0e0c-share";  // one share of a shared device
  cp->Put(shared);
  PreparedClaim nic = Claim("uid-c");
  nic.devices[0].interface_name = "mvt0";  // a module's network interface (ABI 1.11)
  nic.devices[0].hardware_address = "52:54:00:12:34:56";
  cp->Put(nic);
  ASSERT_TRUE(cp->Save().ok());
  struct stat st;
  ASSERT_EQ(stat((dir / "prepared.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u) << "nothing left beside it";

  auto again = Checkpoint::Load(dir / "prepared.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  ASSERT_EQ(again->claims().size(), 3u);
  ASSERT_NE(again->Find("uid-a"), nullptr);
  EXPECT_EQ(*again->Find("uid-a"), Claim("uid-a", 2));
  EXPECT_EQ(*again->Find("uid-b"), shared);
  EXPECT_EQ(*again->Find("uid-c"), nic);

  // Unprepared: gone from the file too.
  EXPECT_TRUE(again->Remove("uid-a"));
  EXPECT_FALSE(again->Remove("uid-a"));
  ASSERT_TRUE(again->Save().ok());
  auto last = Checkpoint::Load(dir / "prepared.json");
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->claims().size(), 2u);
  EXPECT_EQ(last->Find("uid-a"), nullptr);
}

TEST(DraCheckpointTest, AFileChangedBehindOurBackIsRefusedByName) {
  TempDir dir;
  auto cp = Checkpoint::Load(dir / "prepared.json");
  ASSERT_TRUE(cp.ok());
  cp->Put(Claim("uid-a"));
  ASSERT_TRUE(cp->Save().ok());
  std::string text = ReadFile(dir / "prepared.json");
  const size_t at = text.find("claim-uid-a");
  ASSERT_NE(at, std::string::npos);
  text[at] = 'K';  // still JSON, no longer what was written
  WriteFile(dir / "prepared.json", text);
  auto bad = Checkpoint::Load(dir / "prepared.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find(dir / "prepared.json"), std::string::npos);
  EXPECT_NE(bad.status().message().find("checksum mismatch"), std::string::npos);

  WriteFile(dir / "prepared.json", "{\"version\": 1, \"claims\": [");
  bad = Checkpoint::Load(dir / "prepared.json");
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("not JSON"), std::string::npos);

  WriteFile(dir / "prepared.json", "{\"version\": 2, \"claims\": []}");
  EXPECT_NE(Checkpoint::Load(dir / "prepared.json").status().message().find("version 2"),
            std::string::npos);
}

// A field of the wrong type is a damaged file like any other: DATA_LOSS
// naming the file, never an exception that ends devplugd (review D8).
TEST(DraCheckpointTest, AWrongTypedFieldIsDataLossNotACrash) {
  TempDir dir;
  auto cp = Checkpoint::Load(dir / "prepared.json");
  ASSERT_TRUE(cp.ok());
  cp->Put(Claim("uid-a"));
  ASSERT_TRUE(cp->Save().ok());
  const std::string good = ReadFile(dir / "prepared.json");
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  for (const std::string& text :
       {replaced("\"version\": 1", "\"version\": \"1\""),
        replaced("\"version\": 1", "\"version\": 1.5"),
        replaced("\"checksum\": \"", "\"checksum\": 5, \"x\": \""),
        std::string("{\"version\": 1, \"checksum\": null, \"claims\": []}"),
        std::string("[1, 2]")}) {
    WriteFile(dir / "prepared.json", text);
    StatusOr<Checkpoint> bad = Checkpoint::Load(dir / "prepared.json");
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << text;
    EXPECT_NE(bad.status().message().find(dir / "prepared.json"), std::string::npos) << text;
  }
}

// Two nodes that share a state folder by mistake: each acts only on its own
// pool's claims, and keeps the other's entries as they were (issue 53, the
// project's cluster: node 1 wrote node 2's claim spec and forgot its own).
TEST(DraCheckpointTest, AnotherNodesClaimsAreLeftAloneAndKept) {
  TempDir dir;
  auto cp = Checkpoint::Load(dir / "prepared.json");
  ASSERT_TRUE(cp.ok());
  cp->Put(Claim("mine"));
  PreparedClaim theirs = Claim("theirs");
  theirs.devices[0].pool = "node-2";
  cp->Put(theirs);
  ASSERT_TRUE(cp->Save().ok());

  auto node1 = Checkpoint::Load(dir / "prepared.json", "node-1");
  ASSERT_TRUE(node1.ok()) << node1.status().message();
  ASSERT_EQ(node1->claims().size(), 1u);
  EXPECT_NE(node1->Find("mine"), nullptr);
  EXPECT_EQ(node1->Find("theirs"), nullptr);
  node1->Remove("mine");
  ASSERT_TRUE(node1->Save().ok());

  auto node2 = Checkpoint::Load(dir / "prepared.json", "node-2");
  ASSERT_TRUE(node2.ok()) << node2.status().message();
  ASSERT_EQ(node2->claims().size(), 1u);
  ASSERT_NE(node2->Find("theirs"), nullptr);
  EXPECT_EQ(*node2->Find("theirs"), theirs);
}

TEST(DraCheckpointTest, ASaveThatCannotWriteFailsWithTheReason) {
  TempDir dir;
  auto cp = Checkpoint::Load(dir / "missing/prepared.json");
  ASSERT_TRUE(cp.ok());
  cp->Put(Claim("uid-a"));
  const Status st = cp->Save();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("open"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace devplug::dra
