// The ObjectStore contract suite (see object_store_contract.h for how a backend runs it).
#include "objstore/object_store_contract.h"

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace ciuic::objstore::testing {

// Backends may be instantiated in some binaries only (S3 where credentials exist).
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ObjectStoreContractTest);

void ObjectStoreContractTest::SetUp() {
  Result<std::shared_ptr<ObjectStore>> store = GetParam().open();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  store_ = std::move(store).value();
}

void PrintTo(const ContractBackend& backend, std::ostream* os) {
  *os << backend.name;
}

std::string ContractBackendName(const ::testing::TestParamInfo<ContractBackend>& info) {
  return info.param.name;
}

std::string TestBytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(s.data() + i, &x, 8);
  }
  for (; i < n; ++i) {
    s[i] = static_cast<char>(rng());
  }
  return s;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "ciuic-objstore-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) != nullptr) {
    path_ = tmpl;
  }
}

TempDir::~TempDir() {
  if (!path_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
}

namespace {

ListOptions Opts(std::string prefix = "", std::string delimiter = "", uint32_t max_keys = 1000) {
  ListOptions opts;
  opts.prefix = std::move(prefix);
  opts.delimiter = std::move(delimiter);
  opts.max_keys = max_keys;
  return opts;
}

// A whole listing, gathered page by page.
struct Listing {
  std::vector<std::string> objects;
  std::vector<std::string> prefixes;
  int pages = 0;
};

bool StrictlySorted(const std::vector<std::string>& v) {
  return std::adjacent_find(v.begin(), v.end(), std::greater_equal<>()) == v.end();
}

// Lists everything `opts` selects by following `next`, checking each page's shape.
::testing::AssertionResult ListAll(ObjectStore& store, ListOptions opts, Listing* out) {
  *out = Listing{};
  for (int guard = 0; guard < 100000; ++guard) {
    Result<ListPage> page = store.List(opts);
    if (!page.ok()) {
      return ::testing::AssertionFailure() << "List: " << page.status().ToString();
    }
    ++out->pages;
    size_t n = page->objects.size() + page->prefixes.size();
    if (n > opts.max_keys) {
      return ::testing::AssertionFailure() << "page of " << n << " > max_keys " << opts.max_keys;
    }
    if (n == 0 && !page->next.empty()) {
      return ::testing::AssertionFailure() << "an empty page that is not the last";
    }
    for (const ObjectInfo& o : page->objects) {
      if (!o.key.starts_with(opts.prefix)) {
        return ::testing::AssertionFailure() << "key outside the prefix: " << o.key;
      }
      if (!o.metadata.empty()) {
        return ::testing::AssertionFailure() << "List filled metadata of " << o.key;
      }
      out->objects.push_back(o.key);
    }
    for (const std::string& p : page->prefixes) {
      if (!p.starts_with(opts.prefix) || !p.ends_with(opts.delimiter)) {
        return ::testing::AssertionFailure() << "bad rolled-up prefix: " << p;
      }
      out->prefixes.push_back(p);
    }
    if (page->next.empty()) {
      if (!StrictlySorted(out->objects) || !StrictlySorted(out->prefixes)) {
        return ::testing::AssertionFailure() << "listing not in strictly increasing key order";
      }
      return ::testing::AssertionSuccess();
    }
    opts.start = page->next;
  }
  return ::testing::AssertionFailure() << "listing did not end";
}

// What S3 lists for `prefix` and `delim` over `keys`: the model the backends must match.
Listing ModelList(const std::set<std::string>& keys,
                  const std::string& prefix,
                  const std::string& delim) {
  Listing out;
  std::set<std::string> prefixes;
  for (const std::string& k : keys) {
    if (!k.starts_with(prefix)) {
      continue;
    }
    size_t pos = delim.empty() ? std::string::npos : k.find(delim, prefix.size());
    if (pos == std::string::npos) {
      out.objects.push_back(k);
    } else {
      prefixes.insert(k.substr(0, pos + delim.size()));
    }
  }
  out.prefixes.assign(prefixes.begin(), prefixes.end());
  return out;
}

std::string Describe(const std::vector<std::string>& v) {
  std::string s = "[";
  for (const std::string& x : v) {
    s += "\"" + x + "\" ";
  }
  return s + "]";
}

// Checks a full listing of `opts` against the model over `keys`.
::testing::AssertionResult ListMatchesModel(ObjectStore& store,
                                            const std::set<std::string>& keys,
                                            const ListOptions& opts) {
  Listing got;
  ::testing::AssertionResult r = ListAll(store, opts, &got);
  if (!r) {
    return r;
  }
  Listing want = ModelList(keys, opts.prefix, opts.delimiter);
  if (got.objects != want.objects || got.prefixes != want.prefixes) {
    return ::testing::AssertionFailure()
           << "prefix \"" << opts.prefix << "\" delimiter \"" << opts.delimiter << "\" max_keys "
           << opts.max_keys << ": objects " << Describe(got.objects) << " want "
           << Describe(want.objects) << "; prefixes " << Describe(got.prefixes) << " want "
           << Describe(want.prefixes);
  }
  size_t entries = want.objects.size() + want.prefixes.size();
  size_t min_pages = std::max<size_t>(1, (entries + opts.max_keys - 1) / opts.max_keys);
  if (static_cast<size_t>(got.pages) < min_pages) {
    return ::testing::AssertionFailure() << "only " << got.pages << " pages";
  }
  return ::testing::AssertionSuccess();
}

Status PutAll(ObjectStore& store, const std::set<std::string>& keys) {
  for (const std::string& k : keys) {
    CIUIC_RETURN_IF_ERROR(store.Put(k, "value of " + k));
  }
  return Status::OK();
}

// Bytes past ASCII for key tests: a low and a high one, or, where keys must be UTF-8, a 2-byte
// character and a 4-byte one (whose first byte, 0xF0, is above every other in these tests).
std::string LowHigh(const BackendCapabilities& caps) {
  return caps.utf8_keys_only ? "\xc3\xa9" : "\x80";
}
std::string High(const BackendCapabilities& caps) {
  return caps.utf8_keys_only ? "\xf0\x9f\x99\x82" : "\xff";
}
// U+FFFD: UTF-16 order (JavaScript's) puts it after a 4-byte character, byte order before.
const char kReplacementChar[] = "\xef\xbf\xbd";

// A key set that exercises byte order: directory walks visit "a/" where "a-c", "a.d" and
// "a0" need not be, and signed chars would put "\x80" and "\xff" (or UTF-8's lead bytes)
// first.
std::set<std::string> OrderKeys(const BackendCapabilities& caps) {
  const std::string low = LowHigh(caps);
  const std::string high = High(caps);
  std::set<std::string> keys = {"a-c",      "a/b",   "a0",    "a.d",   "a\x7f", "a" + low,
                                "a" + high, "b",     "\x01x", "A",     "a/a-b", "a/a/c",
                                "a/a0",     "a/a.x", "a/b0",  "a b/c", "a-/d",  high + "/" + high};
  if (caps.utf8_keys_only) {
    keys.insert(std::string("a") + kReplacementChar);
  }
  if (caps.key_and_children_coexist) {
    keys.insert({"a", "a/b/c", "a/a"});
  }
  return keys;
}

// Keys that are valid (ValidateKey) but not UTF-8, which a UTF-8-only store refuses.
std::vector<std::string> NonUtf8Keys() {
  return {"a\x80", "\xff/\xff", "x/\xc3", "overlong\xc0\xaf", "surrogate\xed\xa0\x80"};
}

// The delimiters of `delims` that the backend rolls up right.
std::vector<std::string> UsableDelimiters(const BackendCapabilities& caps,
                                          std::vector<std::string> delims) {
  if (!caps.any_delimiter) {
    std::erase_if(delims, [](const std::string& d) { return !d.empty() && d != "/"; });
  }
  return delims;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Records the ranges a PutSource was asked for, and serves them from `data`.
class RecordingSource {
 public:
  explicit RecordingSource(const std::string& data) : data_(data) {}

  PutSource source() {
    return [this](uint64_t offset, std::span<char> dst) -> Status {
      {
        std::lock_guard lock(mu_);
        ranges_.emplace_back(offset, dst.size());
      }
      if (offset > data_.size() || dst.size() > data_.size() - offset) {
        return Status::InvalidArgument("range past the object's end");
      }
      std::memcpy(dst.data(), data_.data() + offset, dst.size());
      return Status::OK();
    };
  }

  // Checks that the ranges asked for are disjoint and cover [0, size) exactly, counting a
  // range asked for again (a retried part) once.
  ::testing::AssertionResult CoversExactly(uint64_t size) const {
    std::vector<std::pair<uint64_t, uint64_t>> r = ranges_;
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    uint64_t at = 0;
    for (const auto& [offset, len] : r) {
      if (offset != at || len == 0) {
        return ::testing::AssertionFailure()
               << "range [" << offset << ", +" << len << ") where " << at << " was next";
      }
      at += len;
    }
    if (at != size) {
      return ::testing::AssertionFailure() << "ranges cover " << at << " of " << size << " bytes";
    }
    return ::testing::AssertionSuccess();
  }

  size_t calls() const { return ranges_.size(); }

 private:
  const std::string& data_;
  std::mutex mu_;
  std::vector<std::pair<uint64_t, uint64_t>> ranges_;
};

// An object size that takes a few of the backend's stream pieces, plus a ragged end.
uint64_t StreamSize(const BackendCapabilities& caps) {
  return caps.stream_piece_bytes > 0 ? caps.stream_piece_bytes * 5 / 2 + 123 : (6 << 20) + 123;
}

std::vector<std::string> InvalidKeys() {
  return {"",
          "/a",
          "a/",
          "a//b",
          ".",
          "..",
          "a/.",
          "a/./b",
          "a/../b",
          "./a",
          "../a",
          "a/..",
          "/",
          "//",
          std::string(1025, 'k'),
          std::string("a\0b", 3)};
}

}  // namespace

TEST_P(ObjectStoreContractTest, DescribeNamesTheStore) {
  EXPECT_NE(store().Describe().find("://"), std::string::npos) << store().Describe();
}

TEST_P(ObjectStoreContractTest, PutGetHeadRoundTrip) {
  const std::string data = TestBytes(100'000, 1);
  const int64_t before = NowMs();
  CIUIC_ASSERT_OK(store().Put("dir/object", data));
  const int64_t after = NowMs();

  Result<ObjectInfo> info = store().Head("dir/object");
  CIUIC_ASSERT_OK(info);
  EXPECT_EQ(info->key, "dir/object");
  EXPECT_EQ(info->size, data.size());
  EXPECT_FALSE(info->etag.empty());
  // Clocks of a remote store may differ a little; a file system's time may be coarse.
  EXPECT_GE(info->mtime_ms, before - 5000);
  EXPECT_LE(info->mtime_ms, after + 5000);
  EXPECT_TRUE(info->metadata.empty());

  std::string buf(data.size(), '\0');
  Result<size_t> n = store().Get("dir/object", 0, std::span<char>(buf));
  CIUIC_ASSERT_OK(n);
  EXPECT_EQ(*n, data.size());
  EXPECT_TRUE(buf == data);

  Result<std::string> all = store().GetAll("dir/object");
  CIUIC_ASSERT_OK(all);
  EXPECT_TRUE(*all == data);
}

TEST_P(ObjectStoreContractTest, OverwriteReplacesDataAndEtag) {
  CIUIC_ASSERT_OK(store().Put("k", "first"));
  Result<ObjectInfo> first = store().Head("k");
  CIUIC_ASSERT_OK(first);
  CIUIC_ASSERT_OK(store().Put("k", "second, longer"));
  Result<ObjectInfo> second = store().Head("k");
  CIUIC_ASSERT_OK(second);
  EXPECT_EQ(second->size, 14u);
  EXPECT_NE(second->etag, first->etag);
  EXPECT_EQ(store().GetAll("k").value_or("?"), "second, longer");
  // Same size, other bytes: the ETag still changes.
  CIUIC_ASSERT_OK(store().Put("k", "SECOND, LONGER"));
  Result<ObjectInfo> third = store().Head("k");
  CIUIC_ASSERT_OK(third);
  EXPECT_NE(third->etag, second->etag);
  EXPECT_EQ(store().GetAll("k").value_or("?"), "SECOND, LONGER");
}

TEST_P(ObjectStoreContractTest, EmptyObject) {
  CIUIC_ASSERT_OK(store().Put("empty", ""));
  Result<ObjectInfo> info = store().Head("empty");
  CIUIC_ASSERT_OK(info);
  EXPECT_EQ(info->size, 0u);
  if (caps().ranged_get_of_empty_object) {
    char buf[16];
    Result<size_t> n = store().Get("empty", 0, std::span<char>(buf, sizeof(buf)));
    CIUIC_ASSERT_OK(n);
    EXPECT_EQ(*n, 0u);
  }
  EXPECT_EQ(store().GetAll("empty").value_or("?"), "");

  int calls = 0;
  CIUIC_ASSERT_OK(store().PutStream("empty-stream", 0, [&](uint64_t, std::span<char>) {
    ++calls;
    return Status::OK();
  }));
  EXPECT_EQ(calls, 0);
  Result<ObjectInfo> stream_info = store().Head("empty-stream");
  CIUIC_ASSERT_OK(stream_info);
  EXPECT_EQ(stream_info->size, 0u);

  Listing all;
  ASSERT_TRUE(ListAll(store(), {}, &all));
  EXPECT_EQ(all.objects, (std::vector<std::string>{"empty", "empty-stream"}));
}

TEST_P(ObjectStoreContractTest, UnusualKeysRoundTrip) {
  std::set<std::string> keys = {
      "with space",
      "sp ace/in dir/x y",
      "unicode-\xc3\xa9-\xe6\x97\xa5\xe6\x9c\xac-\xf0\x9f\x99\x82",
      "plus+sign",
      "percent%20%2F",
      "eq=ual",
      "question?mark",
      "hash#tag",
      "amp&er",
      "tilde~",
      "quotes'\"",
      "back\\slash",
      "star*",
      "colon:semi;",
      "brackets[]{}()",
      "comma,",
      "dollar$",
      "at@",
      "caret^",
      "pipe|",
      "angle<>",
      "tab\tkey",
      "newline\nkey",
      ".hidden",
      "..dots",
      "dots...",
      "a.",
      "-dash",
      "x/.hidden/y",
      "x/...",
  };
  // Every byte but NUL and '/' in one component (every ASCII one and characters of each UTF-8
  // length where keys must be UTF-8), and a key of the longest length the store takes.
  std::string binary = "bin/";
  for (int c = 1; c < (caps().utf8_keys_only ? 128 : 256); ++c) {
    if (c != '/') {
      binary += static_cast<char>(c);
    }
  }
  if (caps().utf8_keys_only) {
    binary += "\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf";
  }
  if (binary.size() - 4 <= caps().max_component_bytes) {
    keys.insert(binary);
  }
  const size_t max_key = caps().max_key_bytes;
  std::string longest;
  const size_t part = std::min<size_t>(caps().max_component_bytes, 200);
  while (longest.size() < max_key) {
    if (!longest.empty()) {
      longest += '/';
    }
    longest += std::string(std::min(part, max_key - longest.size()), 'L');
  }
  ASSERT_EQ(longest.size(), max_key);
  ASSERT_NE(longest.back(), '/');
  keys.insert(longest);

  for (const std::string& k : keys) {
    SCOPED_TRACE(k);
    CIUIC_ASSERT_OK(store().Put(k, "v:" + k));
    Result<std::string> got = store().GetAll(k);
    CIUIC_ASSERT_OK(got);
    EXPECT_EQ(*got, "v:" + k);
    Result<ObjectInfo> info = store().Head(k);
    CIUIC_ASSERT_OK(info);
    EXPECT_EQ(info->key, k);
  }
  Listing all;
  ASSERT_TRUE(ListAll(store(), {}, &all));
  EXPECT_EQ(all.objects, std::vector<std::string>(keys.begin(), keys.end()));
  for (const std::string& k : keys) {
    CIUIC_ASSERT_OK(store().Delete(k));
  }
  ASSERT_TRUE(ListAll(store(), {}, &all));
  EXPECT_TRUE(all.objects.empty()) << Describe(all.objects);

  // Keys that are not UTF-8 round-trip where the store takes them; else they are refused,
  // naming the store.
  for (const std::string& k : NonUtf8Keys()) {
    SCOPED_TRACE(k);
    Status s = store().Put(k, "v:" + k);
    if (caps().utf8_keys_only) {
      CIUIC_EXPECT_CODE(s, kInvalidArgument);
      EXPECT_NE(s.message().find(store().Describe()), std::string::npos) << s.ToString();
      CIUIC_EXPECT_CODE(store().Head(k), kInvalidArgument);
      continue;
    }
    CIUIC_ASSERT_OK(s);
    EXPECT_EQ(store().GetAll(k).value_or("?"), "v:" + k);
    CIUIC_ASSERT_OK(store().Delete(k));
  }
}

TEST_P(ObjectStoreContractTest, InvalidKeysAreRefused) {
  char buf[4];
  std::vector<std::string> invalid = InvalidKeys();
  if (caps().max_key_bytes < 1024) {
    invalid.push_back(std::string(caps().max_key_bytes + 1, 'k'));
  }
  if (caps().utf8_keys_only) {
    std::vector<std::string> non_utf8 = NonUtf8Keys();
    invalid.insert(invalid.end(), non_utf8.begin(), non_utf8.end());
  }
  for (const std::string& k : invalid) {
    SCOPED_TRACE(k);
    CIUIC_EXPECT_CODE(store().Put(k, "x"), kInvalidArgument);
    CIUIC_EXPECT_CODE(
        store().PutStream(k, 1, [](uint64_t, std::span<char>) { return Status::OK(); }),
        kInvalidArgument);
    CIUIC_EXPECT_CODE(store().Get(k, 0, std::span<char>(buf, sizeof(buf))), kInvalidArgument);
    CIUIC_EXPECT_CODE(store().Head(k), kInvalidArgument);
    CIUIC_EXPECT_CODE(store().Delete(k), kInvalidArgument);
  }
  Listing all;
  ASSERT_TRUE(ListAll(store(), {}, &all));
  EXPECT_TRUE(all.objects.empty()) << Describe(all.objects);
}

TEST_P(ObjectStoreContractTest, MissingObjectIsNotFoundNamingStoreAndKey) {
  char buf[4];
  Result<size_t> got = store().Get("no/such key", 0, std::span<char>(buf, sizeof(buf)));
  CIUIC_EXPECT_CODE(got, kNotFound);
  EXPECT_NE(got.status().message().find(store().Describe()), std::string::npos)
      << got.status().ToString();
  EXPECT_NE(got.status().message().find("no/such key"), std::string::npos)
      << got.status().ToString();
  Result<ObjectInfo> head = store().Head("no/such key");
  CIUIC_EXPECT_CODE(head, kNotFound);
  EXPECT_NE(head.status().message().find(store().Describe()), std::string::npos)
      << head.status().ToString();
  EXPECT_NE(head.status().message().find("no/such key"), std::string::npos)
      << head.status().ToString();
  CIUIC_EXPECT_CODE(store().GetAll("no/such key"), kNotFound);
}

TEST_P(ObjectStoreContractTest, ErrorsNameStoreAndKey) {
  Status bad_key = store().Put("bad//key", "x");
  CIUIC_EXPECT_CODE(bad_key, kInvalidArgument);
  EXPECT_NE(bad_key.message().find(store().Describe()), std::string::npos) << bad_key.ToString();
  EXPECT_NE(bad_key.message().find("bad//key"), std::string::npos) << bad_key.ToString();

  Status bad_meta = store().Put("good/key", "x", PutOptions{.metadata = {{"Bad Name", "v"}}});
  CIUIC_EXPECT_CODE(bad_meta, kInvalidArgument);
  EXPECT_NE(bad_meta.message().find(store().Describe()), std::string::npos) << bad_meta.ToString();
  EXPECT_NE(bad_meta.message().find("good/key"), std::string::npos) << bad_meta.ToString();

  Status bad_source = store().PutStream(
      "stream/key", 10, [](uint64_t, std::span<char>) { return Status::IoError("broken"); });
  EXPECT_NE(bad_source.message().find(store().Describe()), std::string::npos)
      << bad_source.ToString();
  EXPECT_NE(bad_source.message().find("stream/key"), std::string::npos) << bad_source.ToString();
}

TEST_P(ObjectStoreContractTest, RangedGet) {
  const std::string data = TestBytes(1000, 7);
  CIUIC_ASSERT_OK(store().Put("ranged", data));
  struct Case {
    uint64_t offset;
    size_t len;
    size_t want;
  };
  const Case cases[] = {
      {0, 1000, 1000},  // all
      {100, 50, 50},    // middle
      {990, 50, 10},    // spanning the end: short
      {999, 1, 1},      // the last byte
      {1000, 10, 0},    // at the end
      {5000, 10, 0},    // past the end
      {uint64_t{1} << 62, 10, 0},
      {500, 0, 0},      // an empty range
      {0, 4000, 1000},  // a buffer larger than the object
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "offset " << c.offset << " len " << c.len);
    std::string buf(c.len, '\0');
    Result<size_t> n = store().Get("ranged", c.offset, std::span<char>(buf));
    CIUIC_ASSERT_OK(n);
    ASSERT_EQ(*n, c.want);
    if (c.want > 0) {
      EXPECT_TRUE(buf.substr(0, c.want) == data.substr(c.offset, c.want));
    }
  }
}

// A data repository's file loads only from the version it imported.
TEST_P(ObjectStoreContractTest, GetVersionReadsOnlyThatVersion) {
  const std::string data = TestBytes(3000, 9);
  CIUIC_ASSERT_OK(store().Put("v", data));
  Result<ObjectInfo> h = store().Head("v");
  CIUIC_ASSERT_OK(h);
  std::string buf(1000, '\0');
  Result<size_t> n = store().GetVersion("v", h->etag, 1000, std::span<char>(buf));
  CIUIC_ASSERT_OK(n);
  EXPECT_EQ(*n, 1000u);
  EXPECT_EQ(buf, data.substr(1000, 1000));
  n = store().GetVersion("v", h->etag, 2500, std::span<char>(buf));  // spanning the end
  CIUIC_ASSERT_OK(n);
  EXPECT_EQ(*n, 500u);
  EXPECT_EQ(buf.substr(0, 500), data.substr(2500));
  CIUIC_ASSERT_OK(store().Put("v", TestBytes(3000, 10)));
  Result<size_t> old = store().GetVersion("v", h->etag, 0, std::span<char>(buf));
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), StatusCode::kAborted) << old.status().ToString();
  CIUIC_ASSERT_OK(store().Delete("v"));
  EXPECT_EQ(store().GetVersion("v", h->etag, 0, std::span<char>(buf)).status().code(),
            StatusCode::kNotFound);
}

