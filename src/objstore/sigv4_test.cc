// SigV4 against published vectors. Every expected value below was copied from a published
// source named in the comment above it; none was computed by this code.
//
// Sources:
//   [SUITE] AWS's aws-sig-v4-test-suite (2015-08-30 edition: credentials AKIDEXAMPLE /
//           wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, region us-east-1, service "service",
//           20150830T123600Z), as published in the AWS General Reference "Signature Version 4
//           test suite" and carried in awslabs/aws-c-auth tests/aws-signing-test-suite/v4/<case>/
//           (header-signed-request.txt, header-canonical-request.txt, ...). That copy splits
//           some cases into "-normalized" and "-unnormalized" variants.
//   [SUITE2011] the older edition of the same suite (host.foo.com, service "host",
//           20110909T233600Z) in boto/botocore tests/unit/auth/aws4_testsuite/<case>.creq,
//           .sts and .authz.
//   [S3DOC] the Amazon S3 API Reference, "Signature Calculations for the Authorization Header:
//           Transferring Payload in a Single Chunk" (sig-v4-header-based-auth), its examples
//           GET Object, PUT Object, GET Bucket Lifecycle and Get Bucket (List Objects), with
//           AKIAIOSFODNN7EXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, 20130524T000000Z.
//   [KEYDOC] the AWS General Reference, "Examples of how to derive a signing key for Signature
//           Version 4" (20120215, us-east-1, iam).
#include "objstore/sigv4.h"

#include <gtest/gtest.h>

