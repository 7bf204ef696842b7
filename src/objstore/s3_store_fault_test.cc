// S3Store against ScriptedHttpServer: retries, error mapping, multipart abort, range checks,
// timeouts and addressing, each on an answer the test chooses. The server checks every
// request's SigV4 signature from the bytes it received.
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <random>

#include <gtest/gtest.h>

#include "objstore/s3_store.h"
#include "objstore/s3_test_server.h"
#include "objstore/s3_test_util.h"
#include "objstore/s3_xml.h"

namespace ciuic::objstore {
namespace {

using Reply = ScriptedHttpServer::Reply;
using Request = ScriptedHttpServer::Request;

constexpr uint64_t kMiB = 1 << 20;
const char kSecret[] = "test/secret+key";

using testutil::Contains;
using testutil::IsOk;
using testutil::NoEnv;
using testutil::RandomBytes;

std::map<std::string, std::string> QueryOf(const Request& r) {
  std::map<std::string, std::string> out;
  for (auto& [k, v] : sigv4::ParseQueryString(r.query)) {
    out[k] = v;
  }
  return out;
}

// Enough of S3 to serve one bucket "bkt" path-style, or virtual-hosted: objects with metadata,
// ranged GETs, multipart uploads (with aborts counted).
class MiniS3 {
 public:
  Reply Handle(const Request& r) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string key = KeyOf(r);
    auto q = QueryOf(r);
    if (r.method == "POST" && q.count("uploads")) {
      std::string id = "upload-" + std::to_string(++next_upload_);
      uploads_[id] = {};
      for (const auto& [name, value] : r.headers) {
        if (name.starts_with("x-amz-meta-")) {
          metadata_of_upload_[id][name] = value;
        }
      }
      return Xml(200, "<InitiateMultipartUploadResult><Bucket>bkt</Bucket><Key>" +
                          xml::EscapeText(key) + "</Key><UploadId>" + id +
                          "</UploadId></InitiateMultipartUploadResult>");
    }
    if (r.method == "PUT" && q.count("uploadId")) {
      auto up = uploads_.find(q["uploadId"]);
      if (up == uploads_.end()) {
        return ScriptedHttpServer::S3ErrorReply(404, "NoSuchUpload", "no such upload");
      }
      int part = std::stoi(q["partNumber"]);
      up->second[part] = r.body;
      Reply ok;
      ok.headers = {{"ETag", "\"etag-" + std::to_string(part) + "-" +
                                 sigv4::Sha256Hex(r.body).substr(0, 8) + "\""}};
      return ok;
    }
    if (r.method == "POST" && q.count("uploadId")) {
      auto up = uploads_.find(q["uploadId"]);
      if (up == uploads_.end()) {
        return ScriptedHttpServer::S3ErrorReply(404, "NoSuchUpload", "no such upload");
      }
      auto doc = xml::Parse(r.body);
      if (!doc.ok()) {
        return ScriptedHttpServer::S3ErrorReply(400, "MalformedXML", "bad xml");
      }
      std::string data;
      int expect = 1;
      for (const xml::Element* p : doc->Children("Part")) {
        int n = std::stoi(p->ChildText("PartNumber"));
        auto part = up->second.find(n);
        std::string etag =
            "\"etag-" + std::to_string(n) + "-" +
            (part == up->second.end() ? "" : sigv4::Sha256Hex(part->second).substr(0, 8)) + "\"";
        if (n != expect++ || part == up->second.end() || p->ChildText("ETag") != etag) {
          return ScriptedHttpServer::S3ErrorReply(400, "InvalidPart", "part " + std::to_string(n));
        }
        data += part->second;
      }
      objects_[key] = {data, metadata_of_upload_[q["uploadId"]]};
      uploads_.erase(up);
      ++completes_;
      return Xml(200, "<CompleteMultipartUploadResult><Key>" + xml::EscapeText(key) +
                          "</Key><ETag>\"x-" + std::to_string(completes_) +
                          "\"</ETag></CompleteMultipartUploadResult>");
    }
    if (r.method == "DELETE" && q.count("uploadId")) {
      uploads_.erase(q["uploadId"]);
      ++aborts_;
      Reply ok;
      ok.status = 204;
      return ok;
    }
    if (r.method == "PUT") {
      std::map<std::string, std::string> meta;
      for (const auto& [name, value] : r.headers) {
        if (name.starts_with("x-amz-meta-")) {
          meta[name] = value;
        }
      }
      objects_[key] = {r.body, meta};
      Reply ok;
      ok.headers = {{"ETag", "\"" + sigv4::Sha256Hex(r.body).substr(0, 32) + "\""}};
      return ok;
    }
    if (r.method == "DELETE") {
      objects_.erase(key);
      Reply ok;
      ok.status = 204;
      return ok;
    }
    auto obj = objects_.find(key);
    if (obj == objects_.end()) {
      if (r.method == "HEAD") {
        Reply nf;
        nf.status = 404;
        return nf;
      }
      return ScriptedHttpServer::S3ErrorReply(404, "NoSuchKey",
                                              "The specified key does not exist.");
    }
    const std::string& data = obj->second.data;
    Reply ok;
    ok.headers = {{"ETag", "\"" + sigv4::Sha256Hex(data).substr(0, 32) + "\""},
                  {"Last-Modified", "Wed, 12 Oct 2009 17:50:00 GMT"}};
    for (const auto& [name, value] : obj->second.metadata) {
      ok.headers.emplace_back(name, value);
    }
    if (r.method == "HEAD") {
      ok.headers.emplace_back("Content-Length", std::to_string(data.size()));
      return ok;
    }
    auto range = r.headers.find("range");
    if (range == r.headers.end()) {
      ok.body = data;
      return ok;
    }
    auto if_match = r.headers.find("if-match");
    if (if_match != r.headers.end() &&
        if_match->second != "\"" + sigv4::Sha256Hex(data).substr(0, 32) + "\"") {
      return ScriptedHttpServer::S3ErrorReply(412, "PreconditionFailed", "etag");
    }
    uint64_t first = std::stoull(range->second.substr(6));
    uint64_t last = std::stoull(range->second.substr(range->second.find('-') + 1));
    if (first >= data.size()) {
      Reply bad = ScriptedHttpServer::S3ErrorReply(416, "InvalidRange", "not satisfiable");
      bad.headers.emplace_back("Content-Range", "bytes */" + std::to_string(data.size()));
      return bad;
    }
    last = std::min<uint64_t>(last, data.size() - 1);
    ok.status = 206;
    ok.headers.emplace_back("Content-Range", "bytes " + std::to_string(first) + "-" +
                                                 std::to_string(last) + "/" +
                                                 std::to_string(data.size()));
    ok.body = data.substr(first, last - first + 1);
    return ok;
  }