TEST_P(ObjectStoreContractTest, PutStreamAsksForDisjointPiecesCoveringTheObject) {
  const uint64_t size = StreamSize(caps());
  const std::string data = TestBytes(size, 11);
  RecordingSource src(data);
  CIUIC_ASSERT_OK(store().PutStream("stream/big", size, src.source()));
  EXPECT_TRUE(src.CoversExactly(size));
  if (caps().stream_piece_bytes > 0) {
    EXPECT_GE(src.calls(), 3u);
  }
  Result<ObjectInfo> info = store().Head("stream/big");
  CIUIC_ASSERT_OK(info);
  EXPECT_EQ(info->size, size);
  Result<std::string> all = store().GetAll("stream/big");
  CIUIC_ASSERT_OK(all);
  EXPECT_TRUE(*all == data);
}

TEST_P(ObjectStoreContractTest, PutStreamSourceErrorLeavesNoObject) {
  const uint64_t size = StreamSize(caps());
  for (uint64_t fail_at : {uint64_t{0}, size / 2}) {
    SCOPED_TRACE(fail_at);
    auto failing = [&](uint64_t offset, std::span<char> dst) -> Status {
      if (offset + dst.size() > fail_at) {
        return Status::IoError("the source gave up");
      }
      std::memset(dst.data(), 'x', dst.size());
      return Status::OK();
    };
    Status s = store().PutStream("stream/failed", size, failing);
    CIUIC_EXPECT_CODE(s, kIoError);
    EXPECT_NE(s.message().find("the source gave up"), std::string::npos) << s.ToString();
    CIUIC_EXPECT_CODE(store().Head("stream/failed"), kNotFound);

    // A failed put over an existing object leaves that object as it was.
    CIUIC_ASSERT_OK(store().Put("stream/kept", "old contents"));
    CIUIC_EXPECT_CODE(store().PutStream("stream/kept", size, failing), kIoError);
    EXPECT_EQ(store().GetAll("stream/kept").value_or("?"), "old contents");
  }
  Listing all;
  ASSERT_TRUE(ListAll(store(), {}, &all));
  EXPECT_EQ(all.objects, (std::vector<std::string>{"stream/kept"}));
}

