#include "objstore/s3_credentials.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace ciuic::objstore {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// An unset variable and an empty one mean the same to the AWS tools.
std::optional<std::string> NonEmpty(const EnvLookup& env, const std::string& name) {
  std::optional<std::string> v = env(name);
  if (v.has_value() && v->empty()) {
    return std::nullopt;
  }
  return v;
}

Result<ResolvedCredentials> FromSharedFile(const EnvLookup& env) {
  std::string path;
  if (auto p = NonEmpty(env, "AWS_SHARED_CREDENTIALS_FILE")) {
    path = *p;
  } else if (auto home = NonEmpty(env, "HOME")) {
    path = *home + "/.aws/credentials";
  } else {
    return ResolvedCredentials{{}, "none"};
  }
  std::optional<std::string> named_profile = NonEmpty(env, "AWS_PROFILE");
  std::string profile = named_profile.value_or("default");

  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (named_profile.has_value()) {
      return Status::InvalidArgument("AWS_PROFILE is " + profile +
                                     " but the shared credentials file " + path +
                                     " cannot be read");
    }
    return ResolvedCredentials{{}, "none"};
  }
  std::stringstream text;
  text << in.rdbuf();
  Result<IniFile> ini = ParseIni(text.str());
  if (!ini.ok()) {
    return ini.status().WithContext("shared credentials file " + path);
  }
  auto section = ini->find(profile);
  if (section == ini->end()) {
    if (named_profile.has_value()) {
      return Status::InvalidArgument("shared credentials file " + path + " has no profile " +
                                     profile + " (AWS_PROFILE)");
    }
    return ResolvedCredentials{{}, "none"};
  }
  const auto& kv = section->second;
  auto get = [&kv](const char* key) -> std::string {
    auto it = kv.find(key);
    return it == kv.end() ? "" : it->second;
  };
  sigv4::Credentials c{get("aws_access_key_id"), get("aws_secret_access_key"),
                       get("aws_session_token")};
  std::string source = "shared credentials file " + path + ", profile " + profile;
  if (c.access_key_id.empty() != c.secret_access_key.empty()) {
    return Status::InvalidArgument(source + ": has " +
                                   (c.access_key_id.empty() ? "aws_secret_access_key but no "
                                                              "aws_access_key_id"
                                                            : "aws_access_key_id but no "
                                                              "aws_secret_access_key"));
  }
  if (c.access_key_id.empty()) {
    return ResolvedCredentials{{}, "none"};
  }
  return ResolvedCredentials{std::move(c), std::move(source)};
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) {
      return std::nullopt;
    }
    return std::string(v);
  };
}

Result<IniFile> ParseIni(std::string_view text) {
  IniFile out;
  std::string section;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) {
      eol = text.size();
    }
    std::string_view raw = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    std::string_view line = Trim(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') {
      continue;
    }
    if (raw.front() == ' ' || raw.front() == '\t') {
      continue;  // a nested value under the key above
    }
    if (line.front() == '[') {
      if (line.back() != ']') {
        return Status::InvalidArgument("line " + std::to_string(line_no) +
                                       ": a section header without ']'");
      }
      section = std::string(Trim(line.substr(1, line.size() - 2)));
      out[section];
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument("line " + std::to_string(line_no) +
                                     ": neither a [section] nor key = value");
    }
    std::string_view key = Trim(line.substr(0, eq));
    if (key.empty()) {
      return Status::InvalidArgument("line " + std::to_string(line_no) + ": a value without a key");
    }
    out[section][std::string(key)] = std::string(Trim(line.substr(eq + 1)));
  }
  return out;
}

Result<ResolvedCredentials> ResolveCredentials(const sigv4::Credentials& from_options,
                                               const EnvLookup& env) {
  if (!from_options.access_key_id.empty() || !from_options.secret_access_key.empty()) {
    if (from_options.access_key_id.empty() || from_options.secret_access_key.empty()) {
      return Status::InvalidArgument(
          "S3 options give an access key id or a secret access key, but not both");
    }
    return ResolvedCredentials{from_options, "options"};
  }
  std::optional<std::string> id = NonEmpty(env, "AWS_ACCESS_KEY_ID");
  std::optional<std::string> secret = NonEmpty(env, "AWS_SECRET_ACCESS_KEY");
  if (id.has_value() || secret.has_value()) {
    if (!id.has_value() || !secret.has_value()) {
      return Status::InvalidArgument(
          id.has_value() ? "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"
                         : "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
    }
    return ResolvedCredentials{{*id, *secret, NonEmpty(env, "AWS_SESSION_TOKEN").value_or("")},
                               "environment"};
  }
  return FromSharedFile(env);
}

std::string ResolveRegion(std::string_view from_options, const EnvLookup& env) {
  if (!from_options.empty()) {
    return std::string(from_options);
  }
  if (auto r = NonEmpty(env, "AWS_REGION")) {
    return *r;
  }
  if (auto r = NonEmpty(env, "AWS_DEFAULT_REGION")) {
    return *r;
  }
  return "us-east-1";
}

std::string ResolveEndpoint(std::string_view from_options,
                            std::string_view region,
                            const EnvLookup& env) {
  if (!from_options.empty()) {
    return std::string(from_options);
  }
  if (auto e = NonEmpty(env, "AWS_ENDPOINT_URL_S3")) {
    return *e;
  }
  if (auto e = NonEmpty(env, "AWS_ENDPOINT_URL")) {
    return *e;
  }
  return "https://s3." + std::string(region) + ".amazonaws.com";
}

}  // namespace ciuic::objstore