  std::optional<std::string> Object(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end()) {
      return std::nullopt;
    }
    return it->second.data;
  }
  size_t open_uploads() {
    std::lock_guard<std::mutex> lock(mu_);
    return uploads_.size();
  }
  int aborts() {
    std::lock_guard<std::mutex> lock(mu_);
    return aborts_;
  }

 private:
  struct Stored {
    std::string data;
    std::map<std::string, std::string> metadata;
  };

  static std::string KeyOf(const Request& r) {
    std::string path = sigv4::UriDecode(r.path);
    if (path.starts_with("/bkt/")) {
      return path.substr(5);  // path-style
    }
    return path.substr(1);  // virtual-hosted
  }
  static Reply Xml(int status, const std::string& body) {
    Reply r;
    r.status = status;
    r.headers = {{"Content-Type", "application/xml"}};
    r.body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + body;
    return r;
  }

  std::mutex mu_;
  std::map<std::string, Stored> objects_;
  std::map<std::string, std::map<int, std::string>> uploads_;
  std::map<std::string, std::map<std::string, std::string>> metadata_of_upload_;
  int next_upload_ = 0;
  int completes_ = 0;
  int aborts_ = 0;
};

S3Options FastOptions(const std::string& endpoint) {
  S3Options o;
  o.bucket = "bkt";
  o.endpoint = endpoint;
  o.region = "us-east-1";
  o.credentials = {"AKTEST", kSecret, ""};
  o.addressing = S3Options::Addressing::kPath;
  o.part_size = 5 * kMiB;
  o.parallelism = 4;
  o.max_retries = 3;
  o.backoff_base = std::chrono::milliseconds(1);
  o.backoff_max = std::chrono::milliseconds(5);
  o.connect_timeout = std::chrono::milliseconds(2000);
  // Generous: under ASan, on a loaded machine, the scripted server may take a while to take a
  // 5 MiB part. The stall test sets 1 s.
  o.low_speed_time = std::chrono::seconds(10);
  return o;
}

