// sigv4_tool: signs requests read as JSON lines on stdin and writes one JSON line per request
// with the canonical request and the Authorization header. sigv4_oracle_test.py feeds it random
// requests and compares with botocore's S3SigV4Auth. Test-only; not installed.
//
// Input fields: method, host, path_hex (the unencoded path bytes, "/bucket/key"), query
// ([[name_hex, value_hex], ...]), headers ([[name, value], ...]), payload_hex, unsigned_payload
// (bool), unix_time, region, access_key, secret_key, session_token.
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "objstore/sigv4.h"

namespace {

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

}  // namespace

int main() {
  namespace sigv4 = ciuic::objstore::sigv4;
  std::string line;
  while (std::getline(std::cin, line)) {
    try {
      auto in = nlohmann::json::parse(line);
      sigv4::Credentials creds{in.at("access_key"), in.at("secret_key"),
                               in.value("session_token", "")};
      sigv4::Request req;
      req.method = in.at("method");
      // What S3Store does: encode the key into the wire path, sign that path as is.
      req.path = sigv4::S3UriEncodePath(Unhex(in.at("path_hex")));
      for (const auto& q : in.at("query")) {
        req.query.emplace_back(Unhex(q.at(0)), Unhex(q.at(1)));
      }
      for (const auto& h : in.at("headers")) {
        req.headers.emplace_back(h.at(0), h.at(1));
      }
      req.headers.emplace_back("host", in.at("host"));
      req.payload_hash = in.value("unsigned_payload", false)
                             ? std::string(sigv4::kUnsignedPayload)
                             : sigv4::Sha256Hex(Unhex(in.at("payload_hex")));
      std::string amz_date = sigv4::FormatAmzDate(in.at("unix_time").get<int64_t>());
      sigv4::AddS3Headers(req, creds, amz_date);
      sigv4::Signature sig = sigv4::Sign(req, creds, amz_date, in.at("region").get<std::string>(),
                                         "s3", sigv4::SigningOptions::S3());
      nlohmann::json out = {{"canonical_request", sig.canonical_request},
                            {"authorization", sig.authorization},
                            {"amz_date", amz_date}};
      std::cout << out.dump() << "\n" << std::flush;
    } catch (const std::exception& e) {
      std::cout << nlohmann::json({{"error", e.what()}}).dump() << "\n" << std::flush;
    }
  }
  return 0;
}
