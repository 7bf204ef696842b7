// MetaService namespace operations over both stores: names, files, directories, links,
// symlinks, path resolution, attributes, permissions and xattrs.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <atomic>
#include <future>
#include <thread>

#include "meta/meta_test_util.h"

namespace ciuic::meta::testing {
namespace {

template <typename B>
class NamespaceTest : public MetaTest<B> {};
TYPED_TEST_SUITE(NamespaceTest, Backends);

TYPED_TEST(NamespaceTest, RootIsADirectoryWithSeqOne) {
  auto a = this->GetAttr(this->root());
  ASSERT_OK(a);
  EXPECT_TRUE(S_ISDIR(a->attr().mode()));
  EXPECT_EQ(a->attr().fid().seq(), 1u);
  EXPECT_EQ(a->attr().nlink(), 2u);
}

TYPED_TEST(NamespaceTest, CreateThenLookupAndGetAttr) {
  auto c = this->Create(this->Pub(), "f", 0640, Ctx(1000, 100));
  ASSERT_OK(c);
  EXPECT_TRUE(c->created());
  EXPECT_TRUE(S_ISREG(c->attr().mode()));
  EXPECT_EQ(c->attr().mode() & 07777, 0640u);
  EXPECT_EQ(c->attr().uid(), 1000u);
  EXPECT_EQ(c->attr().gid(), 100u);
  EXPECT_EQ(c->attr().nlink(), 1u);
  EXPECT_GT(c->attr().fid().seq(), 1u);
  auto l = this->Lookup(this->Pub(), "f");
  ASSERT_OK(l);
  EXPECT_EQ(F(l->attr().fid()), F(c->attr().fid()));
  auto g = this->GetAttr(c->attr().fid());
  ASSERT_OK(g);
  EXPECT_EQ(g->attr().mode(), c->attr().mode());
  EXPECT_CODE(this->Lookup(this->root(), "missing"), kNotFound);
}

TYPED_TEST(NamespaceTest, ExclusiveCreateOfExistingNameFailsPlainCreateOpensIt) {
  auto c = this->Create(this->root(), "f");
  ASSERT_OK(c);
  EXPECT_CODE(this->Create(this->root(), "f"), kAlreadyExists);
  auto again = this->Create(this->root(), "f", 0644, Ctx(), /*exclusive=*/false);
  ASSERT_OK(again);
  EXPECT_FALSE(again->created());
  EXPECT_EQ(F(again->attr().fid()), F(c->attr().fid()));
  ASSERT_OK(this->Mkdir(this->root(), "d"));
  EXPECT_CODE(this->Create(this->root(), "d", 0644, Ctx(), false), kIsADirectory);
}

TYPED_TEST(NamespaceTest, CreateNeedsAnExistingDirectoryParent) {
  pb::Fid nowhere = PbFid(Fid{999999, 0, 0});
  EXPECT_CODE(this->Create(nowhere, "f"), kNotFound);
  auto f = this->Create(this->root(), "file");
  ASSERT_OK(f);
  EXPECT_CODE(this->Create(f->attr().fid(), "x"), kNotADirectory);
  EXPECT_CODE(this->Mkdir(f->attr().fid(), "x"), kNotADirectory);
}

TYPED_TEST(NamespaceTest, NameRules) {
  EXPECT_CODE(this->Create(this->root(), ""), kInvalidArgument);
  EXPECT_CODE(this->Create(this->root(), "."), kInvalidArgument);
  EXPECT_CODE(this->Create(this->root(), ".."), kInvalidArgument);
  EXPECT_CODE(this->Mkdir(this->root(), "a/b"), kInvalidArgument);
  EXPECT_CODE(this->Create(this->root(), std::string("a\0b", 3)), kInvalidArgument);
  EXPECT_CODE(this->Create(this->root(), std::string(256, 'n')), kNameTooLong);
  auto bad = this->Create(this->root(), std::string(256, 'n'));
  EXPECT_NE(bad.status().message().find("256"), std::string::npos) << bad.status().ToString();
  ASSERT_OK(this->Create(this->root(), std::string(255, 'n')));
  EXPECT_CODE(this->Unlink(this->root(), "."), kInvalidArgument);
  EXPECT_CODE(this->Rename(this->root(), std::string(255, 'n'), this->root(), ".."),
              kInvalidArgument);
  // "." and ".." may be looked up.
  auto d = this->Mkdir(this->root(), "d");
  ASSERT_OK(d);
  auto dot = this->Lookup(d->attr().fid(), ".");
  ASSERT_OK(dot);
  EXPECT_EQ(F(dot->attr().fid()), F(d->attr().fid()));
  auto dotdot = this->Lookup(d->attr().fid(), "..");
  ASSERT_OK(dotdot);
  EXPECT_EQ(F(dotdot->attr().fid()), kRootFid);
  auto rootup = this->Lookup(this->root(), "..");
  ASSERT_OK(rootup);
  EXPECT_EQ(F(rootup->attr().fid()), kRootFid);
}

TYPED_TEST(NamespaceTest, MknodMakesSpecialFilesAsMetadata) {
  auto fifo = this->Create(this->Pub(), "fifo", S_IFIFO | 0600, Ctx(1000, 1000));
  ASSERT_OK(fifo);
  EXPECT_TRUE(S_ISFIFO(fifo->attr().mode()));
  EXPECT_EQ(fifo->layout().components_size(), 0);
  auto sock = this->Create(this->Pub(), "sock", S_IFSOCK | 0600, Ctx(1000, 1000));
  ASSERT_OK(sock);
  EXPECT_TRUE(S_ISSOCK(sock->attr().mode()));
  EXPECT_CODE(this->Create(this->Pub(), "chr", S_IFCHR | 0600, Ctx(1000, 1000)), kNotPermitted);
  pb::CreateReq q;
  *q.mutable_ctx() = Ctx();
  *q.mutable_parent() = this->root();
  q.set_name("chr");
  q.set_mode(S_IFCHR | 0600);
  q.set_rdev(makedev(1, 3));
  auto chr = this->svc().Create(q);
  ASSERT_OK(chr);
  EXPECT_TRUE(S_ISCHR(chr->attr().mode()));
  EXPECT_EQ(chr->attr().rdev(), makedev(1, 3));
  EXPECT_CODE(this->Create(this->root(), "d", S_IFDIR | 0755), kInvalidArgument);
}

TYPED_TEST(NamespaceTest, MkdirRmdirKeepLinkCounts) {
  auto a = this->Mkdir(this->root(), "a");
  ASSERT_OK(a);
  EXPECT_EQ(a->attr().nlink(), 2u);
  EXPECT_EQ(this->GetAttr(this->root())->attr().nlink(), 3u);
  ASSERT_OK(this->Mkdir(a->attr().fid(), "b"));
  EXPECT_EQ(this->GetAttr(a->attr().fid())->attr().nlink(), 3u);
  EXPECT_CODE(this->Mkdir(this->root(), "a"), kAlreadyExists);
  EXPECT_CODE(this->Unlink(this->root(), "a", true), kNotEmpty);
  EXPECT_CODE(this->Unlink(this->root(), "a", false), kIsADirectory);
  ASSERT_OK(this->Create(a->attr().fid(), "f"));
  EXPECT_CODE(this->Unlink(a->attr().fid(), "f", true), kNotADirectory);
  ASSERT_OK(this->Unlink(a->attr().fid(), "f"));
  ASSERT_OK(this->Unlink(a->attr().fid(), "b", true));
  ASSERT_OK(this->Unlink(this->root(), "a", true));
  EXPECT_EQ(this->GetAttr(this->root())->attr().nlink(), 2u);
  EXPECT_CODE(this->GetAttr(a->attr().fid()), kNotFound);
  EXPECT_CODE(this->Unlink(this->root(), "a", true), kNotFound);
}

TYPED_TEST(NamespaceTest, DirectoryTimesChangeWithEntries) {
  auto before = this->GetAttr(this->root())->attr();
  ASSERT_OK(this->Create(this->root(), "f"));
  auto after = this->GetAttr(this->root())->attr();
  EXPECT_TRUE(after.mtime().sec() > before.mtime().sec() ||
              (after.mtime().sec() == before.mtime().sec() &&
               after.mtime().nsec() >= before.mtime().nsec()));
  EXPECT_EQ(after.mtime().sec(), after.ctime().sec());
  EXPECT_EQ(after.mtime().nsec(), after.ctime().nsec());
}

TYPED_TEST(NamespaceTest, SymlinkAndReadlink) {
  pb::SymlinkReq q;
  *q.mutable_ctx() = Ctx(1000, 1000);
  *q.mutable_parent() = this->Pub();
  q.set_name("ln");
  q.set_target("some/where");
  auto s = this->svc().Symlink(q);
  ASSERT_OK(s);
  EXPECT_TRUE(S_ISLNK(s->attr().mode()));
  EXPECT_EQ(s->attr().size(), 10u);
  pb::ReadlinkReq r;
  *r.mutable_fid() = s->attr().fid();
  auto t = this->svc().Readlink(r);
  ASSERT_OK(t);
  EXPECT_EQ(t->target(), "some/where");
  auto f = this->Create(this->root(), "f");
  *r.mutable_fid() = f->attr().fid();
  EXPECT_CODE(this->svc().Readlink(r), kInvalidArgument);
  q.set_name("empty");
  q.set_target("");
  EXPECT_CODE(this->svc().Symlink(q), kInvalidArgument);
  q.set_target(std::string(4097, 'x'));
  EXPECT_CODE(this->svc().Symlink(q), kNameTooLong);
}

TYPED_TEST(NamespaceTest, HardLinksShareTheInode) {
  auto f = this->Create(this->root(), "f");
  ASSERT_OK(f);
  auto d = this->Mkdir(this->root(), "d");
  pb::LinkReq q;
  *q.mutable_ctx() = Ctx();
  *q.mutable_fid() = f->attr().fid();
  *q.mutable_new_parent() = d->attr().fid();
  q.set_new_name("g");
  auto l = this->svc().Link(q);
  ASSERT_OK(l);
  EXPECT_EQ(l->attr().nlink(), 2u);
  EXPECT_CODE(this->svc().Link(q), kAlreadyExists);
  ASSERT_OK(this->Unlink(this->root(), "f"));
  auto g = this->Lookup(d->attr().fid(), "g");
  ASSERT_OK(g);
  EXPECT_EQ(F(g->attr().fid()), F(f->attr().fid()));
  EXPECT_EQ(g->attr().nlink(), 1u);
  *q.mutable_fid() = d->attr().fid();
  q.set_new_name("dirlink");
  EXPECT_CODE(this->svc().Link(q), kNotPermitted);
  ASSERT_OK(this->Unlink(d->attr().fid(), "g"));
  EXPECT_CODE(this->GetAttr(f->attr().fid()), kNotFound);
}

TYPED_TEST(NamespaceTest, ResolvePathWalksDirectoriesAndSymlinks) {
  auto a = this->Mkdir(this->root(), "a");
  auto b = this->Mkdir(a->attr().fid(), "b");
  auto f = this->Create(b->attr().fid(), "f");
  ASSERT_OK(f);
  auto r = this->Resolve("/a/b/f");
  ASSERT_OK(r);
  EXPECT_EQ(F(r->attr().fid()), F(f->attr().fid()));
  EXPECT_EQ(F(r->parent()), F(b->attr().fid()));
  EXPECT_EQ(F(this->Resolve("a//b/./f")->attr().fid()), F(f->attr().fid()));
  EXPECT_EQ(F(this->Resolve("/a/b/../b/f")->attr().fid()), F(f->attr().fid()));
  EXPECT_EQ(F(this->Resolve("/")->attr().fid()), kRootFid);
  EXPECT_EQ(F(this->Resolve("/..")->attr().fid()), kRootFid);
  EXPECT_CODE(this->Resolve("/a/b/f/"), kNotADirectory);
  EXPECT_CODE(this->Resolve("/a/b/f/x"), kNotADirectory);
  EXPECT_CODE(this->Resolve("/a/nope/f"), kNotFound);

  pb::SymlinkReq s;
  *s.mutable_ctx() = Ctx();
  *s.mutable_parent() = this->root();
  s.set_name("rel");
  s.set_target("a/b");  // relative to the directory holding the link
  ASSERT_OK(this->svc().Symlink(s));
  s.set_name("abs");
  s.set_target("/a/b/f");
  auto abs = this->svc().Symlink(s);
  ASSERT_OK(abs);
  EXPECT_EQ(F(this->Resolve("/rel/f")->attr().fid()), F(f->attr().fid()));
  EXPECT_EQ(F(this->Resolve("/abs", true)->attr().fid()), F(f->attr().fid()));
  EXPECT_EQ(F(this->Resolve("/abs", false)->attr().fid()), F(abs->attr().fid()));
  s.set_name("loop1");
  s.set_target("/loop2");
  ASSERT_OK(this->svc().Symlink(s));
  s.set_name("loop2");
  s.set_target("loop1/x");
  ASSERT_OK(this->svc().Symlink(s));
  EXPECT_CODE(this->Resolve("/loop1"), kLoop);
  EXPECT_CODE(this->Resolve(std::string(5000, 'a')), kNameTooLong);
}

TYPED_TEST(NamespaceTest, ResolvePathChecksSearchPermission) {
  auto d = this->Mkdir(this->root(), "private", 0700);
  ASSERT_OK(this->Create(d->attr().fid(), "f"));
  EXPECT_CODE(this->Resolve("/private/f", true, Ctx(1000, 1000)), kPermissionDenied);
  EXPECT_CODE(this->Lookup(d->attr().fid(), "f", Ctx(1000, 1000)), kPermissionDenied);
  ASSERT_OK(this->Resolve("/private/f", true, Ctx(0, 0)));
}

TYPED_TEST(NamespaceTest, ResolvePathCanOpen) {
  pb::OpenSessionReq os;
  auto sess = this->svc().OpenSession(os);
  ASSERT_OK(sess);
  ASSERT_OK(this->Create(this->root(), "f"));
  pb::ResolvePathReq q;
  *q.mutable_ctx() = Ctx();
  q.mutable_ctx()->set_session_id(sess->session_id());
  q.set_path("/f");
  q.set_open(true);
  q.set_open_flags(O_RDWR);
  auto r = this->svc().ResolvePath(q);
  ASSERT_OK(r);
  EXPECT_NE(r->open_id(), 0u);
  q.set_open_flags(O_RDWR | O_TRUNC);  // punches cannot travel here: falls back to OpenReq
  auto t = this->svc().ResolvePath(q);
  ASSERT_OK(t);
  EXPECT_EQ(t->open_id(), 0u);
}

TYPED_TEST(NamespaceTest, PermissionsOfCreateAndUnlink) {
  const auto alice = Ctx(1000, 1000);
  const auto bob = Ctx(1001, 1001);
  EXPECT_CODE(this->Create(this->root(), "x", 0644, alice), kPermissionDenied);
  auto home = this->Mkdir(this->root(), "home", 0755);
  pb::SetAttrReq chown;
  *chown.mutable_ctx() = Ctx();
  *chown.mutable_fid() = home->attr().fid();
  chown.set_valid(2 | 4);
  chown.set_uid(1000);
  chown.set_gid(1000);
  ASSERT_OK(this->svc().SetAttr(chown));
  ASSERT_OK(this->Create(home->attr().fid(), "mine", 0644, alice));
  EXPECT_CODE(this->Create(home->attr().fid(), "his", 0644, bob), kPermissionDenied);
  EXPECT_CODE(this->Unlink(home->attr().fid(), "mine", false, bob), kPermissionDenied);
  ASSERT_OK(this->Unlink(home->attr().fid(), "mine", false, alice));
}

TYPED_TEST(NamespaceTest, StickyDirectoryProtectsOthersEntries) {
  auto tmp = this->Mkdir(this->root(), "tmp", 01777);
  ASSERT_OK(tmp);
  const auto alice = Ctx(1000, 1000);
  const auto bob = Ctx(1001, 1001);
  ASSERT_OK(this->Create(tmp->attr().fid(), "a", 0666, alice));
  EXPECT_CODE(this->Unlink(tmp->attr().fid(), "a", false, bob), kNotPermitted);
  EXPECT_CODE(this->Rename(tmp->attr().fid(), "a", tmp->attr().fid(), "b", 0, bob), kNotPermitted);
  ASSERT_OK(this->Create(tmp->attr().fid(), "c", 0666, bob));
  // Bob may not replace Alice's entry by renaming over it either.
  ASSERT_OK(this->Rename(tmp->attr().fid(), "c", tmp->attr().fid(), "d", 0, bob));
  EXPECT_CODE(this->Rename(tmp->attr().fid(), "d", tmp->attr().fid(), "a", 0, bob), kNotPermitted);
  ASSERT_OK(this->Unlink(tmp->attr().fid(), "a", false, alice));
  ASSERT_OK(this->Unlink(tmp->attr().fid(), "d", false, Ctx()));  // root may
}

TYPED_TEST(NamespaceTest, SetgidDirectoryGivesItsGroup) {
  auto d = this->Mkdir(this->root(), "shared", 02777);
  pb::SetAttrReq q;
  *q.mutable_ctx() = Ctx();
  *q.mutable_fid() = d->attr().fid();
  q.set_valid(4);
  q.set_gid(500);
  ASSERT_OK(this->svc().SetAttr(q));
  auto f = this->Create(d->attr().fid(), "f", 0644, Ctx(1000, 1000));
  ASSERT_OK(f);
  EXPECT_EQ(f->attr().gid(), 500u);
  auto sub = this->Mkdir(d->attr().fid(), "sub", 0755, Ctx(1000, 1000));
  ASSERT_OK(sub);
  EXPECT_EQ(sub->attr().gid(), 500u);
  EXPECT_TRUE(sub->attr().mode() & S_ISGID);
}

TYPED_TEST(NamespaceTest, ChmodChownRules) {
  auto home = this->Mkdir(this->root(), "h", 0777);
  const auto alice = Ctx(1000, 1000, {1000, 2000});
  auto f = this->Create(home->attr().fid(), "f", 0644, alice);
  ASSERT_OK(f);
  pb::SetAttrReq q;
  *q.mutable_fid() = f->attr().fid();
  q.set_valid(1);
  q.set_mode(0600);
  *q.mutable_ctx() = Ctx(1001, 1001);
  EXPECT_CODE(this->svc().SetAttr(q), kNotPermitted);
  *q.mutable_ctx() = alice;
  auto r = this->svc().SetAttr(q);
  ASSERT_OK(r);
  EXPECT_EQ(r->attr().mode(), S_IFREG | 0600u);
  q.set_valid(2);
  q.set_uid(1001);
  EXPECT_CODE(this->svc().SetAttr(q), kNotPermitted);
  q.set_valid(4);
  q.set_gid(2000);  // one of Alice's groups
  ASSERT_OK(this->svc().SetAttr(q));
  q.set_gid(3000);  // not hers
  EXPECT_CODE(this->svc().SetAttr(q), kNotPermitted);
  // Root may chown; a change of owner clears set-user-ID.
  q.set_valid(1);
  q.set_mode(04755);
  ASSERT_OK(this->svc().SetAttr(q));
  *q.mutable_ctx() = Ctx();
  q.set_valid(2);
  q.set_uid(1001);
  auto c = this->svc().SetAttr(q);
  ASSERT_OK(c);
  EXPECT_EQ(c->attr().uid(), 1001u);
  EXPECT_EQ(c->attr().mode() & 07777, 0755u);
}

// The node cache opt-out (docs/design.md "Node cache"): set by the owner or root on a file or a
// directory, kept in the attributes every open returns, and inherited by new entries of an
// excluded directory (files, directories, symbolic links); existing entries keep theirs.
TYPED_TEST(NamespaceTest, NodeCacheOptOutIsTheOwnersAndNewEntriesInheritIt) {
  const auto alice = Ctx(1000, 1000);
  auto top = this->Mkdir(this->root(), "nc", 0777);
  ASSERT_OK(top);
  auto home = this->Mkdir(top->attr().fid(), "a", 0755, alice);
  ASSERT_OK(home);
  auto before = this->Create(home->attr().fid(), "before", 0644, alice);
  ASSERT_OK(before);
  EXPECT_FALSE(before->attr().no_node_cache());
  pb::SetAttrReq q;
  *q.mutable_fid() = home->attr().fid();
  q.set_valid(512);
  q.set_no_node_cache(true);
  *q.mutable_ctx() = Ctx(1001, 1001);
  EXPECT_CODE(this->svc().SetAttr(q), kNotPermitted);
  *q.mutable_ctx() = alice;
  auto r = this->svc().SetAttr(q);
  ASSERT_OK(r);
  EXPECT_TRUE(r->attr().no_node_cache());
  auto f = this->Create(home->attr().fid(), "f", 0644, alice);
  auto d = this->Mkdir(home->attr().fid(), "d", 0755, alice);
  ASSERT_OK(f);
  ASSERT_OK(d);
  EXPECT_TRUE(f->attr().no_node_cache());
  EXPECT_TRUE(d->attr().no_node_cache());
  auto g = this->Create(d->attr().fid(), "g", 0644, alice);
  ASSERT_OK(g);
  EXPECT_TRUE(g->attr().no_node_cache());
  EXPECT_FALSE(this->GetAttr(before->attr().fid())->attr().no_node_cache());
  EXPECT_TRUE(this->GetAttr(f->attr().fid())->attr().no_node_cache());
  // Root includes the directory again: entries made from then on are cached.
  *q.mutable_ctx() = Ctx();
  q.set_no_node_cache(false);
  ASSERT_OK(this->svc().SetAttr(q));
  auto h = this->Create(home->attr().fid(), "h", 0644, alice);
  ASSERT_OK(h);
  EXPECT_FALSE(h->attr().no_node_cache());
}

TYPED_TEST(NamespaceTest, UtimesRulesAndPrecision) {
  auto home = this->Mkdir(this->root(), "h", 0777);
  auto f = this->Create(home->attr().fid(), "f", 0666, Ctx(1000, 1000));
  pb::SetAttrReq q;
  *q.mutable_fid() = f->attr().fid();
  *q.mutable_ctx() = Ctx(1000, 1000);
  q.set_valid(16 | 32);
  q.mutable_atime()->set_sec(int64_t{1} << 40);  // far past 2038
  q.mutable_atime()->set_nsec(123456789);
  q.mutable_mtime()->set_sec(-5);
  q.mutable_mtime()->set_nsec(999999999);
  auto r = this->svc().SetAttr(q);
  ASSERT_OK(r);
  EXPECT_EQ(r->attr().atime().sec(), int64_t{1} << 40);
  EXPECT_EQ(r->attr().atime().nsec(), 123456789u);
  EXPECT_EQ(r->attr().mtime().sec(), -5);
  EXPECT_EQ(r->attr().mtime().nsec(), 999999999u);
  // Someone else with write permission may set "now" but not explicit times.
  *q.mutable_ctx() = Ctx(1001, 1001);
  EXPECT_CODE(this->svc().SetAttr(q), kNotPermitted);
  q.set_valid(16 | 32 | 64 | 128);
  auto now = this->svc().SetAttr(q);
  ASSERT_OK(now);
  EXPECT_GT(now->attr().mtime().sec(), 1000000000);
  // Without write permission not even "now".
  pb::SetAttrReq chmod;
  *chmod.mutable_ctx() = Ctx(1000, 1000);
  *chmod.mutable_fid() = f->attr().fid();
  chmod.set_valid(1);
  chmod.set_mode(0644);
  ASSERT_OK(this->svc().SetAttr(chmod));
  EXPECT_CODE(this->svc().SetAttr(q), kPermissionDenied);
  *q.mutable_ctx() = Ctx(1000, 1000);
  q.set_valid(16);
  q.mutable_atime()->set_nsec(1000000000);
  EXPECT_CODE(this->svc().SetAttr(q), kInvalidArgument);
}

TYPED_TEST(NamespaceTest, Xattrs) {
  auto f = this->Create(this->Pub(), "f", 0644, Ctx(1000, 1000));
  ASSERT_OK(f);
  pb::SetXattrReq s;
  *s.mutable_ctx() = Ctx(1000, 1000);
  *s.mutable_fid() = f->attr().fid();
  s.set_name("user.a");
  s.set_value(std::string("v\0v", 3));
  ASSERT_OK(this->svc().SetXattr(s));
  s.set_flags(1);  // XATTR_CREATE
  EXPECT_CODE(this->svc().SetXattr(s), kAlreadyExists);
  s.set_flags(2);  // XATTR_REPLACE
  s.set_name("user.b");
  EXPECT_CODE(this->svc().SetXattr(s), kNotFound);
  s.set_flags(0);
  s.set_value(std::string(64 * 1024, 'x'));
  ASSERT_OK(this->svc().SetXattr(s));
  s.set_value(std::string(64 * 1024 + 1, 'x'));
  EXPECT_CODE(this->svc().SetXattr(s), kInvalidArgument);
  s.set_value("v");
  s.set_name("user." + std::string(251, 'n'));
  EXPECT_CODE(this->svc().SetXattr(s), kNameTooLong);
  s.set_name("trusted.x");
  EXPECT_CODE(this->svc().SetXattr(s), kNotPermitted);
  s.set_name("weird.x");
  EXPECT_CODE(this->svc().SetXattr(s), kNotSupported);
  s.set_name("user.c");
  *s.mutable_ctx() = Ctx(1001, 1001);  // no write permission
  EXPECT_CODE(this->svc().SetXattr(s), kPermissionDenied);

  pb::GetXattrReq g;
  *g.mutable_ctx() = Ctx(1001, 1001);
  *g.mutable_fid() = f->attr().fid();
  g.set_name("user.a");
  auto v = this->svc().GetXattr(g);
  ASSERT_OK(v);
  EXPECT_EQ(v->value(), std::string("v\0v", 3));
  g.set_name("user.zz");
  EXPECT_CODE(this->svc().GetXattr(g), kNotFound);
  pb::ListXattrReq l;
  *l.mutable_fid() = f->attr().fid();
  auto names = this->svc().ListXattr(l);
  ASSERT_OK(names);
  ASSERT_EQ(names->names_size(), 2);
  EXPECT_EQ(names->names(0), "user.a");
  EXPECT_EQ(names->names(1), "user.b");
  pb::RemoveXattrReq rm;
  *rm.mutable_ctx() = Ctx(1000, 1000);
  *rm.mutable_fid() = f->attr().fid();
  rm.set_name("user.a");
  ASSERT_OK(this->svc().RemoveXattr(rm));
  EXPECT_CODE(this->svc().RemoveXattr(rm), kNotFound);
  // Xattrs go with the inode.
  EXPECT_EQ(this->CountCf(Cf::kXattrs), 1u);
  ASSERT_OK(this->Unlink(this->Pub(), "f"));
  EXPECT_EQ(this->CountCf(Cf::kXattrs), 0u);
}

TYPED_TEST(NamespaceTest, NamespacePersistsAcrossReopenAndFidsAreNeverReused) {
  auto d = this->Mkdir(this->root(), "d");
  auto f = this->Create(d->attr().fid(), "f");
  ASSERT_OK(f);
  uint64_t max_seq = f->attr().fid().seq();
  ASSERT_OK(this->Unlink(d->attr().fid(), "f"));
  this->Reopen();
  auto l = this->Lookup(this->root(), "d");
  ASSERT_OK(l);
  EXPECT_EQ(F(l->attr().fid()), F(d->attr().fid()));
  EXPECT_CODE(this->Lookup(d->attr().fid(), "f"), kNotFound);
  auto g = this->Create(d->attr().fid(), "g");
  ASSERT_OK(g);
  EXPECT_GT(g->attr().fid().seq(), max_seq);
  this->Reopen();
  auto h = this->Create(d->attr().fid(), "h");
  ASSERT_OK(h);
  EXPECT_GT(h->attr().fid().seq(), g->attr().fid().seq());
}

TYPED_TEST(NamespaceTest, StatfsCountsInodesAndSharedDevicesOnce) {
  pb::StatfsReq q;
  auto s0 = this->svc().Statfs(q);
  ASSERT_OK(s0);
  const uint64_t free0 = s0->free_inodes();
  ASSERT_OK(this->Create(this->root(), "a"));
  ASSERT_OK(this->Mkdir(this->root(), "b"));
  EXPECT_EQ(this->svc().Statfs(q)->free_inodes(), free0 - 2);
  ASSERT_OK(this->Unlink(this->root(), "a"));
  EXPECT_EQ(this->svc().Statfs(q)->free_inodes(), free0 - 1);
  EXPECT_EQ(this->svc().Statfs(q)->name_max(), 255u);

  pb::RegisterOssReq r;
  r.set_oss_addr("oss:1");
  r.set_cluster_uuid("test-cluster");
  for (uint32_t i = 0; i < 3; ++i) {
    auto* o = r.add_osts();
    o->set_index(i);
    o->set_capacity(1000ull << 20);
    o->set_free(500ull << 20);
    o->set_device_id(i < 2 ? 7 : 8);  // OSTs 0 and 1 share one disk
  }
  ASSERT_OK(this->svc().RegisterOss(r));
  auto s = this->svc().Statfs(q);
  EXPECT_EQ(s->total_bytes(), 2000ull << 20);
  EXPECT_EQ(s->free_bytes(), 1000ull << 20);
}

TYPED_TEST(NamespaceTest, ConcurrentExclusiveCreatesOfOneNameHaveOneWinner) {
  constexpr int kThreads = 8;
  std::atomic<int> ok{0}, exists{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      for (int n = 0; n < 20; ++n) {
        auto r = this->Create(this->root(), fmt::format("race{}", n));
        if (r.ok()) {
          ++ok;
        } else if (r.status().code() == StatusCode::kAlreadyExists) {
          ++exists;
        }
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(ok.load(), 20);
  EXPECT_EQ(exists.load(), 20 * (kThreads - 1));
}

TYPED_TEST(NamespaceTest, AsyncMutationsAreGroupCommittedInOrder) {
  std::atomic<int> done{0};
  std::atomic<int> failed{0};
  constexpr int kN = 500;
  for (int i = 0; i < kN; ++i) {
    pb::MkdirReq q;
    *q.mutable_parent() = this->root();
    q.set_name(fmt::format("d{}", i));
    q.set_mode(0755);
    this->svc().MkdirAsync(q, [&](Result<pb::MkdirResp> r) {
      if (!r.ok())
        ++failed;
      ++done;
    });
  }
  // A blocking call queued after the async ones completes after them (one writer, in order).
  ASSERT_OK(this->Create(this->root(), "last"));
  EXPECT_EQ(done.load(), kN);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(this->GetAttr(this->root())->attr().nlink(), 2u + kN);
}

// With nothing queued, a mutation runs on the submitting thread (its done callback has run when
// the async call returns); an fsync mutation always goes to the writer thread; and while a group
// runs inline, a mutation submitted from elsewhere queues and still completes, in order.
TYPED_TEST(NamespaceTest, IdleMutationsRunInlineFsyncOnTheWriter) {
  const auto me = std::this_thread::get_id();
  // (The writer's periodic lease check can be running at that very moment: then the mutation
  // queues behind it, which is fine; try a few times.)
  int inline_runs = 0;
  for (int i = 0; i < 20 && inline_runs == 0; ++i) {
    std::promise<std::thread::id> ran;
    auto ran_on = ran.get_future();
    pb::MkdirReq m;
    *m.mutable_parent() = this->root();
    m.set_name(fmt::format("inline{}", i));
    m.set_mode(0755);
    this->svc().MkdirAsync(m, [&](Result<pb::MkdirResp> r) {
      EXPECT_TRUE(r.ok());
      ran.set_value(std::this_thread::get_id());
    });
    if (ran_on.wait_for(std::chrono::seconds(0)) == std::future_status::ready && ran_on.get() == me)
      ++inline_runs;
    else
      ran_on.wait();
  }
  EXPECT_EQ(inline_runs, 1);
  pb::MkdirReq q;
  *q.mutable_parent() = this->root();
  q.set_name("q");
  q.set_mode(0755);

  std::promise<std::thread::id> fsync_thread;
  pb::FsyncDirReq f;
  *f.mutable_fid() = this->root();
  this->svc().FsyncDirAsync(f, [&](Result<pb::FsyncDirResp> r) {
    EXPECT_TRUE(r.ok());
    fsync_thread.set_value(std::this_thread::get_id());
  });
  EXPECT_NE(fsync_thread.get_future().get(), me);

  // A done callback that blocks holds its group open (inline or on the writer): mutations from
  // other threads queue meanwhile, and all of them commit once it returns.
  std::promise<void> a_done;
  std::promise<void> release;
  auto released = release.get_future().share();
  std::atomic<int> later{0};
  std::thread other;
  pb::MkdirReq a = q;
  a.set_name("a");
  this->svc().MkdirAsync(a, [&](Result<pb::MkdirResp> r) {
    EXPECT_TRUE(r.ok());
    other = std::thread([&] {
      for (int i = 0; i < 5; ++i) {
        pb::MkdirReq b = q;
        b.set_name(fmt::format("b{}", i));
        this->svc().MkdirAsync(b, [&](Result<pb::MkdirResp> rb) {
          EXPECT_TRUE(rb.ok());
          ++later;
        });
      }
      release.set_value();
    });
    released.wait();  // the five are queued (none can run while this group is open)
    EXPECT_EQ(later.load(), 0);
    a_done.set_value();
  });
  a_done.get_future().wait();
  other.join();
  ASSERT_OK(this->Create(this->root(), "after"));  // queued behind the five: they are done
  EXPECT_EQ(later.load(), 5);
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(this->Lookup(this->root(), fmt::format("b{}", i)).ok()) << i;
}

}  // namespace
}  // namespace ciuic::meta::testing
