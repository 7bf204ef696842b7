#include "checkpoint/manifest.h"

#include <gtest/gtest.h>

namespace ciuic::checkpoint {
namespace {

Manifest Sample() {
  Manifest m;
  m.save_id = "abc";
  m.world_size = 2;
  m.chunk_bytes = 8192;
  m.extra_json = R"({"tree":[1,2]})";
  TensorInfo t;
  t.name = "w";
  t.dtype = "float32";
  t.stored_dtype = "bfloat16";
  t.shape = {4, 3000};
  for (int r = 0; r < 2; ++r) {
    ShardInfo s;
    s.file = DataFileName("abc", r);
    s.shape = {2, 3000};
    s.offsets = {2 * r, 0};
    s.length = 2 * 3000 * 2;
    s.crc32c = {1, 2};
    t.shards.push_back(s);
  }
  m.tensors.push_back(t);
  return m;
}

TEST(ManifestTest, EncodeDecodeRoundTrip) {
  const Manifest m = Sample();
  auto d = DecodeManifest(EncodeManifest(m), "x");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->save_id, "abc");
  EXPECT_EQ(d->world_size, 2);
  EXPECT_EQ(d->extra_json, m.extra_json);
  ASSERT_EQ(d->tensors.size(), 1u);
  EXPECT_EQ(d->tensors[0].shards[1].offsets, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(d->tensors[0].stored_bytes(), 4u * 3000 * 2);
}

TEST(ManifestTest, BadInputIsCorruptionNotACrash) {
  for (const std::string& text :
       {std::string(""), std::string("{"), std::string("[]"), std::string(R"({"format":1})"),
        std::string(R"({"format":"ciuic-checkpoint","version":2})")}) {
    auto d = DecodeManifest(text, "m");
    EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << text;
  }
  Manifest m = Sample();
  m.tensors[0].shards[0].crc32c.pop_back();  // wrong checksum count
  EXPECT_EQ(DecodeManifest(EncodeManifest(m), "m").status().code(), StatusCode::kCorruption);
  m = Sample();
  m.tensors[0].shards[1].offsets = {3, 0};  // outside the tensor
  EXPECT_EQ(DecodeManifest(EncodeManifest(m), "m").status().code(), StatusCode::kCorruption);
  m = Sample();
  m.tensors[0].shards[0].file = "../x";
  EXPECT_EQ(DecodeManifest(EncodeManifest(m), "m").status().code(), StatusCode::kCorruption);
}

// Numbers are taken only as integers in range; sizes and offsets may not wrap (reported by
// fuzzing; inputs: fuzz/corpus/manifest/regress-*).
TEST(ManifestTest, NumbersMustBeExactAndSizesMustNotOverflow) {
  const std::string good = EncodeManifest(Sample());
  ASSERT_TRUE(DecodeManifest(good, "m").ok());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  for (const std::string& text : {
           with("\"world_size\": 2", "\"world_size\": 4294967298"),  // was read as 2
           with("\"world_size\": 2", "\"world_size\": 2.5"),
           with("\"world_size\": 2", "\"world_size\": 1e300"),  // UB converting to int
           with("\"version\": 1", "\"version\": 4294967297"),
           with("\"chunk_bytes\": 8192", "\"chunk_bytes\": -8192"),
           with("\"offset\": 0", "\"offset\": 9223372036854775000"),  // offset + length wraps
           with("\"offset\": 0", "\"offset\": -1"),
           with("\"crc32c\": [\n      1,", "\"crc32c\": [\n      4294967297,"),
           std::string(100000, '[') + std::string(100000, ']'),
       }) {
    EXPECT_EQ(DecodeManifest(text, "m").status().code(), StatusCode::kCorruption) << text;
  }
  // Offsets near INT64_MAX: offsets[d] + shape[d] overflowed (UB) and could pass the bound.
  Manifest m = Sample();
  m.tensors[0].shards[1].offsets = {INT64_MAX, 0};
  EXPECT_EQ(DecodeManifest(EncodeManifest(m), "m").status().code(), StatusCode::kCorruption);
  // A shape whose byte count wraps to the small length it claims.
  m = Sample();
  m.tensors[0].shape = {int64_t{1} << 62, 1};
  m.tensors[0].shards.resize(1);
  m.tensors[0].shards[0].shape = {int64_t{1} << 62, 1};
  m.tensors[0].shards[0].offsets = {0, 0};
  m.tensors[0].stored_dtype = "float32";  // 2^62 elements * 4 bytes wraps to 0
  m.tensors[0].shards[0].length = 0;
  m.tensors[0].shards[0].crc32c = {};
  EXPECT_EQ(DecodeManifest(EncodeManifest(m), "m").status().code(), StatusCode::kCorruption);
}

TEST(ManifestTest, FileNamesCarryTheSaveId) {
  EXPECT_EQ(SaveIdOfFile(DataFileName("a-b_1", 3)), "a-b_1");
  EXPECT_EQ(SaveIdOfFile(PartFileName("xyz", 0)), "xyz");
  EXPECT_EQ(SaveIdOfFile("MANIFEST.json"), "");
  EXPECT_TRUE(ValidSaveId("0123abcdef"));
  EXPECT_FALSE(ValidSaveId("a/b"));
  EXPECT_FALSE(ValidSaveId(""));
  EXPECT_EQ(DTypeSize("bfloat16"), 2u);
  EXPECT_EQ(DTypeSize("complex128"), 16u);
  EXPECT_EQ(DTypeSize("nope"), 0u);
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(NumElements({3, 0}), 0);
  EXPECT_EQ(NumElements({-1}), -1);
}

}  // namespace
}  // namespace ciuic::checkpoint
