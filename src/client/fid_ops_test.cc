// Integration test of the client's by-FID operations (Client::*At) and ScopedCaller on a
// MiniCluster: what the FUSE daemon builds on.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "ciuic/client.h"
#include "testing/mini_cluster.h"

namespace ciuic::testing {
namespace {

class FidOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = MiniCluster::Start({.num_oss = 1, .osts_per_oss = 1, .mds_in_memory = true});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(*c);
    ClientOptions o;
    o.uid = 0;
    o.gid = 0;
    auto cl = cluster_->NewClient(o);
    ASSERT_TRUE(cl.ok()) << cl.status().ToString();
    client_ = std::move(*cl);
    root_ = client_->RootId();
  }
  void TearDown() override {
    client_.reset();
    cluster_.reset();
  }

  std::unique_ptr<MiniCluster> cluster_;
  std::unique_ptr<Client> client_;
  FileId root_;
};

TEST_F(FidOpsTest, IdsSurviveRenamesOfTheirDirectories) {
  auto d = client_->MkdirAt(root_, "d", 0755);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  FileStat attr;
  auto f = client_->CreateAt(IdOf(*d), "f", O_CREAT | O_WRONLY, 0640, &attr);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE((*f)->Pwrite("hello", 5, 0).ok());
  // The size of unflushed writes shows through GetAttrAt.
  auto mid = client_->GetAttrAt(IdOf(attr));
  ASSERT_TRUE(mid.ok());
  EXPECT_EQ(mid->size, 5u);
  ASSERT_TRUE((*f)->Close().ok());
  ASSERT_TRUE(client_->RenameAt(root_, "d", root_, "e", 0).ok());
  auto looked = client_->LookupAt(IdOf(*d), "f");  // the directory's id still works
  ASSERT_TRUE(looked.ok()) << looked.status().ToString();
  EXPECT_EQ(looked->ino, attr.ino);
  EXPECT_EQ(looked->mode, S_IFREG | 0640u);
  auto r = client_->OpenAt(IdOf(*looked), O_RDONLY, nullptr);
  ASSERT_TRUE(r.ok());
  char buf[16] = {};
  auto n = (*r)->Pread(buf, sizeof(buf), 0);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "hello");
  ASSERT_TRUE((*r)->Close().ok());
  EXPECT_EQ(client_->Stat("/e/f")->ino, attr.ino);
}

TEST_F(FidOpsTest, ReadDirAtListsDotsThenEntries) {
  auto d = client_->MkdirAt(root_, "dir", 0755);
  ASSERT_TRUE(d.ok());
  std::set<std::string> want = {".", ".."};
  for (int i = 0; i < 50; ++i) {
    const std::string name = "n" + std::to_string(i);
    ASSERT_TRUE(client_->MknodAt(IdOf(*d), name, S_IFREG | 0644, 0).ok());
    want.insert(name);
  }
  std::set<std::string> got;
  uint64_t cookie = 0;
  for (int pages = 0; pages < 100; ++pages) {
    auto page = client_->ReadDirAt(IdOf(*d), cookie, 7, false);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    for (const auto& e : page->entries)
      EXPECT_TRUE(got.insert(e.name).second) << e.name;
    cookie = page->next_cookie;
    if (page->eof)
      break;
  }
  EXPECT_EQ(got, want);
}

