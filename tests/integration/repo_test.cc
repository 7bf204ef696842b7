// Data repositories on a MiniCluster (docs/design.md "Data repositories"): `ciuic repo`'s code
// (apps/repo_cmd.cc) against real servers (RocksDB, TCP) and an in-process memory store that
// the test changes behind ciuic's back and makes fail.
#include <fcntl.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "apps/repo_cmd.h"
#include "ciuic.pb.h"
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
  // In step now: a sync changes nothing, an export writes nothing. A sync finds deleted objects
  // from one listing per directory, not a Head per file.
  const auto puts = store_->TEST_calls().put_stream;
  const auto heads = store_->TEST_calls().head;
  ASSERT_EQ(Run("sync", "/r"), 0);
  EXPECT_EQ(store_->TEST_calls().head, heads);
  ASSERT_EQ(Run("export", "/r"), 0);
  EXPECT_EQ(store_->TEST_calls().put_stream, puts);
  EXPECT_EQ(Cat("/r/n"), "changed here");
}

TEST_F(RepoTest, FailedStoreLosesNothing) {
  ASSERT_TRUE(store_->Put("a", "one").ok());
  ASSERT_EQ(Run("link", "/r"), 0);
  EXPECT_EQ(Cat("/r/a"), "one");  // loaded: from now on its bytes are on the OSTs
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

// `link` imports released files: names, sizes and mtimes at once, no byte fetched until a read,
// which the OSSes serve with ranged GETs mapped to their stripe objects.
TEST_F(RepoTest, LinkIsLazyAndReadsLoadStripes) {
  // Stripes of 64 KiB over every OST, so each object holds many pieces of the file.
  ASSERT_TRUE(client_->Mkdir("/r").ok());
  FileLayout l = *client_->GetLayout("/r");
  l.components.clear();
  LayoutComponent c;
  c.start = 0;
  c.end = kLayoutEof;
  c.stripe_size = 64 << 10;
  c.stripe_count = static_cast<uint32_t>(cluster_->num_osts());
  l.components.push_back(c);
  ASSERT_TRUE(client_->SetLayout("/r", l).ok());
  std::string big(5 * (1 << 20) + 12345, '\0');
  for (size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<char>((i * 131 + i / 4096) & 0xff);
  ASSERT_TRUE(store_->Put("x/big", big).ok());
  ASSERT_TRUE(store_->Put("small", "tiny").ok());
  ASSERT_TRUE(store_->Put("empty", "").ok());
  const auto gets = store_->TEST_calls().get;
  ASSERT_EQ(Run("link", "/r"), 0);
  EXPECT_EQ(store_->TEST_calls().get, gets) << "link fetched bytes";
  auto st = client_->Stat("/r/x/big");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->size, big.size());
  auto h = client_->HsmGetState("/r/x/big");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->state, HsmState::kReleased);
  EXPECT_EQ(h->backend, url_);
  EXPECT_TRUE(Cat("/r/x/big") == big);
  EXPECT_GT(store_->TEST_calls().get, gets);
  // Recorded once the OSSes report the restore's end, a little after the read returned.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (client_->HsmGetState("/r/x/big")->state != HsmState::kArchived &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(client_->HsmGetState("/r/x/big")->state, HsmState::kArchived);
  EXPECT_EQ(Cat("/r/small"), "tiny");
  EXPECT_EQ(Cat("/r/empty"), "");
  // Released again (the object is the copy: checked by ETag), then read again.
  ASSERT_TRUE(client_->HsmRelease("/r/x/big").ok());
  EXPECT_EQ(client_->HsmGetState("/r/x/big")->state, HsmState::kReleased);
  EXPECT_TRUE(Cat("/r/x/big") == big);
  // In step: a sync imports nothing again; removing a file never deletes its object.
  ASSERT_EQ(Run("sync", "/r"), 0);
  ASSERT_TRUE(client_->Unlink("/r/small").ok());
  EXPECT_EQ(*store_->GetAll("small"), "tiny");
}