// A ScriptedHttpServer running `handler` and a store on it.
struct Harness {
  std::unique_ptr<ScriptedHttpServer> server;
  std::unique_ptr<S3Store> store;
};

Harness Make(ScriptedHttpServer::Handler handler,
             const std::function<void(S3Options&)>& tweak = nullptr,
             const std::string& server_secret = kSecret) {
  Harness h;
  auto server = ScriptedHttpServer::Start(std::move(handler), server_secret);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  h.server = std::move(*server);
  S3Options o = FastOptions(h.server->endpoint());
  if (tweak) {
    tweak(o);
  }
  auto store = S3Store::Open(o, NoEnv());
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  h.store = std::move(*store);
  return h;
}

void ExpectAllSigned(const ScriptedHttpServer& server) {
  for (const Request& r : server.requests()) {
    EXPECT_EQ(r.signature_problem, "") << r.method << " " << r.target;
    EXPECT_TRUE(r.headers.count("authorization")) << r.method << " " << r.target;
  }
}

TEST(S3StoreFaultTest, RoundTripOnAMiniServerWithVerifiedSignatures) {
  auto mini = std::make_shared<MiniS3>();
  Harness h = Make([mini](const Request& r) { return mini->Handle(r); });
  const std::string key = "dir/odd key+%ሴ=&?#~.txt";
  ASSERT_TRUE(IsOk(h.store->Put(key, "hello world", {.metadata = {{"owner", "me"}}})));
  EXPECT_EQ(mini->Object(key), "hello world");
  auto info = h.store->Head(key);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, 11u);
  EXPECT_EQ(info->metadata["owner"], "me");
  EXPECT_EQ(info->mtime_ms, 1255369800000);
  EXPECT_EQ(info->etag.find('"'), std::string::npos);
  char buf[5];
  auto n = h.store->Get(key, 6, buf);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(std::string(buf, *n), "world");
  // Past the end: 416, read as 0 bytes.
  auto past = h.store->Get(key, 11, buf);
  ASSERT_TRUE(past.ok()) << past.status().ToString();
  EXPECT_EQ(*past, 0u);
  // An empty object: S3 answers a ranged GET with 416, read as 0 bytes.
  ASSERT_TRUE(IsOk(h.store->Put("empty", "")));
  auto empty = h.store->Get("empty", 0, buf);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(*empty, 0u);
  ASSERT_TRUE(IsOk(h.store->Delete(key)));
  EXPECT_EQ(h.store->Head(key).status().code(), StatusCode::kNotFound);
  ExpectAllSigned(*h.server);
}

TEST(S3StoreFaultTest, SlowDownIsRetriedUntilItPasses) {
  auto mini = std::make_shared<MiniS3>();
  auto count = std::make_shared<std::atomic<int>>(0);
  Harness h = Make([mini, count](const Request& r) {
    if (count->fetch_add(1) < 3) {
      return ScriptedHttpServer::S3ErrorReply(503, "SlowDown", "Please reduce your request rate.");
    }
    return mini->Handle(r);
  });
  ASSERT_TRUE(IsOk(h.store->Put("k", "v")));
  EXPECT_EQ(mini->Object("k"), "v");
  EXPECT_EQ(h.server->requests().size(), 4u);
  ExpectAllSigned(*h.server);
}

TEST(S3StoreFaultTest, ThrottlingPastTheRetryBoundIsUnavailable) {
  Harness h = Make([](const Request&) {
    return ScriptedHttpServer::S3ErrorReply(503, "SlowDown", "Please reduce your request rate.");
  });
  Status st = h.store->Put("a/k", "v");
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "s3://bkt/a/k")) << st.message();
  EXPECT_TRUE(Contains(st.message(), "SlowDown")) << st.message();
  EXPECT_TRUE(Contains(st.message(), "after 4 tries")) << st.message();
  EXPECT_EQ(h.server->requests().size(), 4u);  // max_retries 3 + the first try
}

TEST(S3StoreFaultTest, RetryableAnswersAreRetried) {
  struct Case {
    int status;
    const char* code;
  };
  for (Case c : {Case{500, "InternalError"}, Case{502, "BadGateway"}, Case{504, "GatewayTimeout"},
                 Case{429, "TooManyRequests"}, Case{400, "RequestTimeout"}}) {
    auto mini = std::make_shared<MiniS3>();
    auto count = std::make_shared<std::atomic<int>>(0);
    Harness h = Make([mini, count, c](const Request& r) {
      if (count->fetch_add(1) == 0) {
        return ScriptedHttpServer::S3ErrorReply(c.status, c.code, "try again");
      }
      return mini->Handle(r);
    });
    EXPECT_TRUE(IsOk(h.store->Put("k", "v"))) << c.code;
    EXPECT_EQ(h.server->requests().size(), 2u) << c.code;
  }
}

