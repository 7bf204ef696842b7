// Where S3Store finds its credentials, region and endpoint when its options leave them empty,
// in the order the AWS CLI and SDKs use:
//   credentials: the options > AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN >
//                the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, else
//                $HOME/.aws/credentials), profile AWS_PROFILE or "default" > none (requests
//                go unsigned, as for a public bucket);
//   region:      the options > AWS_REGION > AWS_DEFAULT_REGION > "us-east-1";
//   endpoint:    the options > AWS_ENDPOINT_URL_S3 > AWS_ENDPOINT_URL >
//                "https://s3.<region>.amazonaws.com".
// The environment is read through an EnvLookup so tests can pass their own.
//
// Thread-safety: the functions are reentrant; ProcessEnv() reads the process environment
// (getenv), which must not be changed meanwhile.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "objstore/sigv4.h"

namespace ciuic::objstore {

// Returns the value of an environment variable, or nullopt when it is unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// Returns an EnvLookup over the process environment.
EnvLookup ProcessEnv();

// section -> key -> value. Keys outside any section are under "".
using IniFile = std::map<std::string, std::map<std::string, std::string>>;

// Parses INI text as the AWS shared files are written: "[section]" headers, "key = value"
// lines, comments starting with '#' or ';', blank lines; names and values trimmed, CR LF
// accepted. Indented lines continue the key above (nested values such as "s3 =" followed by
// indented settings) and are skipped. Returns kInvalidArgument naming the line number of a
// line that is none of these.
Result<IniFile> ParseIni(std::string_view text);

struct ResolvedCredentials {
  sigv4::Credentials creds;  // empty: no credentials anywhere
  // Where they came from, for messages: "options", "environment",
  // "shared credentials file <path>, profile <name>", "none".
  std::string source;
};

// Returns the credentials by the order above. kInvalidArgument when a source is half set
// (an access key without a secret), when AWS_PROFILE names a profile the file lacks, or when
// the file cannot be parsed; a missing file is not an error.
Result<ResolvedCredentials> ResolveCredentials(const sigv4::Credentials& from_options,
                                               const EnvLookup& env);

// Returns the region by the order above.
std::string ResolveRegion(std::string_view from_options, const EnvLookup& env);

// Returns the endpoint URL by the order above.
std::string ResolveEndpoint(std::string_view from_options,
                            std::string_view region,
                            const EnvLookup& env);

}  // namespace ciuic::objstore
