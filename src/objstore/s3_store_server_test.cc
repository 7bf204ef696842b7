// S3Store against a real S3-compatible server: npm's s3rver, started once for the suite on
// 127.0.0.1 (S3rverProcess). Each test roots its store at a prefix of its own. s3rver does not
// check signatures; s3_test (vectors, botocore oracle, ScriptedHttpServer) covers those.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "objstore/object_store_contract.h"
#include "objstore/s3_store.h"
#include "objstore/s3_test_server.h"
#include "objstore/s3_test_util.h"

namespace ciuic::objstore {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kPart = 5 * kMiB;
constexpr char kBucket[] = "ciuic-test";

using testutil::Contains;
using testutil::IsOk;
using testutil::NoEnv;
using testutil::RandomBytes;

class S3ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = S3rverProcess::Start({});
    if (server.ok()) {
      server_ = std::move(*server).release();
    } else {
      start_error_ = new Status(server.status());
    }
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "s3rver did not start: " << start_error_->ToString();
    root_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    store_ = Open(Options());
    ASSERT_NE(store_, nullptr);
  }

  S3Options Options() const {
    S3Options o;
    o.bucket = kBucket;
    o.root_prefix = root_;
    o.endpoint = server_->endpoint();
    o.region = "us-east-1";
    o.credentials = {"S3RVER", "S3RVER", ""};  // s3rver's only account
    o.addressing = S3Options::Addressing::kPath;
    o.part_size = kPart;
    o.parallelism = 4;
    o.max_retries = 2;
    o.backoff_base = std::chrono::milliseconds(5);
    o.backoff_max = std::chrono::milliseconds(50);
    return o;
  }

  static std::unique_ptr<S3Store> Open(const S3Options& o) {
    auto store = S3Store::Open(o, NoEnv());
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // Reads the whole object through Head and Get.
  static std::string ReadAll(ObjectStore& store, const std::string& key) {
    auto info = store.Head(key);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    if (!info.ok()) {
      return "";
    }
    std::string out(info->size, '\0');
    auto n = store.Get(key, 0, std::span<char>(out.data(), out.size()));
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(n.value_or(0), out.size());
    return out;
  }

  static S3rverProcess* server_;
  static Status* start_error_;
  std::string root_;
  std::unique_ptr<S3Store> store_;
};

S3rverProcess* S3ServerTest::server_ = nullptr;
Status* S3ServerTest::start_error_ = nullptr;

TEST_F(S3ServerTest, PutHeadGetDelete) {
  const std::string key = "dir/object.bin";
  const std::string data = RandomBytes(100000, 1);
  PutOptions put;
  put.metadata = {{"owner", "ciuic"}, {"content-kind", "stripe"}};
  ASSERT_TRUE(IsOk(store_->Put(key, data, put)));

  auto info = store_->Head(key);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->key, key);
  EXPECT_EQ(info->size, data.size());
  EXPECT_FALSE(info->etag.empty());
  EXPECT_EQ(info->etag.find('"'), std::string::npos);
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  EXPECT_LT(std::abs(info->mtime_ms - now_ms), 24 * 3600 * 1000) << info->mtime_ms;
  EXPECT_EQ(info->metadata, put.metadata);

  EXPECT_EQ(ReadAll(*store_, key), data);
  char buf[10];
  auto n = store_->Get(key, 500, buf);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(std::string(buf, *n), data.substr(500, 10));
  n = store_->Get(key, data.size() - 3, buf);  // the end: fewer bytes
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(std::string(buf, *n), data.substr(data.size() - 3));
  n = store_->Get(key, data.size(), buf);  // at the end: 0 bytes
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 0u);
  n = store_->Get(key, data.size() + 1000, buf);  // past it: 0 bytes
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 0u);

  // Replacing the object.
  ASSERT_TRUE(IsOk(store_->Put(key, "short")));
  EXPECT_EQ(ReadAll(*store_, key), "short");

  ASSERT_TRUE(IsOk(store_->Delete(key)));
  EXPECT_EQ(store_->Head(key).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(IsOk(store_->Delete(key)));  // deleting what is gone is OK
}

TEST_F(S3ServerTest, EmptyObject) {
  ASSERT_TRUE(IsOk(store_->Put("empty", "")));
  auto info = store_->Head("empty");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, 0u);
  // No Get here: s3rver 3.7.1 answers a ranged GET of an empty object with "206, Content-Range
  // bytes 0-0/0, Content-Length 1" and no body, and the client waits for the missing byte.
  // S3 answers 416, which s3_test checks (RoundTripOnAMiniServerWithVerifiedSignatures).
  auto page = store_->List({});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(page->objects[0].size, 0u);
}