TEST(S3StoreFaultTest, OtherClientErrorsAreNotRetried) {
  Harness h = Make([](const Request&) {
    return ScriptedHttpServer::S3ErrorReply(400, "InvalidArgument", "no good");
  });
  Status st = h.store->Put("k", "v");
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "InvalidArgument: no good")) << st.message();
  EXPECT_EQ(h.server->requests().size(), 1u);
}

TEST(S3StoreFaultTest, SignatureDoesNotMatchIsPermissionDeniedWithoutRetries) {
  auto mini = std::make_shared<MiniS3>();
  // The server knows another secret: it answers 403 SignatureDoesNotMatch.
  Harness h = Make([mini](const Request& r) { return mini->Handle(r); }, nullptr, "other-secret");
  Status st = h.store->Put("a/k", "v");
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "s3://bkt/a/k: access denied (SignatureDoesNotMatch"))
      << st.message();
  EXPECT_EQ(h.server->requests().size(), 1u);
  char buf[4];
  EXPECT_EQ(h.store->Get("a/k", 0, buf).status().code(), StatusCode::kPermissionDenied);
}

TEST(S3StoreFaultTest, ErrorCodesMapToStatuses) {
  struct Case {
    int status;
    std::string code;
    StatusCode want;
    std::string message;
  };
  const Case cases[] = {
      {403, "AccessDenied", StatusCode::kPermissionDenied,
       "s3://bkt/k: access denied (AccessDenied"},
      {403, "InvalidAccessKeyId", StatusCode::kPermissionDenied, "(InvalidAccessKeyId: "},
      {404, "NoSuchKey", StatusCode::kNotFound, "s3://bkt/k: no such key (NoSuchKey"},
      {404, "NoSuchBucket", StatusCode::kNotFound, "s3://bkt: no such bucket (NoSuchBucket"},
      {409, "OperationAborted", StatusCode::kIoError, "HTTP 409 (OperationAborted"},
  };
  for (const Case& c : cases) {
    Harness h = Make(
        [c](const Request&) { return ScriptedHttpServer::S3ErrorReply(c.status, c.code, "msg"); });
    char buf[4];
    Status st = h.store->Get("k", 0, buf).status();
    EXPECT_EQ(st.code(), c.want) << c.code << ": " << st.ToString();
    EXPECT_TRUE(Contains(st.message(), c.message)) << st.message();
  }
}

TEST(S3StoreFaultTest, WrongRegionSaysWhichRegion) {
  Harness h = Make([](const Request&) {
    Reply r = ScriptedHttpServer::S3ErrorReply(301, "PermanentRedirect", "use the other endpoint");
    r.headers.emplace_back("x-amz-bucket-region", "eu-west-1");
    return r;
  });
  Status st = h.store->Put("k", "v");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "region us-east-1 is wrong")) << st.message();
  EXPECT_TRUE(Contains(st.message(), "it is in eu-west-1")) << st.message();
}

TEST(S3StoreFaultTest, DroppedConnectionsAreRetried) {
  auto mini = std::make_shared<MiniS3>();
  auto count = std::make_shared<std::atomic<int>>(0);
  Harness h = Make([mini, count](const Request& r) {
    if (count->fetch_add(1) < 2) {
      Reply drop;
      drop.action = Reply::Action::kClose;
      return drop;
    }
    return mini->Handle(r);
  });
  ASSERT_TRUE(IsOk(h.store->Put("k", "v")));
  EXPECT_EQ(h.server->requests().size(), 3u);
}

TEST(S3StoreFaultTest, StalledServerTimesOutAfterRetries) {
  Harness h = Make(
      [](const Request&) {
        Reply stall;
        stall.action = Reply::Action::kStall;
        return stall;
      },
      [](S3Options& o) {
        o.max_retries = 1;
        o.low_speed_time = std::chrono::seconds(1);
      });
  auto start = std::chrono::steady_clock::now();
  char buf[4];
  Status st = h.store->Get("k", 0, buf).status();
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(st.code(), StatusCode::kTimedOut) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "timed out on endpoint " + h.server->endpoint()))
      << st.message();
  EXPECT_TRUE(Contains(st.message(), "after 2 tries")) << st.message();
  EXPECT_EQ(h.server->requests().size(), 2u);
  EXPECT_LT(took, std::chrono::seconds(30));
}

