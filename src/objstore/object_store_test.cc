// Tests of what object_store.cc gives every backend: key validation, message quoting, the
// prefix successor, and GetAll.
#include "objstore/object_store.h"

#include <gtest/gtest.h>

#include "objstore/mem_object_store.h"
#include "objstore/object_store_contract.h"
#include "objstore/object_store_internal.h"

namespace ciuic::objstore {
namespace {

using internal::PrefixSuccessor;
using internal::QuoteKey;

TEST(ValidateKeyTest, AcceptsWhatS3AndADirectoryCanHold) {
  for (const std::string& k :
       {std::string("a"), std::string("a/b/c"), std::string("a.b"), std::string("..a"),
        std::string("a..b/.c"), std::string(1024, 'x'), std::string("sp ace"),
        std::string("\x01\xff"), std::string("a/b.")}) {
    EXPECT_TRUE(ValidateKey(k).ok()) << QuoteKey(k) << ": " << ValidateKey(k).ToString();
  }
}

TEST(ValidateKeyTest, RefusesEmptyLongNulDotAndEmptyComponents) {
  struct Case {
    std::string key;
    std::string why;
  };
  for (const Case& c : std::vector<Case>{{"", "empty"},
                                         {std::string(1025, 'x'), "1025 bytes"},
                                         {std::string("a\0b", 3), "NUL"},
                                         {"/a", "empty path component"},
                                         {"a/", "empty path component"},
                                         {"a//b", "empty path component"},
                                         {".", "'.' or '..'"},
                                         {"a/..", "'.' or '..'"},
                                         {"./a", "'.' or '..'"},
                                         {"a/../b", "'.' or '..'"}}) {
    Status s = ValidateKey(c.key);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << QuoteKey(c.key);
    EXPECT_NE(s.message().find(c.why), std::string::npos) << s.ToString();
    if (c.key.size() < 100) {
      EXPECT_NE(s.message().find(QuoteKey(c.key)), std::string::npos) << s.ToString();
    }
  }
}

TEST(QuoteKeyTest, EscapesWhatIsNotPrintableUtf8) {
  EXPECT_EQ(QuoteKey("plain/key"), "'plain/key'");
  EXPECT_EQ(QuoteKey("it's"), "'it\\'s'");
  EXPECT_EQ(QuoteKey("back\\slash"), "'back\\\\slash'");
  EXPECT_EQ(QuoteKey("tab\there"), "'tab\\x09here'");
  EXPECT_EQ(QuoteKey("caf\xc3\xa9"), "'caf\xc3\xa9'");       // UTF-8 as is
  EXPECT_EQ(QuoteKey("bad\xc3"), "'bad\\xc3'");              // a cut sequence
  EXPECT_EQ(QuoteKey("\xff\x80"), "'\\xff\\x80'");           // not UTF-8
  EXPECT_EQ(QuoteKey("\xed\xa0\x80"), "'\\xed\\xa0\\x80'");  // a UTF-16 surrogate
  std::string long_key(2000, 'k');
  std::string quoted = QuoteKey(long_key);
  EXPECT_NE(quoted.find("(2000 bytes)"), std::string::npos);
  EXPECT_LT(quoted.size(), 1100u);
}

TEST(PrefixSuccessorTest, IncrementsTheLastByteThatCan) {
  EXPECT_EQ(PrefixSuccessor("a/"), "a0");
  EXPECT_EQ(PrefixSuccessor("ab"), "ac");
  EXPECT_EQ(PrefixSuccessor("a\xff"), "b");
  EXPECT_EQ(PrefixSuccessor("a\x7f"), "a\x80");
  EXPECT_EQ(PrefixSuccessor("\xff\xff"), std::nullopt);
  EXPECT_EQ(PrefixSuccessor(""), std::nullopt);
}

TEST(ValidateMetadataTest, NamesValuesAndSize) {
  EXPECT_TRUE(internal::ValidateMetadata(PutOptions{.metadata = {{"a-1", "v v"}}}, "x").ok());
  EXPECT_EQ(internal::ValidateMetadata(PutOptions{.metadata = {{"A", "v"}}}, "where").code(),
            StatusCode::kInvalidArgument);
  Status s = internal::ValidateMetadata(PutOptions{.metadata = {{"n", std::string(2048, 'v')}}},
                                        "mem://x: put 'k'");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("mem://x: put 'k'"), std::string::npos) << s.ToString();
}

// A store whose objects grow between Head and Get (over a MemObjectStore).
class GrowingStore final : public ObjectStore {
 public:
  Status Put(std::string_view key, std::string_view data, const PutOptions& opts) override {
    return inner_.Put(key, data, opts);
  }
  Status PutStream(std::string_view key,
                   uint64_t size,
                   const PutSource& source,
                   const PutOptions& opts) override {
    return inner_.PutStream(key, size, source, opts);
  }
  Result<size_t> Get(std::string_view key, uint64_t offset, std::span<char> dst) override {
    return inner_.Get(key, offset, dst);
  }
  Result<ObjectInfo> Head(std::string_view key) override {
    Result<ObjectInfo> info = inner_.Head(key);
    Status s = inner_.Put(key, "a longer object than before");
    if (!s.ok()) {
      return s;
    }
    return info;
  }
  Result<ListPage> List(const ListOptions& opts) override { return inner_.List(opts); }
  Status Delete(std::string_view key) override { return inner_.Delete(key); }
  std::string Describe() const override { return inner_.Describe(); }

 private:
  MemObjectStore inner_;
};

TEST(GetAllTest, NoticesAnObjectThatChangedSize) {
  GrowingStore growing;
  ObjectStore& store = growing;
  ASSERT_TRUE(store.Put("k", "short").ok());
  Result<std::string> all = store.GetAll("k");
  EXPECT_EQ(all.status().code(), StatusCode::kCorruption) << all.status().ToString();
  EXPECT_NE(all.status().message().find("mem://test"), std::string::npos);
  EXPECT_NE(all.status().message().find("'k'"), std::string::npos);
}

}  // namespace
}  // namespace ciuic::objstore