TEST_F(S3ServerTest, KeysWithOddBytes) {
  const std::vector<std::string> keys = {
      "space in name",  "plus+sign",   "percent%41",  "unicode-\xE1\x88\xB4-\xC3\xA9",
      "q?uestion#hash", "amp&eq=sign", "tilde~star*", "dir.with.dots/x",
      "paren(1)'quote'"};
  for (const std::string& key : keys) {
    ASSERT_TRUE(IsOk(store_->Put(key, "value of " + key))) << key;
  }
  for (const std::string& key : keys) {
    EXPECT_EQ(ReadAll(*store_, key), "value of " + key) << key;
  }
  auto page = store_->List({});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  std::set<std::string> listed;
  for (const ObjectInfo& o : page->objects) {
    listed.insert(o.key);
  }
  EXPECT_EQ(listed, std::set<std::string>(keys.begin(), keys.end()));
}

TEST_F(S3ServerTest, MissingKeyAndMissingBucket) {
  char buf[4];
  Status st = store_->Get("missing", 0, buf).status();
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), std::string("s3://") + kBucket + "/" + root_ + "/missing"))
      << st.message();
  EXPECT_TRUE(Contains(st.message(), "NoSuchKey")) << st.message();
  EXPECT_EQ(store_->Head("missing").status().code(), StatusCode::kNotFound);

  S3Options o = Options();
  o.bucket = "no-such-bucket";
  auto other = Open(o);
  ASSERT_NE(other, nullptr);
  for (Status s :
       {other->Put("k", "v"), other->Get("k", 0, buf).status(), other->List({}).status()}) {
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "s3://no-such-bucket: no such bucket (NoSuchBucket"))
        << s.message();
  }
}

TEST_F(S3ServerTest, UnknownAccessKeyIsPermissionDenied) {
  S3Options o = Options();
  o.credentials = {"NOT-S3RVER", "secret", ""};
  auto other = Open(o);
  ASSERT_NE(other, nullptr);
  Status st = other->Put("k", "v");
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "access denied (InvalidAccessKeyId")) << st.message();
}

TEST_F(S3ServerTest, MultipartAtPartBoundaries) {
  // One part exactly (a single PUT), one byte over (two parts), three parts exactly, and three
  // parts and a bit.
  for (uint64_t size : {kPart, kPart + 1, 3 * kPart, 3 * kPart + 17}) {
    const std::string key = "mp/" + std::to_string(size);
    const std::string data = RandomBytes(size, static_cast<uint32_t>(size));
    ASSERT_TRUE(IsOk(store_->Put(key, data))) << size;
    EXPECT_EQ(ReadAll(*store_, key), data) << size;
    // PutStream takes the same path from a callback.
    const std::string key2 = key + "-stream";
    Status st = store_->PutStream(key2, size, [&data](uint64_t offset, std::span<char> dst) {
      std::copy_n(data.data() + offset, dst.size(), dst.data());
      return Status::OK();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(ReadAll(*store_, key2), data) << size;
  }
}

TEST_F(S3ServerTest, PartsAreUploadedConcurrently) {
  // Every source call waits (with a deadline) until another is running too: that can only
  // happen when parts are read, and so uploaded, at the same time.
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  int max_in_flight = 0;
  bool met = false;
  const uint64_t size = 4 * kPart;
  Status st = store_->PutStream("concurrent", size, [&](uint64_t offset, std::span<char> dst) {
    std::unique_lock<std::mutex> lock(mu);
    ++in_flight;
    max_in_flight = std::max(max_in_flight, in_flight);
    if (in_flight >= 2) {
      met = true;
      cv.notify_all();
    }
    bool ok = cv.wait_for(lock, std::chrono::seconds(30), [&] { return met; });
    --in_flight;
    lock.unlock();
    if (!ok) {
      return Status::TimedOut("parts are not uploaded concurrently");
    }
    for (size_t i = 0; i < dst.size(); ++i) {
      dst[i] = static_cast<char>((offset + i) % 251);
    }
    return Status::OK();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_GE(max_in_flight, 2);
  std::string got = ReadAll(*store_, "concurrent");
  ASSERT_EQ(got.size(), size);
  for (size_t i = 0; i < got.size(); i += 4099) {
    ASSERT_EQ(got[i], static_cast<char>(i % 251)) << i;
  }
}

TEST_F(S3ServerTest, FailedStreamLeavesNoObject) {
  Status st = store_->PutStream("failed", 3 * kPart, [](uint64_t offset, std::span<char> dst) {
    if (offset >= kPart) {
      return Status::IoError("source broke");
    }
    std::fill(dst.begin(), dst.end(), 'a');
    return Status::OK();
  });
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "source broke")) << st.message();
  EXPECT_EQ(store_->Head("failed").status().code(), StatusCode::kNotFound);
}

TEST_F(S3ServerTest, RangedGetsInParallel) {
  const std::string data = RandomBytes(3 * kPart + 12345, 7);
  ASSERT_TRUE(IsOk(store_->Put("ranges", data)));
  struct Case {
    uint64_t offset;
    uint64_t len;
  };
  for (Case c : {Case{0, data.size()}, Case{kPart - 7, 2 * kPart + 10}, Case{1, 3 * kPart},
                 Case{data.size() - 100, 2 * kPart}, Case{kPart, kPart}}) {
    std::string buf(c.len, '\0');
    auto n = store_->Get("ranges", c.offset, std::span<char>(buf.data(), buf.size()));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    const size_t want = std::min<uint64_t>(c.len, data.size() - c.offset);
    ASSERT_EQ(*n, want) << c.offset << "+" << c.len;
    EXPECT_TRUE(buf.compare(0, want, data, c.offset, want) == 0) << c.offset << "+" << c.len;
  }
  // Several readers at once share the store's workers.
  std::vector<std::thread> readers;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::string buf(data.size(), '\0');
      auto n = store_->Get("ranges", 0, std::span<char>(buf.data(), buf.size()));
      if (n.ok() && *n == data.size() && buf == data) {
        good.fetch_add(1);
      } else {
        ADD_FAILURE() << "reader " << t << ": " << n.status().ToString();
      }
    });
  }
  for (auto& r : readers) {
    r.join();
  }
  EXPECT_EQ(good.load(), 4);
}