TEST_F(FidOpsTest, NamespaceOperationsAndErrors) {
  auto d = client_->MkdirAt(root_, "ns", 0777);
  ASSERT_TRUE(d.ok());
  const FileId dir = IdOf(*d);
  EXPECT_EQ(client_->LookupAt(dir, "missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->MkdirAt(dir, "a/b", 0755).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->MkdirAt(dir, std::string(256, 'x'), 0755).status().code(),
            StatusCode::kNameTooLong);
  ASSERT_TRUE(client_->MkdirAt(dir, std::string(255, 'x'), 0755).ok());
  auto s = client_->SymlinkAt("target/path", dir, "sym");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*client_->ReadlinkAt(IdOf(*s)), "target/path");
  auto f = client_->MknodAt(dir, "file", S_IFREG | 0600, 0);
  ASSERT_TRUE(f.ok());
  auto l = client_->LinkAt(IdOf(*f), dir, "hard");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->nlink, 2u);
  EXPECT_EQ(client_->RmdirAt(dir, "file").code(), StatusCode::kNotADirectory);
  EXPECT_EQ(client_->RmdirAt(root_, "ns").code(), StatusCode::kNotEmpty);
  ASSERT_TRUE(client_->SetXattrAt(IdOf(*f), "user.k", "v", 0).ok());
  EXPECT_EQ(*client_->GetXattrAt(IdOf(*f), "user.k"), "v");
  EXPECT_EQ(client_->ListXattrAt(IdOf(*f))->size(), 1u);
  ASSERT_TRUE(client_->RemoveXattrAt(IdOf(*f), "user.k").ok());
  EXPECT_EQ(client_->GetXattrAt(IdOf(*f), "user.k").status().code(), StatusCode::kNotFound);
  SetAttrRequest req;
  req.set_mode = true;
  req.mode = 0604;
  req.mtime = {1234567890, 987654321};
  auto a = client_->SetAttrAt(IdOf(*f), req);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->mode & 07777, 0604u);
  EXPECT_EQ(a->mtime_sec, 1234567890);
  EXPECT_EQ(a->mtime_nsec, 987654321u);
  ASSERT_TRUE(client_->UnlinkAt(dir, "hard").ok());
  EXPECT_EQ(client_->GetAttrAt(IdOf(*f))->nlink, 1u);
}

TEST_F(FidOpsTest, TruncateByIdAndUnlinkWhileOpen) {
  FileStat attr;
  auto f = client_->CreateAt(root_, "t", O_CREAT | O_RDWR, 0644, &attr);
  ASSERT_TRUE(f.ok());
  const std::string data(100000, 'z');
  ASSERT_TRUE((*f)->Pwrite(data.data(), data.size(), 0).ok());
  SetAttrRequest req;
  req.set_size = true;
  req.size = 10;
  auto a = client_->SetAttrAt(IdOf(attr), req);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->size, 10u);
  ASSERT_TRUE(client_->UnlinkAt(root_, "t").ok());
  char buf[64];
  auto n = (*f)->Pread(buf, sizeof(buf), 0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(std::string(buf, *n), std::string(10, 'z'));
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_FALSE(client_->GetAttrAt(IdOf(attr)).ok());
}

TEST_F(FidOpsTest, ScopedCallerOwnsNewFilesAndIsChecked) {
  auto d = client_->MkdirAt(root_, "home", 0755);
  ASSERT_TRUE(d.ok());
  {
    ScopedCaller who(1234, 5678);
    // 0755 root directory: user 1234 may not create in it.
    EXPECT_EQ(client_->MknodAt(IdOf(*d), "x", S_IFREG | 0644, 0).status().code(),
              StatusCode::kPermissionDenied);
  }
  SetAttrRequest open_up;
  open_up.set_mode = true;
  open_up.mode = 0777;
  ASSERT_TRUE(client_->SetAttrAt(IdOf(*d), open_up).ok());
  {
    ScopedCaller who(1234, 5678);
    auto f = client_->MknodAt(IdOf(*d), "x", S_IFREG | 0644, 0);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->uid, 1234u);
    EXPECT_EQ(f->gid, 5678u);
  }
  // Out of the scope the client's own identity (root) is back.
  auto g = client_->MknodAt(IdOf(*d), "y", S_IFREG | 0644, 0);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->uid, 0u);
}

