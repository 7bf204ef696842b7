#include "objstore/s3_credentials.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace ciuic::objstore {
namespace {

EnvLookup MapEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) {
      return std::nullopt;
    }
    return it->second;
  };
}

// A temporary directory holding a credentials file, removed at the end of the test.
class CredentialsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "ciuic_creds_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  std::string dir_;
};

const char kCredentialsFile[] =
    "# a comment\r\n"
    "[default]\r\n"
    "aws_access_key_id = FILEDEFAULT\r\n"
    "aws_secret_access_key=filedefaultsecret\r\n"
    "\n"
    "; another comment\n"
    "[work]\n"
    "aws_access_key_id = FILEWORK\n"
    "aws_secret_access_key = file/work+secret\n"
    "aws_session_token = worktoken\n"
    "s3 =\n"
    "  max_concurrent_requests = 20\n";

TEST_F(CredentialsFileTest, OptionsWinOverEverything) {
  std::string file = Write("credentials", kCredentialsFile);
  auto r = ResolveCredentials({"OPT", "optsecret", "opttoken"},
                              MapEnv({{"AWS_ACCESS_KEY_ID", "ENV"},
                                      {"AWS_SECRET_ACCESS_KEY", "envsecret"},
                                      {"AWS_SHARED_CREDENTIALS_FILE", file}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->creds.access_key_id, "OPT");
  EXPECT_EQ(r->creds.session_token, "opttoken");
  EXPECT_EQ(r->source, "options");
}

TEST_F(CredentialsFileTest, EnvironmentWinsOverTheFile) {
  std::string file = Write("credentials", kCredentialsFile);
  auto r = ResolveCredentials({}, MapEnv({{"AWS_ACCESS_KEY_ID", "ENV"},
                                          {"AWS_SECRET_ACCESS_KEY", "envsecret"},
                                          {"AWS_SESSION_TOKEN", "envtoken"},
                                          {"AWS_SHARED_CREDENTIALS_FILE", file},
                                          {"AWS_PROFILE", "work"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->creds.access_key_id, "ENV");
  EXPECT_EQ(r->creds.secret_access_key, "envsecret");
  EXPECT_EQ(r->creds.session_token, "envtoken");
  EXPECT_EQ(r->source, "environment");
}

TEST_F(CredentialsFileTest, TheFileGivesTheDefaultProfile) {
  std::string file = Write("credentials", kCredentialsFile);
  auto r = ResolveCredentials({}, MapEnv({{"AWS_SHARED_CREDENTIALS_FILE", file}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->creds.access_key_id, "FILEDEFAULT");
  EXPECT_EQ(r->creds.secret_access_key, "filedefaultsecret");
  EXPECT_EQ(r->creds.session_token, "");
  EXPECT_EQ(r->source, "shared credentials file " + file + ", profile default");
}

TEST_F(CredentialsFileTest, AwsProfileChoosesTheSection) {
  std::string file = Write("credentials", kCredentialsFile);
  auto r = ResolveCredentials(
      {}, MapEnv({{"AWS_SHARED_CREDENTIALS_FILE", file}, {"AWS_PROFILE", "work"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->creds.access_key_id, "FILEWORK");
  EXPECT_EQ(r->creds.secret_access_key, "file/work+secret");
  EXPECT_EQ(r->creds.session_token, "worktoken");
}

TEST_F(CredentialsFileTest, HomeDirectoryFileIsTheDefaultPath) {
  Write(".aws/credentials", kCredentialsFile);
  auto r = ResolveCredentials({}, MapEnv({{"HOME", dir_}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->creds.access_key_id, "FILEDEFAULT");
}

TEST_F(CredentialsFileTest, NothingAnywhereMeansAnonymous) {
  auto r = ResolveCredentials({}, MapEnv({{"HOME", dir_}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->creds.empty());
  EXPECT_EQ(r->source, "none");
}

TEST_F(CredentialsFileTest, MissingNamedProfileIsAnError) {
  std::string file = Write("credentials", kCredentialsFile);
  auto r = ResolveCredentials(
      {}, MapEnv({{"AWS_SHARED_CREDENTIALS_FILE", file}, {"AWS_PROFILE", "nope"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("no profile nope"), std::string::npos);
}

TEST_F(CredentialsFileTest, HalfSetSourcesAreErrors) {
  EXPECT_EQ(ResolveCredentials({"ONLYID", "", ""}, MapEnv({})).status().code(),
            StatusCode::kInvalidArgument);
  auto r = ResolveCredentials({}, MapEnv({{"AWS_ACCESS_KEY_ID", "ENV"}}));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("AWS_SECRET_ACCESS_KEY is not"), std::string::npos);
  std::string file = Write("credentials", "[default]\naws_access_key_id = X\n");
  EXPECT_EQ(ResolveCredentials({}, MapEnv({{"AWS_SHARED_CREDENTIALS_FILE", file}})).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(CredentialsFileTest, MalformedFileNamesItsLine) {
  std::string file = Write("credentials", "[default]\naws_access_key_id = X\ngarbage\n");
  auto r = ResolveCredentials({}, MapEnv({{"AWS_SHARED_CREDENTIALS_FILE", file}}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("line 3"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(file), std::string::npos);
}

TEST(S3ConfigTest, ParseIni) {
  auto ini = ParseIni("top = 1\n[a]\nk = v = w \n  nested = 1\n[ b ]\n#x\n");
  ASSERT_TRUE(ini.ok());
  EXPECT_EQ((*ini)[""]["top"], "1");
  EXPECT_EQ((*ini)["a"]["k"], "v = w");
  EXPECT_EQ((*ini)["a"].count("nested"), 0u);
  EXPECT_EQ(ini->count("b"), 1u);
  EXPECT_FALSE(ParseIni("[unclosed\n").ok());
  EXPECT_FALSE(ParseIni("= value\n").ok());
}

TEST(S3ConfigTest, RegionOrder) {
  EXPECT_EQ(ResolveRegion("opt-1", MapEnv({{"AWS_REGION", "env-1"}})), "opt-1");
  EXPECT_EQ(ResolveRegion("", MapEnv({{"AWS_REGION", "env-1"}, {"AWS_DEFAULT_REGION", "env-2"}})),
            "env-1");
  EXPECT_EQ(ResolveRegion("", MapEnv({{"AWS_REGION", ""}, {"AWS_DEFAULT_REGION", "env-2"}})),
            "env-2");
  EXPECT_EQ(ResolveRegion("", MapEnv({})), "us-east-1");
}

TEST(S3ConfigTest, EndpointOrder) {
  auto env =
      MapEnv({{"AWS_ENDPOINT_URL_S3", "http://s3only:1"}, {"AWS_ENDPOINT_URL", "http://all:2"}});
  EXPECT_EQ(ResolveEndpoint("http://opt:3", "r", env), "http://opt:3");
  EXPECT_EQ(ResolveEndpoint("", "r", env), "http://s3only:1");
  EXPECT_EQ(ResolveEndpoint("", "r", MapEnv({{"AWS_ENDPOINT_URL", "http://all:2"}})),
            "http://all:2");
  EXPECT_EQ(ResolveEndpoint("", "eu-west-3", MapEnv({})), "https://s3.eu-west-3.amazonaws.com");
}

}  // namespace
}  // namespace ciuic::objstore