TEST_F(S3ServerTest, ListWithDelimiterAndRootIsolation) {
  for (const char* key : {"d/a", "d/b/c", "d/b/d", "d/e/f", "e", "dz"}) {
    ASSERT_TRUE(IsOk(store_->Put(key, key)));
  }
  ListOptions opts;
  opts.prefix = "d/";
  opts.delimiter = "/";
  auto page = store_->List(opts);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(page->objects[0].key, "d/a");
  EXPECT_EQ(page->objects[0].size, 3u);
  EXPECT_FALSE(page->objects[0].etag.empty());
  EXPECT_GT(page->objects[0].mtime_ms, 0);
  EXPECT_EQ(page->prefixes, (std::vector<std::string>{"d/b/", "d/e/"}));
  EXPECT_EQ(page->next, "");

  ListOptions top;
  top.delimiter = "/";
  page = store_->List(top);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  std::vector<std::string> keys;
  for (const auto& o : page->objects) {
    keys.push_back(o.key);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"dz", "e"}));
  EXPECT_EQ(page->prefixes, (std::vector<std::string>{"d/"}));

  // A store rooted elsewhere sees none of it, and its keys are not seen here.
  S3Options o = Options();
  o.root_prefix = root_ + "-other";
  auto other = Open(o);
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(IsOk(other->Put("d/x", "other")));
  auto other_page = other->List({});
  ASSERT_TRUE(other_page.ok());
  ASSERT_EQ(other_page->objects.size(), 1u);
  EXPECT_EQ(other_page->objects[0].key, "d/x");
  page = store_->List({});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->objects.size(), 6u);
}

TEST_F(S3ServerTest, PaginationOverMoreThanAThousandKeys) {
  constexpr int kKeys = 1100;
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int i = t; i < kKeys; i += 4) {
        char key[32];
        snprintf(key, sizeof(key), "k/%05d", i);
        if (!store_->Put(key, "x").ok()) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& w : writers) {
    w.join();
  }
  ASSERT_EQ(failures.load(), 0);

  // Pages of 1000 (S3's largest), then pages of 7 over a part of it.
  std::vector<std::string> all;
  ListOptions opts;
  opts.prefix = "k/";
  int pages = 0;
  do {
    auto page = store_->List(opts);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    ++pages;
    EXPECT_LE(page->objects.size(), 1000u);
    for (const auto& o : page->objects) {
      all.push_back(o.key);
    }
    opts.start = page->next;
  } while (!opts.start.empty() && pages < 10);
  EXPECT_EQ(pages, 2);
  ASSERT_EQ(all.size(), static_cast<size_t>(kKeys));
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  EXPECT_EQ(std::set<std::string>(all.begin(), all.end()).size(), all.size());

  std::vector<std::string> small;
  ListOptions seven;
  seven.prefix = "k/000";
  seven.max_keys = 7;
  pages = 0;
  do {
    auto page = store_->List(seven);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    ++pages;
    EXPECT_LE(page->objects.size(), 7u);
    for (const auto& o : page->objects) {
      small.push_back(o.key);
    }
    seven.start = page->next;
  } while (!seven.start.empty() && pages < 100);
  EXPECT_EQ(small.size(), 100u);  // k/00000 .. k/00099
  EXPECT_EQ(pages, 15);           // 14 full pages and one of 2
  EXPECT_TRUE(std::is_sorted(small.begin(), small.end()));
}