// An object deleted or changed behind a released file: the read fails with EIO naming the file
// and the object, never wrong bytes; a sync then removes or re-imports the file.
TEST_F(RepoTest, ObjectDeletedOrChangedUnderReleasedFile) {
  ASSERT_TRUE(store_->Put("gone", "soon gone").ok());
  ASSERT_TRUE(store_->Put("moved", "first").ok());
  ASSERT_EQ(Run("link", "/r"), 0);
  ASSERT_TRUE(store_->Delete("gone").ok());
  ASSERT_TRUE(store_->Put("moved", "second!").ok());
  auto r = client_->ReadFile("/r/gone");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().ToString();
  EXPECT_NE(r.status().message().find("/r/gone"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("object 'gone'"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("was deleted"), std::string::npos) << r.status().ToString();
  // Recorded when the OSSes report the restore's end (the reader had the error first).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (client_->HsmGetState("/r/gone")->state != HsmState::kLost &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(client_->HsmGetState("/r/gone")->state, HsmState::kLost);
  r = client_->ReadFile("/r/moved");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("changed since it was imported"), std::string::npos)
      << r.status().ToString();
  ASSERT_EQ(Run("sync", "/r"), 0);
  EXPECT_FALSE(client_->Stat("/r/gone").ok());
  EXPECT_EQ(Cat("/r/moved"), "second!");
}

// Importing is the admin key's: the OSSes fetch what an import names. A tenant reads imported
// files through its capabilities, which name the source.
TEST_F(RepoTest, ClientKeysReadButCannotImport) {
  ASSERT_TRUE(store_->Put("a", "alpha").ok());
  ASSERT_EQ(Run("link", "/r"), 0);
  pb::ClientKeyRecord rules;
  rules.set_name("tenant");
  auto file = cluster_->AddClientKey(rules);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ClientOptions o;
  o.cluster_file = *file;
  o.uid = 1000;
  o.gid = 1000;
  auto tenant = cluster_->NewClient(o);
  ASSERT_TRUE(tenant.ok()) << tenant.status().ToString();
  auto got = (*tenant)->ReadFile("/r/a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "alpha");
  ASSERT_TRUE(client_->Mkdir("/open", 0777).ok());
  RepoImport spec;
  spec.url = "file:///etc";
  spec.key = "passwd";
  spec.size = 100;
  Status st = (*tenant)->HsmImport("/open/p", spec);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
  EXPECT_FALSE(client_->Stat("/open/p").ok());
}

std::set<std::string> QueuedPaths(Client& c, const std::string& dir) {
  std::set<std::string> out;
  auto q = c.RepoListQueue(dir, 0);
  if (!q.ok())
    return {"<" + q.status().ToString() + ">"};
  for (const RepoQueued& e : q->entries)
    out.insert(e.path);
  return out;
}

// Export on close: every close that wrote a file below the link queues it on the MDS, durably;
// a drain exports the queue under the files' current names and empties it.
TEST_F(RepoTest, ExportOnCloseQueuesWhatWritersClose) {
  ASSERT_TRUE(store_->Put("a", "alpha").ok());
  ASSERT_EQ(Run("link", "/r"), 0);
  ASSERT_EQ(cli::CmdRepoExportOnClose(*client_, "/r", true), 0);
  ASSERT_TRUE(client_->MkdirAll("/r/d/e").ok());
  ASSERT_TRUE(client_->WriteFile("/r/d/e/new", "made here").ok());
  ASSERT_TRUE(client_->WriteFile("/r/a", "alpha, changed").ok());
  ASSERT_TRUE(client_->WriteFile("/outside", "not linked").ok());
  ASSERT_TRUE(client_->WriteFile("/r/gone", "removed before its export").ok());
  ASSERT_TRUE(client_->Unlink("/r/gone").ok());
  EXPECT_EQ(QueuedPaths(*client_, "/r"), (std::set<std::string>{"", "a", "d/e/new"}));
  // A read is no change: its close queues nothing.
  ASSERT_EQ(Cat("/r/d/e/new"), "made here");

  // The queue and the switch are in the namespace: an MDS restart keeps both.
  ASSERT_TRUE(cluster_->RestartMds().ok());
  auto q = client_->RepoListQueue("/r", 0);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_TRUE(q->export_on_close);
  EXPECT_EQ(q->entries.size(), 3u);

  // Renamed (with its directory) before the export: exported under its name now.
  ASSERT_TRUE(client_->Rename("/r/d/e", "/r/d/f").ok());
  ASSERT_TRUE(client_->Rename("/r/d/f/new", "/r/d/f/renamed").ok());
  EXPECT_EQ(QueuedPaths(*client_, "/r"), (std::set<std::string>{"", "a", "d/f/renamed"}));
  const auto puts = store_->TEST_calls().put_stream;
  ASSERT_EQ(Run("export-closed", "/r"), 0);
  EXPECT_EQ(store_->TEST_calls().put_stream, puts + 2);
  EXPECT_EQ(*store_->GetAll("d/f/renamed"), "made here");
  EXPECT_EQ(*store_->GetAll("a"), "alpha, changed");
  EXPECT_FALSE(store_->GetAll("gone").ok());
  EXPECT_FALSE(store_->GetAll("outside").ok());
  EXPECT_TRUE(QueuedPaths(*client_, "/r").empty());

  // An entry stays until it is done at the version its close made: a close after the
  // exporter looked is not lost.
  ASSERT_TRUE(client_->WriteFile("/r/a", "third").ok());
  q = client_->RepoListQueue("/r", 0);
  ASSERT_TRUE(q.ok() && q->entries.size() == 1u);
  RepoQueued e = q->entries[0];
  --e.version;
  ASSERT_TRUE(client_->RepoQueueDone("/r", {e}).ok());
  EXPECT_EQ(QueuedPaths(*client_, "/r"), (std::set<std::string>{"a"}));
  // A sync exports the queue too.
  ASSERT_EQ(Run("sync", "/r"), 0);
  EXPECT_EQ(*store_->GetAll("a"), "third");
  EXPECT_TRUE(QueuedPaths(*client_, "/r").empty());

  // Switched off: closes queue nothing.
  ASSERT_EQ(cli::CmdRepoExportOnClose(*client_, "/r", false), 0);
  ASSERT_TRUE(client_->WriteFile("/r/a", "fourth").ok());
  q = client_->RepoListQueue("/r", 0);
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->export_on_close);
  EXPECT_TRUE(q->entries.empty());

  // Not linked, or not the admin key: refused.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::CmdRepoExportOnClose(*client_, "/outside", true), 1);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("not linked"), std::string::npos);
  pb::ClientKeyRecord rules;
  rules.set_name("tenant");
  auto file = cluster_->AddClientKey(rules);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ClientOptions o;
  o.cluster_file = *file;
  auto tenant = cluster_->NewClient(o);
  ASSERT_TRUE(tenant.ok()) << tenant.status().ToString();
  EXPECT_EQ((*tenant)->RepoSetExportOnClose("/r", true).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ((*tenant)->RepoListQueue("/r", 0).status().code(), StatusCode::kPermissionDenied);
}

// The agent (`ciuic repo agent`, which `cluster up` starts) exports what closes queue in every
// directory that exports on close, and forgets a directory that is removed.
TEST_F(RepoTest, AgentExportsWhatClosesQueue) {
  ASSERT_TRUE(store_->Put("a", "alpha").ok());
  ASSERT_EQ(Run("link", "/r"), 0);
  ASSERT_EQ(cli::CmdRepoExportOnClose(*client_, "/r", true), 0);
  // Linked elsewhere too, without export on close: listed, and left alone by the agent.
  ASSERT_TRUE(objstore::SharedMemObjectStore(name_ + "-2")->Put("b", "bee").ok());
  ASSERT_EQ(cli::CmdRepo(*client_, "link", "/q", url_ + "-2"), 0);
  auto links = client_->RepoLinks();
  ASSERT_TRUE(links.ok()) << links.status().ToString();
  ASSERT_EQ(links->size(), 2u);
  EXPECT_EQ((*links)[0].path, "/r");  // linked first: the lower FID
  EXPECT_TRUE((*links)[0].export_on_close);
  EXPECT_EQ((*links)[1].path, "/q");
  EXPECT_FALSE((*links)[1].export_on_close);
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli::CmdRepoList(*client_), 0);
  const std::string listed = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(listed.find("/r " + url_ + " export-on-close on queued 0\n"), std::string::npos)
      << listed;
  EXPECT_NE(listed.find("/q " + url_ + "-2 export-on-close off queued 0\n"), std::string::npos)
      << listed;
  std::atomic<bool> stop{false};
  std::thread agent([&] { cli::CmdRepoAgent(*client_, 0.05, [&] { return stop.load(); }); });
  ASSERT_TRUE(client_->MkdirAll("/r/sub").ok());
  ASSERT_TRUE(client_->WriteFile("/r/sub/x", "closed, then exported").ok());
  ASSERT_TRUE(client_->WriteFile("/q/b", "changed, not exported on close").ok());
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = store_->GetAll("sub/x");
    if (r.ok() && *r == "closed, then exported") {
      got = *r;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  agent.join();
  EXPECT_EQ(got, "closed, then exported");
  EXPECT_EQ(*objstore::SharedMemObjectStore(name_ + "-2")->GetAll("b"), "bee");
  // A removed directory is no link: its switch and queue go with it.
  ASSERT_TRUE(client_->WriteFile("/r/sub/y", "queued, never exported").ok());
  for (const char* f : {"/r/a", "/r/sub/x", "/r/sub/y"})
    ASSERT_TRUE(client_->Unlink(f).ok()) << f;
  ASSERT_TRUE(client_->Rmdir("/r/sub").ok());
  ASSERT_TRUE(client_->Rmdir("/r").ok());
  links = client_->RepoLinks();
  ASSERT_TRUE(links.ok());
  ASSERT_EQ(links->size(), 1u);
  EXPECT_EQ((*links)[0].path, "/q");
}

// A file renamed here: sync leaves it alone, export moves its object to the new key.
TEST_F(RepoTest, RenameIsExportedAsAMove) {
  ASSERT_TRUE(store_->Put("old", "payload").ok());
  ASSERT_TRUE(store_->Put("kept", "k1").ok());
  ASSERT_EQ(Run("link", "/r"), 0);
  ASSERT_TRUE(client_->Rename("/r/old", "/r/new").ok());
  ASSERT_TRUE(client_->Rename("/r/kept", "/r/kept2").ok());
  EXPECT_EQ(Cat("/r/kept2"), "k1");  // loaded before its object changes
  ASSERT_TRUE(store_->Put("kept", "k2, changed in the repository").ok());
  ASSERT_EQ(Run("export", "/r"), 0);
  EXPECT_EQ(*store_->GetAll("new"), "payload");
  EXPECT_EQ(store_->GetAll("old").status().code(), StatusCode::kNotFound);
  // Changed behind ciuic's back after the rename: not this file's any more, so it stays.
  EXPECT_EQ(*store_->GetAll("kept"), "k2, changed in the repository");
  EXPECT_EQ(*store_->GetAll("kept2"), "k1");
  ASSERT_EQ(Run("sync", "/r"), 0);
  EXPECT_EQ(Cat("/r/new"), "payload");
  EXPECT_EQ(Cat("/r/kept"), "k2, changed in the repository");
  EXPECT_FALSE(client_->Stat("/r/old").ok());
}

// Power cuts: what `link` reported is durable (it syncs the MDS before it answers), and a cut
// in the middle of a file's first read leaves it released and whole, never half-restored.
TEST(RepoPowerTest, LinkIsDurableAndACutRestoreLosesNothing) {
  MiniClusterOptions o;
  o.power_loss = true;
  auto c = MiniCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto cluster = std::move(*c);
  const std::string name = "repo-power-" + cluster->cluster_uuid();
  auto store = objstore::SharedMemObjectStore(name);
  std::string data(6 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<char>((i * 7 + i / 9973) & 0xff);
  ASSERT_TRUE(store->Put("big", data).ok());
  ASSERT_TRUE(store->Put("small", "abc").ok());
  {
    auto client = cluster->NewClient(ClientOptions{}).value();
    ::testing::internal::CaptureStdout();
    ASSERT_EQ(cli::CmdRepo(*client, "link", "/r", "mem://" + name), 0);
    ::testing::internal::GetCapturedStdout();
  }
  ASSERT_TRUE(cluster->PowerCycle().ok());
  for (int round = 0; round < 4; ++round) {
    auto client = cluster->NewClient(ClientOptions{}).value();
    auto st = client->Stat("/r/big");
    ASSERT_TRUE(st.ok()) << "round " << round << ": " << st.status().ToString();
    EXPECT_EQ(st->size, data.size());
    // Cut the power while a reader loads the file (at varying points).
    std::thread reader([&] { (void)client->ReadFile("/r/big"); });
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + 15 * round));
    ASSERT_TRUE(cluster->PowerCycle(round + 1).ok());
    reader.join();
    // The cut reader goes away: a close it sent while the MDS was down is lost, and its
    // session would keep the file open (and so not releasable) for as long as it lives.
    client.reset();
    auto fresh = cluster->NewClient(ClientOptions{}).value();
    auto got = fresh->ReadFile("/r/big");
    ASSERT_TRUE(got.ok()) << "round " << round << ": " << got.status().ToString();
    EXPECT_TRUE(*got == data) << "round " << round;
    EXPECT_EQ(*fresh->ReadFile("/r/small"), "abc");
    if (round + 1 < 4) {
      // Released again for the next round's cut.
      Status rel = fresh->HsmRelease("/r/big");
      ASSERT_TRUE(rel.ok()) << rel.ToString();
      ASSERT_TRUE(fresh->FsyncDir("/r").ok());
    }
  }
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