TEST(S3StoreFaultTest, UnreachableEndpointIsUnavailableQuickly) {
  S3Options o = FastOptions("http://127.0.0.1:" + std::to_string(ClosedLocalPort()));
  o.max_retries = 2;
  auto store = S3Store::Open(o, NoEnv());
  ASSERT_TRUE(store.ok());
  auto start = std::chrono::steady_clock::now();
  Status st = (*store)->Put("k", "v");
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "s3://bkt/k: PUT: cannot reach endpoint " + o.endpoint))
      << st.message();
  EXPECT_TRUE(Contains(st.message(), "after 3 tries")) << st.message();
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(S3StoreFaultTest, MultipartUploadIsCompleteAndSigned) {
  auto mini = std::make_shared<MiniS3>();
  Harness h = Make([mini](const Request& r) { return mini->Handle(r); });
  const std::string data = RandomBytes(3 * 5 * kMiB + 17, 1);
  ASSERT_TRUE(IsOk(h.store->Put("big", data)));
  EXPECT_EQ(mini->Object("big"), data);
  int parts = 0;
  for (const Request& r : h.server->requests()) {
    parts += r.method == "PUT" && QueryOf(r).count("partNumber");
  }
  EXPECT_EQ(parts, 4);
  ExpectAllSigned(*h.server);
}

TEST(S3StoreFaultTest, FailedPartAbortsTheUpload) {
  auto mini = std::make_shared<MiniS3>();
  Harness h = Make([mini](const Request& r) {
    if (r.method == "PUT" && QueryOf(r)["partNumber"] == "2") {
      return ScriptedHttpServer::S3ErrorReply(400, "EntityTooSmall", "part 2 refused");
    }
    return mini->Handle(r);
  });
  const std::string data = RandomBytes(3 * 5 * kMiB + 1, 2);
  Status st = h.store->Put("big", data);
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "EntityTooSmall")) << st.message();
  EXPECT_EQ(mini->aborts(), 1);
  EXPECT_EQ(mini->open_uploads(), 0u);
  EXPECT_EQ(mini->Object("big"), std::nullopt);
  for (const Request& r : h.server->requests()) {
    EXPECT_FALSE(r.method == "POST" && QueryOf(r).count("uploadId")) << "completed anyway";
  }
}

TEST(S3StoreFaultTest, FailedSourceAbortsTheUpload) {
  auto mini = std::make_shared<MiniS3>();
  Harness h = Make([mini](const Request& r) { return mini->Handle(r); });
  const uint64_t size = 4 * 5 * kMiB;
  Status st = h.store->PutStream("big", size, [](uint64_t offset, std::span<char> dst) {
    if (offset >= 2 * 5 * kMiB) {
      return Status::IoError("disk went away");
    }
    std::fill(dst.begin(), dst.end(), 'x');
    return Status::OK();
  });
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "disk went away")) << st.message();
  EXPECT_EQ(mini->aborts(), 1);
  EXPECT_EQ(mini->open_uploads(), 0u);
  EXPECT_EQ(mini->Object("big"), std::nullopt);
}

TEST(S3StoreFaultTest, ErrorInsideA200CompleteIsRetried) {
  auto mini = std::make_shared<MiniS3>();
  auto failed_once = std::make_shared<std::atomic<bool>>(false);
  Harness h = Make([mini, failed_once](const Request& r) {
    if (r.method == "POST" && QueryOf(r).count("uploadId") && !failed_once->exchange(true)) {
      Reply r200 = ScriptedHttpServer::S3ErrorReply(200, "InternalError", "try again");
      return r200;
    }
    return mini->Handle(r);
  });
  const std::string data = RandomBytes(5 * kMiB + 1, 3);
  ASSERT_TRUE(IsOk(h.store->Put("big", data)));
  EXPECT_EQ(mini->Object("big"), data);
  EXPECT_EQ(mini->aborts(), 0);
}