TEST_F(S3ServerTest, VirtualHostedAddressing) {
  // s3rver runs with --service-endpoint localhost: Host "ciuic-test.s3.localhost:<port>" names
  // the bucket. CONNECT_TO sends the connection to 127.0.0.1 whatever the name resolves to.
  S3Options o = Options();
  o.endpoint = "http://s3.localhost:" + std::to_string(server_->port());
  o.addressing = S3Options::Addressing::kVirtualHosted;
  o.connect_to = {"::127.0.0.1:"};
  auto vhost = Open(o);
  ASSERT_NE(vhost, nullptr);
  ASSERT_TRUE(vhost->virtual_hosted());
  const std::string data = RandomBytes(kPart + 5, 9);
  ASSERT_TRUE(IsOk(vhost->Put("via-vhost", data)));
  EXPECT_EQ(ReadAll(*vhost, "via-vhost"), data);
  auto page = vhost->List({});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 1u);
  // The path-style store sees the same object: it went to the right bucket.
  EXPECT_EQ(ReadAll(*store_, "via-vhost"), data);
  ASSERT_TRUE(IsOk(vhost->Delete("via-vhost")));
  EXPECT_EQ(store_->Head("via-vhost").status().code(), StatusCode::kNotFound);
}

TEST_F(S3ServerTest, StoppedServerIsUnavailable) {
  // A server of its own, stopped: its port is closed.
  auto own = S3rverProcess::Start({});
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  S3Options o = Options();
  o.endpoint = (*own)->endpoint();
  own->reset();
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  auto start = std::chrono::steady_clock::now();
  Status st = store->Put("k", "v");
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "cannot reach endpoint " + o.endpoint)) << st.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// The backend contract suite (object_store_contract.h) on S3Store against s3rver: one server
// for the whole suite, started on first use, and each test on a fresh key prefix of its own.
S3rverProcess* ContractServer() {
  static S3rverProcess* server = [] {
    auto s = S3rverProcess::Start({});
    EXPECT_TRUE(s.ok()) << "s3rver did not start: " << s.status().ToString();
    return s.ok() ? std::move(*s).release() : nullptr;
  }();
  return server;
}

// Each contract test's root prefix: "contract-" and four digits, so S3's 1024-byte limit leaves
// the same room for every test's keys.
constexpr size_t kContractPrefixBytes = 13;

Result<std::shared_ptr<ObjectStore>> OpenContractStore() {
  static std::atomic<int> next{0};
  S3rverProcess* server = ContractServer();
  if (server == nullptr)
    return Status::Unavailable("s3rver did not start");
  S3Options o;
  o.bucket = kBucket;
  o.root_prefix = fmt::format("contract-{:04}", next++ % 10000);
  o.endpoint = server->endpoint();
  o.region = "us-east-1";
  o.credentials = {"S3RVER", "S3RVER", ""};
  o.addressing = S3Options::Addressing::kPath;
  o.part_size = kPart;
  o.parallelism = 4;
  o.max_retries = 2;
  o.backoff_base = std::chrono::milliseconds(5);
  o.backoff_max = std::chrono::milliseconds(50);
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<S3Store> store, S3Store::Open(o, NoEnv()));
  return std::shared_ptr<ObjectStore>(std::move(store));
}

using testing::ObjectStoreContractTest;

INSTANTIATE_TEST_SUITE_P(S3,
                         ObjectStoreContractTest,
                         ::testing::Values(testing::ContractBackend{
                             .name = "S3rver",
                             // S3 takes 1024-byte keys, root prefix and '/' included, in
                             // UTF-8; the rest are s3rver's quirks (README.md).
                             .caps = {.stream_piece_bytes = kPart,
                                      .max_key_bytes = 1024 - kContractPrefixBytes - 1,
                                      .utf8_keys_only = true,
                                      .ranged_get_of_empty_object = false,
                                      .any_delimiter = false,
                                      .pages_in_key_order = false,
                                      .atomic_overwrite = false},
                             .open = OpenContractStore}),
                         testing::ContractBackendName);

}  // namespace
}  // namespace ciuic::objstore