namespace ciuic::objstore::sigv4 {
namespace {

const Credentials kSuiteCreds{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
constexpr std::string_view kSuiteDate = "20150830T123600Z";

// A request of the 2015 suite: the request line's path and query as written in the case's
// request file, its headers (Host and X-Amz-Date included), and its body.
Request SuiteRequest(std::string method,
                     std::string path_and_query,
                     std::vector<Header> extra_headers = {},
                     std::string_view body = "") {
  Request r;
  r.method = std::move(method);
  size_t q = path_and_query.find('?');
  r.path = path_and_query.substr(0, q);
  if (q != std::string::npos) {
    r.query = ParseQueryString(std::string_view(path_and_query).substr(q + 1));
  }
  r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", std::string(kSuiteDate)}};
  r.headers.insert(r.headers.end(), extra_headers.begin(), extra_headers.end());
  r.payload_hash = Sha256Hex(body);
  return r;
}

Signature SignSuite(const Request& r,
                    SigningOptions opts = SigningOptions::Generic(),
                    const Credentials& creds = kSuiteCreds) {
  return Sign(r, creds, kSuiteDate, "us-east-1", "service", opts);
}

std::string SuiteAuthorization(std::string_view signed_headers, std::string_view signature) {
  return "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
         "SignedHeaders=" +
         std::string(signed_headers) + ", Signature=" + std::string(signature);
}

// [SUITE] get-vanilla: get-vanilla.creq, .sts and .authz.
TEST(SigV4SuiteTest, GetVanilla) {
  Signature s = SignSuite(SuiteRequest("GET", "/"));
  EXPECT_EQ(s.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
            "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  EXPECT_EQ(s.authorization,
            SuiteAuthorization("host;x-amz-date",
                               "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"));
}

// [SUITE] get-vanilla-empty-query-key.
TEST(SigV4SuiteTest, GetVanillaEmptyQueryKey) {
  Signature s = SignSuite(SuiteRequest("GET", "/?Param1=value1"));
  EXPECT_EQ(s.signature, "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb");
}

// [SUITE] get-vanilla-query-order-key-case: parameters sorted by name (code point order).
TEST(SigV4SuiteTest, GetVanillaQueryOrderKeyCase) {
  Signature s = SignSuite(SuiteRequest("GET", "/?Param2=value2&Param1=value1"));
  EXPECT_NE(s.canonical_request.find("\n/\nParam1=value1&Param2=value2\n"), std::string::npos);
  EXPECT_EQ(s.string_to_sign.substr(s.string_to_sign.rfind('\n') + 1),
            "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0");
  EXPECT_EQ(s.signature, "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

// [SUITE] get-vanilla-query-order-key: a repeated name is sorted by value ('V' < 'v').
TEST(SigV4SuiteTest, GetVanillaQueryOrderKey) {
  Signature s = SignSuite(SuiteRequest("GET", "/?Param1=value2&Param1=Value1"));
  EXPECT_NE(s.canonical_request.find("\nParam1=Value1&Param1=value2\n"), std::string::npos);
  EXPECT_EQ(s.signature, "eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1");
}

// [SUITE] get-vanilla-query-order-value.
TEST(SigV4SuiteTest, GetVanillaQueryOrderValue) {
  Signature s = SignSuite(SuiteRequest("GET", "/?Param1=value2&Param1=value1"));
  EXPECT_EQ(s.signature, "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694");
}

// [SUITE] get-vanilla-query-unreserved: unreserved characters are not encoded.
TEST(SigV4SuiteTest, GetVanillaQueryUnreserved) {
  const std::string kUnreserved =
      "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  Signature s = SignSuite(SuiteRequest("GET", "/?" + kUnreserved + "=" + kUnreserved));
  EXPECT_EQ(s.signature, "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197");
}

// [SUITE] get-vanilla-utf8-query: a UTF-8 parameter name is encoded byte by byte.
TEST(SigV4SuiteTest, GetVanillaUtf8Query) {
  Signature s = SignSuite(SuiteRequest("GET", "/?\xE1\x88\xB4=bar"));
  EXPECT_NE(s.canonical_request.find("\n%E1%88%B4=bar\n"), std::string::npos);
  EXPECT_EQ(s.signature, "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04");
}

// [SUITE] get-unreserved: an unreserved path stays as is.
TEST(SigV4SuiteTest, GetUnreserved) {
  Signature s = SignSuite(
      SuiteRequest("GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"));
  EXPECT_EQ(s.signature, "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f");
}

// [SUITE] get-utf8: the path "/ሴ" is canonical "/%E1%88%B4".
TEST(SigV4SuiteTest, GetUtf8) {
  Signature s = SignSuite(SuiteRequest("GET", "/\xE1\x88\xB4"));
  EXPECT_NE(s.canonical_request.find("GET\n/%E1%88%B4\n"), std::string::npos);
  EXPECT_EQ(s.signature, "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85");
}

// [SUITE] get-space (get-space-normalized and get-space-unnormalized agree).
TEST(SigV4SuiteTest, GetSpace) {
  Signature s = SignSuite(SuiteRequest("GET", "/example space/"));
  EXPECT_NE(s.canonical_request.find("GET\n/example%20space/\n"), std::string::npos);
  EXPECT_EQ(s.signature, "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741");
}

// [SUITE] get-header-value-trim: values are trimmed and inner runs of spaces collapsed, even
// inside quotes.
TEST(SigV4SuiteTest, GetHeaderValueTrim) {
  Signature s = SignSuite(
      SuiteRequest("GET", "/", {{"My-Header1", " value1"}, {"My-Header2", " \"a   b   c\""}}));
  EXPECT_NE(s.canonical_request.find("my-header1:value1\nmy-header2:\"a b c\"\n"),
            std::string::npos);
  EXPECT_EQ(s.authorization,
            SuiteAuthorization("host;my-header1;my-header2;x-amz-date",
                               "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"));
}

// [SUITE] get-header-key-duplicate: values of a repeated header join with ',' in order.
TEST(SigV4SuiteTest, GetHeaderKeyDuplicate) {
  Signature s = SignSuite(SuiteRequest(
      "GET", "/", {{"My-Header1", "value2"}, {"My-Header1", "value2"}, {"My-Header1", "value1"}}));
  EXPECT_NE(s.canonical_request.find("my-header1:value2,value2,value1\n"), std::string::npos);
  EXPECT_EQ(s.signature, "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea");
}

// [SUITE] get-header-value-order: values are not sorted.
TEST(SigV4SuiteTest, GetHeaderValueOrder) {
  Signature s = SignSuite(SuiteRequest("GET", "/",
                                       {{"My-Header1", "value4"},
                                        {"My-Header1", "value1"},
                                        {"My-Header1", "value3"},
                                        {"My-Header1", "value2"}}));
  EXPECT_EQ(s.signature, "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01");
}

// [SUITE] post-vanilla.
TEST(SigV4SuiteTest, PostVanilla) {
  Signature s = SignSuite(SuiteRequest("POST", "/"));
  EXPECT_EQ(s.signature, "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
}

// [SUITE] post-vanilla-query.
TEST(SigV4SuiteTest, PostVanillaQuery) {
  Signature s = SignSuite(SuiteRequest("POST", "/?Param1=value1"));
  EXPECT_EQ(s.signature, "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11");
}

// [SUITE] post-header-key-sort.
TEST(SigV4SuiteTest, PostHeaderKeySort) {
  Signature s = SignSuite(SuiteRequest("POST", "/", {{"My-Header1", "value1"}}));
  EXPECT_EQ(s.signature, "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c");
}

// [SUITE] post-header-value-case: values keep their case.
TEST(SigV4SuiteTest, PostHeaderValueCase) {
  Signature s = SignSuite(SuiteRequest("POST", "/", {{"My-Header1", "VALUE1"}}));
  EXPECT_NE(s.canonical_request.find("my-header1:VALUE1\n"), std::string::npos);
  EXPECT_EQ(s.signature, "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d");
}

// [SUITE] post-x-www-form-urlencoded (aws-c-auth's header-signed-request.txt: the body hash is
// sent and signed as x-amz-content-sha256, with content-length and content-type signed too).
TEST(SigV4SuiteTest, PostXWwwFormUrlencoded) {
  const std::string body = "Param1=value1";
  const std::string hash = Sha256Hex(body);
  EXPECT_EQ(hash, "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
  Signature s = SignSuite(SuiteRequest("POST", "/",
                                       {{"Content-Type", "application/x-www-form-urlencoded"},
                                        {"Content-Length", "13"},
                                        {"x-amz-content-sha256", hash}},
                                       body));
  EXPECT_EQ(s.authorization,
            SuiteAuthorization("content-length;content-type;host;x-amz-content-sha256;x-amz-date",
                               "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b"));
}

// [SUITE] post-sts-token/post-sts-header-before: the session token is signed.
TEST(SigV4SuiteTest, PostStsHeaderBefore) {
  const std::string token =
      "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfp"
      "SPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQ"
      "DYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+s"
      "cqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==";
  Signature s = SignSuite(SuiteRequest("POST", "/", {{"X-Amz-Security-Token", token}}));
  EXPECT_EQ(s.authorization,
            SuiteAuthorization("host;x-amz-date;x-amz-security-token",
                               "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead"));
}

// [SUITE] get-vanilla-with-session-token (aws-c-auth).
TEST(SigV4SuiteTest, GetVanillaWithSessionToken) {
  Signature s = SignSuite(
      SuiteRequest("GET", "/",
                   {{"X-Amz-Security-Token",
                     "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"}}));
  EXPECT_EQ(s.signature, "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8");
}

// [SUITE] the path normalization cases. The generic rules remove "." and ".." and empty
// segments; S3's rules sign the path as sent ("-unnormalized" in aws-c-auth's copy).
TEST(SigV4SuiteTest, NormalizedPaths) {
  const std::string kVanilla = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31";
  // get-slash-dot-slash-normalized, get-relative-relative-normalized, get-slash-normalized,
  // get-relative-normalized: all sign as "/".
  EXPECT_EQ(SignSuite(SuiteRequest("GET", "/./")).signature, kVanilla);
  EXPECT_EQ(SignSuite(SuiteRequest("GET", "/example1/example2/../..")).signature, kVanilla);
  EXPECT_EQ(SignSuite(SuiteRequest("GET", "//")).signature, kVanilla);
  EXPECT_EQ(SignSuite(SuiteRequest("GET", "/example/..")).signature, kVanilla);
  // get-slashes-normalized: "//example//" signs as "/example/".
  EXPECT_EQ(SignSuite(SuiteRequest("GET", "//example//")).signature,
            "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84");
  // get-slash-pointless-dot-normalized (2015 suite's normalize-path/get-slash-pointless-dot).
  EXPECT_EQ(SignSuite(SuiteRequest("GET", "/./example")).signature,
            "ef75d96142cf21edca26f06005da7988e4f8dc83a165a80865db7089db637ec5");
}

TEST(SigV4SuiteTest, UnnormalizedPaths) {
  const SigningOptions unnormalized{.normalize_path = false, .double_encode_path = true};
  // get-slash-dot-slash-unnormalized.
  Signature dot = SignSuite(SuiteRequest("GET", "/./"), unnormalized);
  EXPECT_NE(dot.canonical_request.find("GET\n/./\n"), std::string::npos);
  EXPECT_EQ(dot.signature, "68714168e6557f8f2de0ef956fc24dc2593a4bd2961f8df51898d8a134695145");
  // get-relative-relative-unnormalized.
  EXPECT_EQ(SignSuite(SuiteRequest("GET", "/example1/example2/../.."), unnormalized).signature,
            "dc33e0856fd4baca4d7aa2146c38958283844764f38c74252a333df5e613003b");
  // get-slashes-unnormalized.
  EXPECT_EQ(SignSuite(SuiteRequest("GET", "//example//"), unnormalized).signature,
            "87cca117541a147f6df867677d98a7d80dff226d2bfca9e4ffa899665623c7e5");
  // S3's rules do not normalize either.
  EXPECT_EQ(SignSuite(SuiteRequest("GET", "//example//"), SigningOptions::S3()).signature,
            "87cca117541a147f6df867677d98a7d80dff226d2bfca9e4ffa899665623c7e5");
}

// [SUITE2011] get-utf8 and get-space: the wire path (already percent-encoded) is encoded once
// more under the generic rules ("%E1" becomes "%25E1"). The cases' .creq give the canonical
// request, .sts the string to sign and .authz the signature (Date header, no x-amz-date).
TEST(SigV4Suite2011Test, GenericRulesEncodeTheWirePathAgain) {
  const Credentials creds{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
  struct Case {
    std::string wire_path, canonical_uri, sts_hash, signature;
  };
  const Case cases[] = {
      {"/%E1%88%B4", "/%25E1%2588%25B4",
       "47f4456c465167f4db3490a68903fe057412e6e030de38f71d9006467eb4922a",
       "57b1eb3df3b16a8479c0097b66c0b261cfd65b829419a3f2c3d05319722490b8"},
      {"/%20/foo", "/%2520/foo", "35975885599128f8963ce9be7219598b2b5a344321bae304529556c891e9e6ba",
       "2be9e587d1ee1f0fd02128724b86b4358ba3630d39f493b6e06610a19a50779e"},
  };
  for (const Case& c : cases) {
    Request r;
    r.method = "GET";
    r.path = c.wire_path;
    r.headers = {{"Date", "Mon, 09 Sep 2011 23:36:00 GMT"}, {"Host", "host.foo.com"}};
    r.payload_hash = std::string(kEmptyPayloadHash);
    Signature s =
        Sign(r, creds, "20110909T233600Z", "us-east-1", "host", SigningOptions::Generic());
    EXPECT_EQ(s.canonical_request, "GET\n" + c.canonical_uri +
                                       "\n\ndate:Mon, 09 Sep 2011 23:36:00 GMT\nhost:host.foo.com\n"
                                       "\ndate;host\n" +
                                       std::string(kEmptyPayloadHash));
    EXPECT_EQ(s.string_to_sign,
              "AWS4-HMAC-SHA256\n20110909T233600Z\n"
              "20110909/us-east-1/host/aws4_request\n" +
                  c.sts_hash);
    EXPECT_EQ(s.authorization,
              "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20110909/us-east-1/host/aws4_request, "
              "SignedHeaders=date;host, Signature=" +
                  c.signature);
    // S3's rules sign the wire path as is.
    Signature s3 = Sign(r, creds, "20110909T233600Z", "us-east-1", "host", SigningOptions::S3());
    EXPECT_NE(s3.canonical_request.find("GET\n" + c.wire_path + "\n"), std::string::npos);
    EXPECT_NE(s3.signature, c.signature);
  }
}

const Credentials kS3DocCreds{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                              ""};
constexpr std::string_view kS3DocDate = "20130524T000000Z";

// A request of the S3 examples as S3Store builds it: the key encoded into the wire path, then
// host, x-amz-date and x-amz-content-sha256 added by AddS3Headers.
Request S3DocRequest(std::string method,
                     std::string_view key,
                     std::vector<QueryParam> query,
                     std::vector<Header> headers,
                     std::string_view body) {
  Request r;
  r.method = std::move(method);
  r.path = S3UriEncodePath("/" + std::string(key));
  r.query = std::move(query);
  r.headers = std::move(headers);
  r.headers.emplace_back("host", "examplebucket.s3.amazonaws.com");
  r.payload_hash = Sha256Hex(body);
  AddS3Headers(r, kS3DocCreds, kS3DocDate);
  return r;
}

Signature SignS3Doc(const Request& r) {
  return Sign(r, kS3DocCreds, kS3DocDate, "us-east-1", "s3", SigningOptions::S3());
}

std::string Last(const std::string& s) {
  return s.substr(s.rfind('\n') + 1);
}

// [S3DOC] Example: GET Object (the first 10 bytes of test.txt).
TEST(SigV4S3DocTest, GetObject) {
  Signature s = SignS3Doc(S3DocRequest("GET", "test.txt", {}, {{"Range", "bytes=0-9"}}, ""));
  EXPECT_EQ(
      s.canonical_request,
      "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
      "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
      "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

// [S3DOC] Example: PUT Object ("test$file.text": '$' is encoded in the path).
TEST(SigV4S3DocTest, PutObject) {
  const std::string body = "Welcome to Amazon S3.";
  EXPECT_EQ(Sha256Hex(body), "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  Signature s = SignS3Doc(S3DocRequest(
      "PUT", "test$file.text", {},
      {{"Date", "Fri, 24 May 2013 00:00:00 GMT"}, {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
      body));
  EXPECT_NE(s.canonical_request.find("PUT\n/test%24file.text\n"), std::string::npos);
  EXPECT_EQ(s.signed_headers, "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class");
  EXPECT_EQ(Last(s.string_to_sign),
            "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  EXPECT_EQ(s.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

// [S3DOC] Example: GET Bucket Lifecycle (a parameter without a value signs as "lifecycle=").
TEST(SigV4S3DocTest, GetBucketLifecycle) {
  Signature s = SignS3Doc(S3DocRequest("GET", "", {{"lifecycle", ""}}, {}, ""));
  EXPECT_NE(s.canonical_request.find("GET\n/\nlifecycle=\n"), std::string::npos);
  EXPECT_EQ(Last(s.string_to_sign),
            "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca");
  EXPECT_EQ(s.signature, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

// [S3DOC] Example: Get Bucket (List Objects), parameters given out of order.
TEST(SigV4S3DocTest, ListObjects) {
  Signature s = SignS3Doc(S3DocRequest("GET", "", {{"prefix", "J"}, {"max-keys", "2"}}, {}, ""));
  EXPECT_NE(s.canonical_request.find("GET\n/\nmax-keys=2&prefix=J\n"), std::string::npos);
  EXPECT_EQ(Last(s.string_to_sign),
            "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7");
  EXPECT_EQ(s.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

// [KEYDOC] and the 2015 suite's own signing-key example (20150830, iam).
TEST(SigV4Test, SigningKeyDerivation) {
  EXPECT_EQ(
      Hex(SigningKey("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", {"20120215", "us-east-1", "iam"})),
      "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
  EXPECT_EQ(
      Hex(SigningKey("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", {"20150830", "us-east-1", "iam"})),
      "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9");
}

// The rest checks this code's own rules (no published value needed).

TEST(SigV4Test, UriEncodeKeepsOnlyUnreservedBytes) {
  EXPECT_EQ(UriEncode("aZ09-_.~", false), "aZ09-_.~");
  EXPECT_EQ(UriEncode("a b/c+d=e&f%", false), "a%20b%2Fc%2Bd%3De%26f%25");
  EXPECT_EQ(UriEncode("a b/c", true), "a%20b/c");
  EXPECT_EQ(UriEncode(std::string("\x00\xff", 2), false), "%00%FF");
  EXPECT_EQ(UriEncode("*!'()", false), "%2A%21%27%28%29");
}

TEST(SigV4Test, UriDecodeIsTheInverseOfUriEncode) {
  std::string all;
  for (int c = 0; c < 256; ++c) {
    all.push_back(static_cast<char>(c));
  }
  EXPECT_EQ(UriDecode(UriEncode(all, false)), all);
  EXPECT_EQ(UriDecode("a+b%2x%"), "a+b%2x%");
  EXPECT_EQ(UriDecode("a+b%2B", true), "a b+");
  EXPECT_EQ(UriDecode("%e1%88%B4"), "\xE1\x88\xB4");
}

TEST(SigV4Test, CanonicalUriDiffersBetweenS3AndGenericRules) {
  EXPECT_EQ(CanonicalUri("/a%20b/./c//d", SigningOptions::S3()), "/a%20b/./c//d");
  EXPECT_EQ(CanonicalUri("/a%20b/./c//d", SigningOptions::Generic()), "/a%2520b/c/d");
  EXPECT_EQ(CanonicalUri("", SigningOptions::S3()), "/");
  EXPECT_EQ(NormalizePath("/a/b/../../.."), "/");
  EXPECT_EQ(NormalizePath("/a/./b/"), "/a/b/");
}

TEST(SigV4Test, CanonicalQueryEncodesSlashAndSortsByEncodedName) {
  EXPECT_EQ(CanonicalQueryString({{"prefix", "a/b c"}, {"list-type", "2"}, {"uploads", ""}}),
            "list-type=2&prefix=a%2Fb%20c&uploads=");
  // '%' sorts before letters once encoded ("%7E" is not used: '~' stays).
  EXPECT_EQ(CanonicalQueryString({{"b", "1"}, {"a~", "2"}, {"a b", "3"}}), "a%20b=3&a~=2&b=1");
}

TEST(SigV4Test, ParseQueryStringDecodes) {
  auto q = ParseQueryString("a=1&b&c=%2F%20&&d=");
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[0], QueryParam("a", "1"));
  EXPECT_EQ(q[1], QueryParam("b", ""));
  EXPECT_EQ(q[2], QueryParam("c", "/ "));
  EXPECT_EQ(q[3], QueryParam("d", ""));
}

TEST(SigV4Test, AddS3HeadersSignsTheSessionToken) {
  Request r;
  r.method = "GET";
  r.path = "/k";
  r.headers = {{"host", "b.s3.amazonaws.com"}};
  r.payload_hash = std::string(kUnsignedPayload);
  AddS3Headers(r, {"AK", "SK", "TOKEN"}, "20240101T000000Z");
  Signature s =
      Sign(r, {"AK", "SK", "TOKEN"}, "20240101T000000Z", "eu-west-1", "s3", SigningOptions::S3());
  EXPECT_EQ(s.signed_headers, "host;x-amz-content-sha256;x-amz-date;x-amz-security-token");
  EXPECT_NE(s.canonical_request.find("x-amz-content-sha256:UNSIGNED-PAYLOAD\n"), std::string::npos);
  EXPECT_EQ(Last(s.canonical_request), "UNSIGNED-PAYLOAD");
  EXPECT_NE(s.authorization.find("Credential=AK/20240101/eu-west-1/s3/aws4_request, "),
            std::string::npos);
}

TEST(SigV4Test, FormatAmzDate) {
  EXPECT_EQ(FormatAmzDate(1440938160), "20150830T123600Z");
  EXPECT_EQ(FormatAmzDate(0), "19700101T000000Z");
}

}  // namespace
}  // namespace ciuic::objstore::sigv4