TEST_P(ObjectStoreContractTest, MetadataRoundTrip) {
  const std::map<std::string, std::string> meta = {
      {"owner", "alice"},
      {"content-sha256", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},
      {"x-1", "a value with spaces & symbols: !#$%"}};
  CIUIC_ASSERT_OK(store().Put("meta/put", "data", PutOptions{.metadata = meta}));
  Result<ObjectInfo> info = store().Head("meta/put");
  CIUIC_ASSERT_OK(info);
  EXPECT_EQ(info->metadata, meta);

  // An overwrite replaces the metadata, it does not merge it.
  CIUIC_ASSERT_OK(store().Put("meta/put", "data2", PutOptions{.metadata = {{"owner", "bob"}}}));
  info = store().Head("meta/put");
  CIUIC_ASSERT_OK(info);
  EXPECT_EQ(info->metadata, (std::map<std::string, std::string>{{"owner", "bob"}}));
  CIUIC_ASSERT_OK(store().Put("meta/put", "data3"));
  info = store().Head("meta/put");
  CIUIC_ASSERT_OK(info);
  EXPECT_TRUE(info->metadata.empty());

  const std::string data = TestBytes(1000, 3);
  RecordingSource src(data);
  CIUIC_ASSERT_OK(
      store().PutStream("meta/stream", data.size(), src.source(), PutOptions{.metadata = meta}));
  info = store().Head("meta/stream");
  CIUIC_ASSERT_OK(info);
  EXPECT_EQ(info->metadata, meta);

  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"Upper", "v"},
                                                        {"with space", "v"},
                                                        {"", "v"},
                                                        {"under_score", "v"},
                                                        {"ok", "new\nline"},
                                                        {"ok", "\x80"},
                                                        {"big", std::string(3000, 'v')}}) {
    SCOPED_TRACE(name);
    CIUIC_EXPECT_CODE(store().Put("meta/bad", "x", PutOptions{.metadata = {{name, value}}}),
                      kInvalidArgument);
  }
  CIUIC_EXPECT_CODE(store().Head("meta/bad"), kNotFound);
}