// Locks held by the MDS are coherent between two clients (two sessions) and are released
// when the holder's session closes.
TEST_F(FidOpsTest, LocksConflictAcrossClientsAndDieWithTheSession) {
  FileStat attr;
  auto f = client_->CreateAt(root_, "locked", O_CREAT | O_RDWR, 0644, &attr);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const FileId id = IdOf(attr);
  auto other = cluster_->NewClient(ClientOptions{});
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  LockRange w{LockType::kExclusive, 10, 19, 42};
  auto r = client_->LockAt(id, LockKind::kPosix, 1, w, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r);
  LockRange conflict;
  r = (*other)->LockAt(id, LockKind::kPosix, 1, LockRange{LockType::kShared, 0, 10, 7}, &conflict);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_EQ(conflict.type, LockType::kExclusive);
  EXPECT_EQ(conflict.start, 10u);
  EXPECT_EQ(conflict.end, 19u);
  EXPECT_EQ(conflict.pid, 42u);
  r = (*other)->TestLockAt(id, LockKind::kPosix, 1, LockRange{LockType::kShared, 20, UINT64_MAX},
                           &conflict);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  r = (*other)->LockAt(id, LockKind::kFlock, 1, LockRange{LockType::kExclusive}, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);  // flock and POSIX locks do not conflict
  r = client_->LockAt(id, LockKind::kFlock, 9, LockRange{LockType::kShared}, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  other->reset();  // closes its session: its flock lock goes
  r = client_->LockAt(id, LockKind::kFlock, 9, LockRange{LockType::kShared}, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  EXPECT_FALSE(
      client_->LockAt(id, LockKind::kPosix, 1, LockRange{LockType::kShared, 5, 4}, nullptr).ok());
  ASSERT_TRUE((*f)->Close().ok());
}

// OpenResolved: a file read from a layout resolved earlier needs no MDS at all (the MDS is
// stopped while it reads), and a file removed since fails with kStale instead of reading zeros.
TEST(OpenResolvedTest, ReadsWithoutTheMdsAndFailsStaleOnceTheFileIsGone) {
  auto c = MiniCluster::Start({.num_oss = 2, .osts_per_oss = 1, .mds_in_memory = true});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto cluster = std::move(*c);
  auto cl = cluster->NewClient({});
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  auto client = std::move(*cl);
  FileLayout striped;
  striped.pattern = 1;
  LayoutComponent comp;
  comp.stripe_size = 64 << 10;
  comp.stripe_count = 2;
  striped.components.push_back(comp);
  OpenOptions oo;
  oo.layout = &striped;
  std::string data((1 << 20) + 4321, '\0');
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<char>((i * 131 + i / 4096) & 0xff);
  for (const char* name : {"/kept", "/gone"}) {
    auto f = client->Open(name, O_CREAT | O_WRONLY, 0644, oo);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->Pwrite(data.data(), data.size(), 0).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  struct Resolved {
    FileId id;
    FileLayout layout;
    uint64_t size;
  };
  auto resolve = [&](const std::string& path) {
    auto st = client->Stat(path);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    auto layout = client->GetLayoutAt(IdOf(*st));
    EXPECT_TRUE(layout.ok()) << layout.status().ToString();
    EXPECT_EQ(layout->components.at(0).osts.size(), 2u);
    return Resolved{IdOf(*st), *layout, st->size};
  };
  const Resolved kept = resolve("/kept");
  const Resolved gone = resolve("/gone");

  // A malformed layout is refused up front.
  FileLayout bad = kept.layout;
  bad.components[0].stripe_size = 1000;
  EXPECT_EQ(client->OpenResolved(kept.id, bad, kept.size, "/kept").status().code(),
            StatusCode::kInvalidArgument);

  // Removed: once its objects are destroyed, a read names the file and says kStale.
  ASSERT_TRUE(client->Unlink("/gone").ok());
  Status stale;
  for (int i = 0; i < 200 && stale.ok(); ++i) {
    auto f = client->OpenResolved(gone.id, gone.layout, gone.size, "/gone");
    ASSERT_TRUE(f.ok());
    std::string buf(4096, '\0');
    auto n = (*f)->Pread(buf.data(), buf.size(), 0);
    if (n.ok()) {
      ::usleep(50 * 1000);  // the OSTs destroy objects in the background
      continue;
    }
    stale = n.status();
  }
  EXPECT_EQ(stale.code(), StatusCode::kStale) << stale.ToString();
  EXPECT_NE(stale.message().find("/gone"), std::string::npos) << stale.ToString();

  ASSERT_TRUE(cluster->StopMds().ok());
  auto f = client->OpenResolved(kept.id, kept.layout, kept.size, "/kept");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::string got(data.size() + 100, '\0');
  auto n = (*f)->Pread(got.data(), got.size(), 0);  // clipped to the resolved size
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, data.size());
  got.resize(*n);
  EXPECT_TRUE(got == data);
  std::string mid(200000, '\0');  // spans stripes on both OSTs
  n = (*f)->Pread(mid.data(), mid.size(), 60000);
  ASSERT_TRUE(n.ok());
  EXPECT_TRUE(mid == data.substr(60000, 200000));
  EXPECT_EQ((*f)->Pread(mid.data(), 10, data.size()).value_or(99), 0u);
  EXPECT_FALSE((*f)->Pwrite("x", 1, 0).ok());  // read-only
  EXPECT_TRUE((*f)->Close().ok());             // no MDS needed to close either
  ASSERT_TRUE(cluster->RestartMds().ok());
}

}  // namespace
// dir_attr_cache_ms: a directory's attributes as this client's own create/mkdir/unlink in it
// returned them are served without an MDS round trip (the MDS may even be down), reflect the
// change (mtime, nlink), and any other mutation of this client drops them.
TEST(DirAttrCacheTest, OwnMutationsServeTheParentsAttributes) {
  auto cluster = MiniCluster::Start({.num_oss = 1, .osts_per_oss = 1}).value();
  ClientOptions o;
  o.dir_attr_cache_ms = 60000;
  o.ost_retry_ms = 200;  // calls the MDS must answer fail fast while it is stopped
  auto client = cluster->NewClient(o).value();
  const FileId root = client->RootId();
  auto d = client->MkdirAt(root, "d", 0755);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const FileId dir = IdOf(*d);
  auto before = client->GetAttrAt(dir);
  ASSERT_TRUE(before.ok());
  ::usleep(2000);
  ASSERT_TRUE(client->CreateAt(dir, "f", O_WRONLY | O_EXCL, 0644, nullptr).ok());
  auto sub = client->MkdirAt(dir, "sub", 0755);
  ASSERT_TRUE(sub.ok());
  auto f2 = client->CreateAt(dir, "f2", O_WRONLY | O_EXCL, 0644, nullptr);
  ASSERT_TRUE(f2.ok());
  EXPECT_TRUE((*f2)->FlushIfIdle().has_value());  // nothing written yet: nothing to flush
  ASSERT_TRUE((*f2)->Pwrite("data", 4, 0).ok());
  EXPECT_FALSE((*f2)->FlushIfIdle().has_value());  // buffered bytes and a size to publish
  ASSERT_TRUE((*f2)->Flush().ok());
  auto idle = (*f2)->FlushIfIdle();
  ASSERT_TRUE(idle.has_value());
  EXPECT_TRUE(idle->ok());
  ASSERT_TRUE((*f2)->Close().ok());  // a file's close and size update leave directories alone
  ASSERT_TRUE(cluster->StopMds().ok());
  ASSERT_TRUE(client->CachedAttrAt(dir).has_value());
  EXPECT_FALSE(client->CachedAttrAt(IdOf(*sub)).has_value());
  auto cached = client->GetAttrAt(dir);  // no MDS needed
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  EXPECT_EQ(cached->nlink, 3u);  // the new subdirectory counts
  EXPECT_GT(std::make_pair(cached->mtime_sec, cached->mtime_nsec),
            std::make_pair(before->mtime_sec, before->mtime_nsec));
  EXPECT_FALSE(client->GetAttrAt(IdOf(*sub)).ok());  // nothing cached for other directories
  ASSERT_TRUE(cluster->RestartMds().ok());

  // Unlink and rmdir leave the directory's new attributes too.
  ASSERT_TRUE(client->UnlinkAt(dir, "f").ok());
  ASSERT_TRUE(client->UnlinkAt(dir, "f2").ok());
  ASSERT_TRUE(client->RmdirAt(dir, "sub").ok());
  auto after = client->GetAttrAt(dir);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->nlink, 2u);

  // Any other mutation drops them: a chmod of the directory is seen at once.
  SetAttrRequest chmod;
  chmod.set_mode = true;
  chmod.mode = 0700;
  ASSERT_TRUE(client->SetAttrAt(dir, chmod).ok());
  EXPECT_FALSE(client->CachedAttrAt(dir).has_value());
  EXPECT_EQ(client->GetAttrAt(dir)->mode & 07777, 0700u);

  // Off by default: a client without it always asks the MDS.
  ClientOptions po;
  po.ost_retry_ms = 200;
  auto plain = cluster->NewClient(po).value();
  ASSERT_TRUE(plain->CreateAt(dir, "g", O_WRONLY | O_EXCL, 0644, nullptr).ok());
  ASSERT_TRUE(cluster->StopMds().ok());
  EXPECT_FALSE(plain->GetAttrAt(dir).ok());
  ASSERT_TRUE(cluster->RestartMds().ok());
}

}  // namespace ciuic::testing
