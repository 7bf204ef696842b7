// Data repositories on a MiniCluster (docs/design.md "Data repositories"): `ciuic repo`'s code
// (apps/repo_cmd.cc) against real servers (RocksDB, TCP) and an in-process memory store that
// the test changes behind ciuic's back and makes fail.
#include <fcntl.h>

#include <string>

#include <gtest/gtest.h>

#include "apps/repo_cmd.h"
#include "ciuic/client.h"
#include "objstore/object_store_factory.h"
#include "testing/mini_cluster.h"

namespace ciuic::testing {
namespace {

class RepoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = MiniCluster::Start(MiniClusterOptions{});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(*c);
    auto cl = cluster_->NewClient(ClientOptions{});
    ASSERT_TRUE(cl.ok()) << cl.status().ToString();
    client_ = std::move(*cl);
    name_ = "repo-" + cluster_->cluster_uuid();
    url_ = "mem://" + name_;
    store_ = objstore::SharedMemObjectStore(name_);
  }

  std::string Cat(const std::string& path) {
    auto r = client_->ReadFile(path);
    return r.ok() ? *r : "<" + r.status().ToString() + ">";
  }

  // Runs the command and returns its exit code; stderr goes to *err.
  int Run(const std::string& action, const std::string& dir, std::string* err = nullptr) {
    ::testing::internal::CaptureStderr();
    const int rc = cli::CmdRepo(*client_, action, dir, action == "link" ? url_ : "");
    const std::string e = ::testing::internal::GetCapturedStderr();
    if (err != nullptr)
      *err = e;
    return rc;
  }

  std::unique_ptr<MiniCluster> cluster_;
  std::unique_ptr<Client> client_;
  std::string name_, url_;
  std::shared_ptr<objstore::MemObjectStore> store_;
};

TEST_F(RepoTest, LinkSyncExport) {
  ASSERT_TRUE(store_->Put("a", "alpha").ok());
  ASSERT_TRUE(store_->Put("d/e/b", std::string(3 << 20, 'b')).ok());
  ASSERT_TRUE(store_->Put("d/c", "gamma").ok());
  ASSERT_EQ(Run("link", "/r"), 0);
  EXPECT_EQ(Cat("/r/a"), "alpha");
  EXPECT_EQ(Cat("/r/d/e/b"), std::string(3 << 20, 'b'));
  EXPECT_EQ(Cat("/r/d/c"), "gamma");

  ASSERT_TRUE(store_->Put("a", "alpha 2").ok());
  ASSERT_TRUE(store_->Delete("d/c").ok());
  ASSERT_TRUE(store_->Put("n", "new").ok());
  ASSERT_EQ(Run("sync", "/r"), 0);
  EXPECT_EQ(Cat("/r/a"), "alpha 2");
  EXPECT_EQ(Cat("/r/n"), "new");
  EXPECT_FALSE(client_->Stat("/r/d/c").ok());

  ASSERT_TRUE(client_->WriteFile("/r/d/made", "made here").ok());
  ASSERT_TRUE(client_->WriteFile("/r/n", "changed here").ok());
  ASSERT_EQ(Run("export", "/r"), 0);
  EXPECT_EQ(*store_->GetAll("d/made"), "made here");
  EXPECT_EQ(*store_->GetAll("n"), "changed here");
  // In step now: a sync changes nothing, an export writes nothing.
  const auto puts = store_->TEST_calls().put_stream;
  ASSERT_EQ(Run("sync", "/r"), 0);
  ASSERT_EQ(Run("export", "/r"), 0);
  EXPECT_EQ(store_->TEST_calls().put_stream, puts);
  EXPECT_EQ(Cat("/r/n"), "changed here");
}

TEST_F(RepoTest, FailedStoreLosesNothing) {
  ASSERT_TRUE(store_->Put("a", "one").ok());
  ASSERT_EQ(Run("link", "/r"), 0);
  ASSERT_TRUE(store_->Put("a", "two, longer").ok());
  store_->TEST_FailNext(1, Status::Unavailable("store down"));
  std::string err;
  EXPECT_EQ(Run("sync", "/r", &err), 1);
  EXPECT_NE(err.find("store down"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(Cat("/r/a"), "one");
  ASSERT_EQ(Run("sync", "/r"), 0);
  EXPECT_EQ(Cat("/r/a"), "two, longer");
}

TEST_F(RepoTest, ConflictsAreKeptAndNamed) {
  ASSERT_TRUE(store_->Put("a", "one").ok());
  ASSERT_TRUE(store_->Put("b", "bee").ok());
  ASSERT_EQ(Run("link", "/r"), 0);
  ASSERT_TRUE(client_->WriteFile("/r/a", "local").ok());
  ASSERT_TRUE(store_->Put("a", "remote").ok());
  ASSERT_TRUE(client_->WriteFile("/r/b", "local b").ok());
  ASSERT_TRUE(store_->Delete("b").ok());
  std::string err;
  EXPECT_EQ(Run("sync", "/r", &err), 1);
  EXPECT_NE(err.find("/r/a: changed both here and in the repository"), std::string::npos) << err;
  EXPECT_NE(err.find("/r/b: object 'b' was deleted"), std::string::npos) << err;
  EXPECT_EQ(Cat("/r/a"), "local");
  EXPECT_EQ(Cat("/r/b"), "local b");
}

TEST_F(RepoTest, NotLinkedAndRelinkRefused) {
  ASSERT_TRUE(client_->Mkdir("/plain").ok());
  std::string err;
  EXPECT_EQ(Run("sync", "/plain", &err), 1);
  EXPECT_NE(err.find("/plain: not linked"), std::string::npos) << err;
  ASSERT_EQ(Run("link", "/r"), 0);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::CmdRepo(*client_, "link", "/r", "mem://other"), 1);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "ciuic: repo link: /r: already linked to " + url_ + "\n");
}

}  // namespace
}  // namespace ciuic::testing