TEST_P(ObjectStoreContractTest, ListOrdersByUnsignedBytes) {
  const std::set<std::string> keys = OrderKeys(caps());
  CIUIC_ASSERT_OK(PutAll(store(), keys));
  Listing all;
  ASSERT_TRUE(ListAll(store(), {}, &all));
  std::vector<std::string> want(keys.begin(), keys.end());
  std::sort(want.begin(), want.end(), [](const std::string& a, const std::string& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
      return static_cast<unsigned char>(x) < static_cast<unsigned char>(y);
    });
  });
  EXPECT_EQ(all.objects, want);
  // The byte order puts "a-c" and "a.d" before every key under "a/", and "a0" after them.
  auto at = [&](const std::string& k) {
    return std::find(all.objects.begin(), all.objects.end(), k) - all.objects.begin();
  };
  EXPECT_LT(at("a-c"), at("a/a-b"));
  EXPECT_LT(at("a.d"), at("a/a-b"));
  EXPECT_LT(at("a/b0"), at("a0"));
  EXPECT_LT(at("a\x7f"), at("a" + LowHigh(caps())));
  EXPECT_LT(at("a" + LowHigh(caps())), at("a" + High(caps())));
  if (caps().utf8_keys_only) {
    EXPECT_LT(at("a" + LowHigh(caps())), at(std::string("a") + kReplacementChar));
    EXPECT_LT(at(std::string("a") + kReplacementChar), at("a" + High(caps())));
  }
}