TEST(S3StoreFaultTest, ParallelRangedGetsUseIfMatch) {
  auto mini = std::make_shared<MiniS3>();
  Harness h = Make([mini](const Request& r) { return mini->Handle(r); });
  const std::string data = RandomBytes(3 * 5 * kMiB + 123, 4);
  ASSERT_TRUE(IsOk(h.store->Put("big", data)));
  std::string got(data.size() + 1000, '\0');
  auto n = h.store->Get("big", 0, std::span<char>(got.data(), got.size()));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, data.size());
  EXPECT_TRUE(got.compare(0, data.size(), data) == 0);
  int gets = 0;
  int with_if_match = 0;
  for (const Request& r : h.server->requests()) {
    if (r.method == "GET") {
      ++gets;
      with_if_match += r.headers.count("if-match") ? 1 : 0;
    }
  }
  EXPECT_EQ(gets, 4);  // the first range, then three more in parallel
  EXPECT_EQ(with_if_match, 3);
  // A range in the middle, across chunk boundaries.
  std::string mid(2 * 5 * kMiB + 10, '\0');
  n = h.store->Get("big", 5 * kMiB - 7, std::span<char>(mid.data(), mid.size()));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, mid.size());
  EXPECT_EQ(mid, data.substr(5 * kMiB - 7, mid.size()));
}

TEST(S3StoreFaultTest, BadRangeAnswersAreCaught) {
  struct Case {
    Reply reply;
    StatusCode want;
  };
  auto partial = [](const std::string& range, const std::string& body) {
    Reply r;
    r.status = 206;
    r.headers = {{"Content-Range", range}};
    r.body = body;
    return r;
  };
  Reply whole_small;  // a server that ignored Range and sent the whole (small) object
  whole_small.body = "0123";
  Reply whole_big;
  whole_big.body = "0123456789";
  const Case cases[] = {
      {partial("bytes 1-4/10", "1234"), StatusCode::kCorruption},      // wrong start
      {partial("bytes 2-9/10", "23456789"), StatusCode::kCorruption},  // more than asked
      {partial("bytes 2-3/10", "234"), StatusCode::kCorruption},       // length disagrees
      {partial("", "2345"), StatusCode::kCorruption},                  // no Content-Range
      {whole_small, StatusCode::kIoError},                             // Range ignored
      {whole_big, StatusCode::kCorruption},  // Range ignored, and more than asked
  };
  for (const Case& c : cases) {
    Harness h = Make([c](const Request&) { return c.reply; });
    char buf[4];
    Status st = h.store->Get("k", 2, buf).status();
    EXPECT_EQ(st.code(), c.want) << st.ToString();
  }
}

TEST(S3StoreFaultTest, VirtualHostedRequestsNameTheBucketInHost) {
  auto mini = std::make_shared<MiniS3>();
  Harness h = Make([mini](const Request& r) { return mini->Handle(r); },
                   [](S3Options& o) {
                     o.endpoint =
                         "http://s3.localhost:" + o.endpoint.substr(o.endpoint.rfind(':') + 1);
                     o.addressing = S3Options::Addressing::kVirtualHosted;
                     o.connect_to = {"::127.0.0.1:"};
                   });
  ASSERT_TRUE(h.store->virtual_hosted());
  ASSERT_TRUE(IsOk(h.store->Put("x/y", "v")));
  auto reqs = h.server->requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].headers["host"], "bkt.s3.localhost:" + std::to_string(h.server->port()));
  EXPECT_EQ(reqs[0].path, "/x/y");
  EXPECT_EQ(mini->Object("x/y"), "v");
  ExpectAllSigned(*h.server);
}

TEST(S3StoreFaultTest, SessionTokenIsSentAndSigned) {
  auto mini = std::make_shared<MiniS3>();
  Harness h = Make([mini](const Request& r) { return mini->Handle(r); },
                   [](S3Options& o) { o.credentials.session_token = "TOKEN/abc=="; });
  ASSERT_TRUE(IsOk(h.store->Put("k", "v")));
  auto reqs = h.server->requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].headers["x-amz-security-token"], "TOKEN/abc==");
  EXPECT_TRUE(Contains(reqs[0].headers["authorization"], "x-amz-security-token"));
  ExpectAllSigned(*h.server);
}

TEST(S3StoreFaultTest, AnonymousRequestsAreUnsignedAndHintAtCredentials) {
  Harness h = Make(
      [](const Request&) { return ScriptedHttpServer::S3ErrorReply(403, "AccessDenied", "no"); },
      [](S3Options& o) { o.credentials = {}; });
  EXPECT_EQ(h.store->credential_source(), "none");
  Status st = h.store->Put("k", "v");
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Contains(st.message(), "no credentials were found")) << st.message();
  EXPECT_EQ(h.server->requests()[0].headers.count("authorization"), 0u);
}