TEST_P(ObjectStoreContractTest, ListReportsSizeEtagAndTime) {
  CIUIC_ASSERT_OK(store().Put("s/one", "1"));
  CIUIC_ASSERT_OK(store().Put("s/three", "333"));
  Result<ListPage> page = store().List(Opts("s/"));
  CIUIC_ASSERT_OK(page);
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_TRUE(page->next.empty());
  for (const ObjectInfo& o : page->objects) {
    Result<ObjectInfo> head = store().Head(o.key);
    CIUIC_ASSERT_OK(head);
    EXPECT_EQ(o.size, head->size);
    EXPECT_EQ(o.etag, head->etag);
    EXPECT_EQ(o.mtime_ms, head->mtime_ms);
  }
  EXPECT_EQ(page->objects[0].size, 1u);
  EXPECT_EQ(page->objects[1].size, 3u);
}

TEST_P(ObjectStoreContractTest, ListWithPrefix) {
  const std::set<std::string> keys = OrderKeys(caps());
  CIUIC_ASSERT_OK(PutAll(store(), keys));
  for (const std::string& prefix :
       std::vector<std::string>{"", "a", "a/", "a/a", "a/a/", "a/b", "a-", High(caps()), "zzz",
                                "a/a/c", "a/a/c/", "a/a-b/x", "b/"}) {
    SCOPED_TRACE(prefix);
    EXPECT_TRUE(ListMatchesModel(store(), keys, Opts(prefix)));
  }
  // Spelled out once, beside the model: a prefix that ends mid-component.
  Listing got;
  ASSERT_TRUE(ListAll(store(), Opts("a/a"), &got));
  std::vector<std::string> want = {"a/a-b", "a/a.x", "a/a/c", "a/a0"};
  if (caps().key_and_children_coexist) {
    want.insert(want.begin(), "a/a");
  }
  EXPECT_EQ(got.objects, want);
}