TEST(S3StoreOptionsTest, OpenChecksOptions) {
  auto open = [](const std::function<void(S3Options&)>& tweak) {
    S3Options o = FastOptions("http://127.0.0.1:9");
    tweak(o);
    return S3Store::Open(o, NoEnv()).status();
  };
  EXPECT_TRUE(open([](S3Options&) {}).ok());
  EXPECT_EQ(open([](S3Options& o) { o.part_size = 4 * kMiB; }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(open([](S3Options& o) { o.parallelism = 0; }).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(open([](S3Options& o) { o.bucket = ""; }).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(open([](S3Options& o) { o.bucket = "a/b"; }).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(open([](S3Options& o) { o.endpoint = "ftp://x"; }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(open([](S3Options& o) { o.endpoint = "http://x/path"; }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(open([](S3Options& o) { o.endpoint = "http://x:99999"; }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(open([](S3Options& o) { o.root_prefix = "a/../b"; }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(open([](S3Options& o) {
              o.credentials = {"AK", "", ""};
            }).code(),
            StatusCode::kInvalidArgument);
}

TEST(S3StoreOptionsTest, AutoAddressingIsVirtualHostedOnlyOnAws) {
  auto store_for = [](const std::string& endpoint, const std::string& bucket) {
    S3Options o = FastOptions(endpoint);
    o.bucket = bucket;
    o.addressing = S3Options::Addressing::kAuto;
    return std::move(*S3Store::Open(o, NoEnv()));
  };
  EXPECT_TRUE(store_for("https://s3.us-west-2.amazonaws.com", "my-bucket")->virtual_hosted());
  EXPECT_FALSE(store_for("https://s3.us-west-2.amazonaws.com", "my.bucket")->virtual_hosted());
  EXPECT_FALSE(store_for("http://127.0.0.1:9000", "my-bucket")->virtual_hosted());
  EXPECT_FALSE(store_for("https://minio.example.com", "my-bucket")->virtual_hosted());
}

TEST(S3StoreOptionsTest, EnvironmentFillsEndpointRegionAndCredentials) {
  std::map<std::string, std::string> vars = {{"AWS_ACCESS_KEY_ID", "ENVAK"},
                                             {"AWS_SECRET_ACCESS_KEY", "envsecret"},
                                             {"AWS_REGION", "eu-central-1"},
                                             {"AWS_ENDPOINT_URL", "http://127.0.0.1:9000"}};
  EnvLookup env = [vars](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  S3Options o;
  o.bucket = "b";
  o.root_prefix = "/data/set1/";
  auto store = S3Store::Open(o, env);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->endpoint(), "http://127.0.0.1:9000");
  EXPECT_EQ((*store)->region(), "eu-central-1");
  EXPECT_EQ((*store)->credential_source(), "environment");
  EXPECT_EQ((*store)->Describe(), "s3://b/data/set1");
}

TEST(S3StoreOptionsTest, KeysAndMetadataAreChecked) {
  S3Options o = FastOptions("http://127.0.0.1:" + std::to_string(ClosedLocalPort()));
  o.root_prefix = std::string(1000, 'p');
  auto store = S3Store::Open(o, NoEnv());
  ASSERT_TRUE(store.ok());
  for (const std::string& bad : {std::string(""), std::string("/abs"), std::string("a/./b"),
                                 std::string("a/.."), std::string("a\0b", 3), std::string(30, 'k'),
                                 std::string("a//b"), std::string("not-utf8-\xff")}) {
    Status st = (*store)->Put(bad, "v");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    // ValidateKey's wording, after the store's name.
    EXPECT_TRUE(Contains(st.message(), (*store)->Describe() + ": invalid object key"))
        << st.message();
  }
  EXPECT_EQ((*store)->Put("k", "v", {.metadata = {{"Bad_Name", "v"}}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->Put("k", "v", {.metadata = {{"ok", "line\nbreak"}}}).code(),
            StatusCode::kInvalidArgument);
  ListOptions list;
  list.max_keys = 0;
  EXPECT_EQ((*store)->List(list).status().code(), StatusCode::kInvalidArgument);
  list.max_keys = 1001;
  EXPECT_EQ((*store)->List(list).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ciuic::objstore