TEST_P(ObjectStoreContractTest, ListWithDelimiterRollsUpPrefixes) {
  const std::set<std::string> keys = OrderKeys(caps());
  CIUIC_ASSERT_OK(PutAll(store(), keys));
  Listing got;
  ASSERT_TRUE(ListAll(store(), Opts("a/", "/"), &got));
  std::vector<std::string> want_objects = {"a/a-b", "a/a.x", "a/a0", "a/b", "a/b0"};
  if (caps().key_and_children_coexist) {
    want_objects.insert(want_objects.begin(), "a/a");
  }
  EXPECT_EQ(got.objects, want_objects) << Describe(got.objects);
  std::vector<std::string> want_prefixes = {"a/a/"};
  if (caps().key_and_children_coexist) {
    want_prefixes.push_back("a/b/");
  }
  EXPECT_EQ(got.prefixes, want_prefixes);

  for (const auto& [prefix, delim] :
       std::vector<std::pair<std::string, std::string>>{{"", "/"},
                                                        {"a", "/"},
                                                        {"a/", "/"},
                                                        {"a/a", "/"},
                                                        {"", "-"},
                                                        {"a", "b"},
                                                        {"", "a/"},
                                                        {"a/", "a"},
                                                        {"", High(caps())},
                                                        {High(caps()), "/"},
                                                        {"nothing", "/"}}) {
    if (!caps().any_delimiter && delim != "/") {
      continue;
    }
    SCOPED_TRACE(::testing::Message() << prefix << " | " << delim);
    EXPECT_TRUE(ListMatchesModel(store(), keys, Opts(prefix, delim)));
  }
}

TEST_P(ObjectStoreContractTest, ListPaginatesWithEveryPageSize) {
  std::set<std::string> keys = OrderKeys(caps());
  std::vector<std::pair<std::string, std::string>> queries = {{"", ""},   {"", "/"},   {"a", "/"},
                                                              {"a/", ""}, {"a/", "/"}, {"", "-"}};
  if (!caps().pages_in_key_order) {
    // Keys of one "directory" whose walk order is their key order; no roll-up.
    keys.clear();
    for (int i = 0; i < 20; ++i) {
      keys.insert(fmt::format("k{:02}", i));
    }
    queries = {{"", ""}, {"k1", ""}};
  }
  CIUIC_ASSERT_OK(PutAll(store(), keys));
  for (uint32_t max_keys = 1; max_keys <= keys.size() + 1; ++max_keys) {
    for (const auto& [prefix, delim] : queries) {
      SCOPED_TRACE(::testing::Message()
                   << "max_keys " << max_keys << " prefix " << prefix << " delimiter " << delim);
      ASSERT_TRUE(ListMatchesModel(store(), keys, Opts(prefix, delim, max_keys)));
    }
  }
  // A page that ends exactly at the last key says it is the last.
  Result<ListPage> page = store().List(Opts("", "", static_cast<uint32_t>(keys.size())));
  CIUIC_ASSERT_OK(page);
  EXPECT_EQ(page->objects.size(), keys.size());
  EXPECT_TRUE(page->next.empty()) << page->next;
}

TEST_P(ObjectStoreContractTest, ListMatchesTheModelOnRandomKeys) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::printf("ListMatchesTheModelOnRandomKeys seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  // Symbols of one character each; keys and prefixes are cut only between them.
  std::vector<std::string> alphabet = {"a", "b", "-", "/", "0", ".", High(caps()), LowHigh(caps())};
  auto random_string = [&](size_t max_len) {
    std::string s;
    size_t len = 1 + rng() % max_len;
    for (size_t i = 0; i < len; ++i) {
      s += alphabet[rng() % alphabet.size()];
    }
    return s;
  };
  // A prefix of `k` that does not cut a UTF-8 character.
  auto cut = [](const std::string& k, size_t len) {
    while (len > 0 && len < k.size() && (static_cast<unsigned char>(k[len]) & 0xc0) == 0x80) {
      --len;
    }
    return k.substr(0, len);
  };
  std::set<std::string> keys;
  while (keys.size() < 80) {
    std::string k = random_string(7);
    if (!ValidateKey(k).ok()) {
      continue;
    }
    if (!caps().key_and_children_coexist) {
      // Skip a key that is a directory of another, or below another.
      bool conflict = false;
      for (const std::string& other : keys) {
        if (other.starts_with(k + "/") || k.starts_with(other + "/")) {
          conflict = true;
          break;
        }
      }
      if (conflict) {
        continue;
      }
    }
    keys.insert(k);
  }
  if (!caps().any_delimiter) {
    // An object in every directory, so that each rolls up (see any_delimiter).
    for (const std::string& k : std::set<std::string>(keys)) {
      for (size_t pos = k.find('/'); pos != std::string::npos; pos = k.find('/', pos + 1)) {
        keys.insert(k.substr(0, pos + 1) + "_");
      }
    }
  }
  CIUIC_ASSERT_OK(PutAll(store(), keys));
  const std::vector<std::string> delims =
      UsableDelimiters(caps(), {"", "/", "/", "-", "a", "0/", High(caps())});
  for (int i = 0; i < 60; ++i) {
    ListOptions opts;
    if (rng() % 4 != 0) {
      const std::string& k = *std::next(keys.begin(), static_cast<long>(rng() % keys.size()));
      opts.prefix = cut(k, rng() % (k.size() + 1));
    } else if (rng() % 2 == 0) {
      opts.prefix = random_string(3);
    }
    opts.delimiter = delims[rng() % delims.size()];
    opts.max_keys = static_cast<uint32_t>(1 + rng() % 9);
    if (rng() % 5 == 0 || !caps().pages_in_key_order) {
      opts.max_keys = 1000;
    }
    ASSERT_TRUE(ListMatchesModel(store(), keys, opts)) << "query " << i;
  }
}

TEST_P(ObjectStoreContractTest, ListOfNothing) {
  Result<ListPage> page = store().List({});
  CIUIC_ASSERT_OK(page);
  EXPECT_TRUE(page->objects.empty());
  EXPECT_TRUE(page->prefixes.empty());
  EXPECT_TRUE(page->next.empty());
  CIUIC_ASSERT_OK(store().Put("x/y", "1"));
  for (const std::string prefix : {"y", "x/y/", "x/z", "x//", "../", "x/../x/"}) {
    SCOPED_TRACE(prefix);
    page = store().List(Opts(prefix, "/"));
    CIUIC_ASSERT_OK(page);
    EXPECT_TRUE(page->objects.empty());
    EXPECT_TRUE(page->prefixes.empty());
    EXPECT_TRUE(page->next.empty());
  }
}

TEST_P(ObjectStoreContractTest, ListRefusesBadMaxKeys) {
  CIUIC_EXPECT_CODE(store().List(Opts("", "", 0)), kInvalidArgument);
  CIUIC_EXPECT_CODE(store().List(Opts("", "", 1001)), kInvalidArgument);
  CIUIC_EXPECT_OK(store().List(Opts("", "", 1000)));
}

TEST_P(ObjectStoreContractTest, DeleteRemovesTheObject) {
  CIUIC_ASSERT_OK(store().Put("d/x", "1"));
  CIUIC_ASSERT_OK(store().Put("d/y", "2"));
  CIUIC_ASSERT_OK(store().Delete("d/x"));
  CIUIC_EXPECT_CODE(store().Head("d/x"), kNotFound);
  Listing all;
  ASSERT_TRUE(ListAll(store(), {}, &all));
  EXPECT_EQ(all.objects, (std::vector<std::string>{"d/y"}));
  CIUIC_EXPECT_OK(store().Delete("d/x"));        // again
  CIUIC_EXPECT_OK(store().Delete("never/was"));  // never there
  CIUIC_EXPECT_OK(store().Delete("d"));          // a "directory" is no object
  EXPECT_EQ(store().GetAll("d/y").value_or("?"), "2");
  CIUIC_ASSERT_OK(store().Delete("d/y"));
  ASSERT_TRUE(ListAll(store(), Opts("", "/"), &all));
  EXPECT_TRUE(all.objects.empty());
  EXPECT_TRUE(all.prefixes.empty()) << Describe(all.prefixes);
}

TEST_P(ObjectStoreContractTest, KeyAndKeysBelowIt) {
  if (caps().key_and_children_coexist) {
    CIUIC_ASSERT_OK(store().Put("a", "file a"));
    CIUIC_ASSERT_OK(store().Put("a/b", "file a/b"));
    EXPECT_EQ(store().GetAll("a").value_or("?"), "file a");
    EXPECT_EQ(store().GetAll("a/b").value_or("?"), "file a/b");
    CIUIC_ASSERT_OK(store().Delete("a"));
    EXPECT_EQ(store().GetAll("a/b").value_or("?"), "file a/b");
    return;
  }
  // The documented difference: the second put fails, naming both keys, and changes nothing.
  CIUIC_ASSERT_OK(store().Put("a", "file a"));
  Status s = store().Put("a/b", "file a/b");
  CIUIC_EXPECT_CODE(s, kAlreadyExists);
  EXPECT_NE(s.message().find("'a'"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("'a/b'"), std::string::npos) << s.ToString();
  EXPECT_EQ(store().GetAll("a").value_or("?"), "file a");
  CIUIC_EXPECT_CODE(store().Head("a/b"), kNotFound);

  CIUIC_ASSERT_OK(store().Put("x/y/z", "file x/y/z"));
  s = store().Put("x/y", "file x/y");
  CIUIC_EXPECT_CODE(s, kAlreadyExists);
  EXPECT_NE(s.message().find("'x/y'"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("'x/y/z'"), std::string::npos) << s.ToString();
  s = store().PutStream("x", 5, [](uint64_t, std::span<char> dst) {
    std::memset(dst.data(), 'x', dst.size());
    return Status::OK();
  });
  CIUIC_EXPECT_CODE(s, kAlreadyExists);
  EXPECT_EQ(store().GetAll("x/y/z").value_or("?"), "file x/y/z");
  CIUIC_EXPECT_CODE(store().Head("x/y"), kNotFound);

  // Once the keys below are gone, the key can be put.
  CIUIC_ASSERT_OK(store().Delete("x/y/z"));
  CIUIC_ASSERT_OK(store().Put("x/y", "file x/y"));
  EXPECT_EQ(store().GetAll("x/y").value_or("?"), "file x/y");
  Listing all;
  ASSERT_TRUE(ListAll(store(), {}, &all));
  EXPECT_EQ(all.objects, (std::vector<std::string>{"a", "x/y"}));
}

TEST_P(ObjectStoreContractTest, ConcurrentPutsGetsListsAndDeletes) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 25;
  std::atomic<int> failures{0};
  auto fail = [&](const std::string& what) {
    if (failures.fetch_add(1) < 10) {
      ADD_FAILURE() << what;
    }
  };
  auto worker = [&](int t) {
    for (int i = 0; i < kRounds; ++i) {
      // Own keys, in a directory every thread also puts to and deletes from.
      const std::string key = "shared-dir/t" + std::to_string(t) + "-" + std::to_string(i % 3);
      const std::string data = TestBytes(1000 + t * 100 + i, t * 1000 + i);
      Status s = store().Put(key, data);
      if (!s.ok()) {
        fail("put " + s.ToString());
        continue;
      }
      Result<std::string> got = store().GetAll(key);
      if (!got.ok() || *got != data) {
        fail("get own key " + key + ": " + got.status().ToString());
      }
      // One key all threads overwrite: a reader sees one whole version.
      if (caps().atomic_overwrite) {
        const std::string version(4096, static_cast<char>('A' + t));
        s = store().Put("contended", version);
        if (!s.ok()) {
          fail("put contended " + s.ToString());
        }
        Result<std::string> seen = store().GetAll("contended");
        if (!seen.ok() || seen->size() != 4096 ||
            seen->find_first_not_of((*seen)[0]) != std::string::npos) {
          fail("contended object torn or missing: " + seen.status().ToString());
        }
      }
      if (i % 5 == 0) {
        Result<ListPage> page = store().List(Opts("shared-dir/", "", 7));
        if (!page.ok()) {
          fail("list " + page.status().ToString());
        }
      }
      if (i % 2 == 1) {
        s = store().Delete(key);
        if (!s.ok()) {
          fail("delete " + s.ToString());
        }
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back(worker, t);
  }
  for (std::thread& th : threads) {
    th.join();
  }
  EXPECT_EQ(failures.load(), 0);
  // Each thread's last round (i = 24, kept) left its key t-0.
  Listing all;
  ASSERT_TRUE(ListAll(store(), Opts("shared-dir/"), &all));
  std::set<std::string> left(all.objects.begin(), all.objects.end());
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(left.count("shared-dir/t" + std::to_string(t) + "-0")) << t;
  }
}

}  // namespace ciuic::objstore::testing
