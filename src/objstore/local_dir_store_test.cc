// LocalDirStore beyond the contract suite: its on-disk form, durability, conflicts, files it
// must ignore, large directories, modes and the errors of a full or read-only file system.
#include "objstore/local_dir_store.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/fault.h"
#include "objstore/local_dir_internal.h"
#include "objstore/object_store_contract.h"

namespace ciuic::objstore {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes a file the way another tool would (no temp file, no fsync), making its parents.
void WriteFile(const std::string& path, std::string_view data, mode_t mode = 0644) {
  fs::create_directories(fs::path(path).parent_path());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ::close(fd);
  ::chmod(path.c_str(), mode);  // whatever the umask
}

// Every name in `dir`, hidden ones too, sorted.
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> ListKeys(ObjectStore& store, ListOptions opts) {
  std::vector<std::string> keys;
  for (;;) {
    Result<ListPage> page = store.List(opts);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    if (!page.ok()) {
      return keys;
    }
    for (const ObjectInfo& o : page->objects) {
      keys.push_back(o.key);
    }
    for (const std::string& p : page->prefixes) {
      keys.push_back(p);
    }
    if (page->next.empty()) {
      return keys;
    }
    opts.start = page->next;
  }
}

ListOptions Opts(std::string prefix, std::string delimiter = "", uint32_t max_keys = 1000) {
  ListOptions opts;
  opts.prefix = std::move(prefix);
  opts.delimiter = std::move(delimiter);
  opts.max_keys = max_keys;
  return opts;
}

// A tmpfs mounted for one test; where the process may not mount, ok() is false.
class ScopedTmpfs {
 public:
  ScopedTmpfs(const std::string& dir, const std::string& options, unsigned long flags) : dir_(dir) {
    fs::create_directories(dir);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", flags, options.c_str()) == 0) {
      mounted_ = true;
    } else {
      why_ = std::strerror(errno);
    }
  }
  ~ScopedTmpfs() {
    if (mounted_) {
      ::umount2(dir_.c_str(), MNT_DETACH);
    }
  }
  bool ok() const { return mounted_; }
  const std::string& why() const { return why_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string why_;
};

class LocalDirStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    root_ = tmp_.path() + "/store";
    Reopen();
  }

  void Reopen() {
    store_.reset();
    Result<std::unique_ptr<LocalDirStore>> store = LocalDirStore::Open(root_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }

  std::string P(std::string_view rel) const { return root_ + "/" + std::string(rel); }

  testing::TempDir tmp_;
  std::string root_;
  std::unique_ptr<LocalDirStore> store_;
};

TEST_F(LocalDirStoreTest, ObjectsArePlainFilesAtRootSlashKey) {
  CIUIC_ASSERT_OK(store_->Put("a/b/c.txt", "hello"));
  EXPECT_EQ(ReadFile(P("a/b/c.txt")), "hello");
  EXPECT_EQ(Entries(P("a/b")), (std::vector<std::string>{"c.txt"}));  // no temp file left

  // A file another tool wrote is an object, whatever its mode.
  WriteFile(P("hand/made.bin"), "by hand", 0444);
  EXPECT_EQ(store_->GetAll("hand/made.bin").value_or("?"), "by hand");
  EXPECT_EQ(ListKeys(*store_, Opts("")), (std::vector<std::string>{"a/b/c.txt", "hand/made.bin"}));
}

TEST_F(LocalDirStoreTest, DescribeIsTheFileUrlOfTheAbsoluteRoot) {
  EXPECT_EQ(store_->Describe(), "file://" + root_);
  Result<std::unique_ptr<LocalDirStore>> other =
      LocalDirStore::Open(tmp_.path() + "/x/../other/./");
  CIUIC_ASSERT_OK(other);
  EXPECT_EQ((*other)->Describe(), "file://" + tmp_.path() + "/other");
  EXPECT_TRUE(fs::is_directory(tmp_.path() + "/other"));
}

TEST_F(LocalDirStoreTest, OpenRefusesAFileAndAMissingDirectoryWithoutCreate) {
  WriteFile(tmp_.path() + "/plain", "x");
  Result<std::unique_ptr<LocalDirStore>> on_file = LocalDirStore::Open(tmp_.path() + "/plain");
  EXPECT_FALSE(on_file.ok());
  LocalDirStore::Options opts;
  opts.create = false;
  Result<std::unique_ptr<LocalDirStore>> missing =
      LocalDirStore::Open(tmp_.path() + "/missing", opts);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("file://" + tmp_.path() + "/missing"),
            std::string::npos);
}

TEST_F(LocalDirStoreTest, PutIsDurableAcrossReopen) {
  CIUIC_ASSERT_OK(store_->Put("keep/me", "durable", PutOptions{.metadata = {{"k", "v"}}}));
  Reopen();
  EXPECT_EQ(store_->GetAll("keep/me").value_or("?"), "durable");
  Result<ObjectInfo> info = store_->Head("keep/me");
  CIUIC_ASSERT_OK(info);
  EXPECT_EQ(info->metadata, (std::map<std::string, std::string>{{"k", "v"}}));
}

TEST_F(LocalDirStoreTest, MetadataIsOneUserXattrPerName) {
  CIUIC_ASSERT_OK(store_->Put("m", "x", PutOptions{.metadata = {{"owner", "alice"}}}));
  char buf[64];
  ssize_t n = ::getxattr(P("m").c_str(), "user.ciuic.owner", buf, sizeof(buf));
  ASSERT_EQ(n, 5) << std::strerror(errno);
  EXPECT_EQ(std::string(buf, 5), "alice");
  // Other attributes on a file are not its metadata.
  ASSERT_EQ(::setxattr(P("m").c_str(), "user.other", "o", 1, 0), 0) << std::strerror(errno);
  Result<ObjectInfo> info = store_->Head("m");
  CIUIC_ASSERT_OK(info);
  EXPECT_EQ(info->metadata, (std::map<std::string, std::string>{{"owner", "alice"}}));
}

TEST_F(LocalDirStoreTest, WithoutXattrsOnlyAPutWithMetadataFails) {
#ifndef CIUIC_FAULT_INJECTION
  GTEST_SKIP() << "needs CIUIC_FAULT_INJECTION";
#endif
  // The fault stands for a file system that answers EOPNOTSUPP to setxattr.
  ScopedFault no_xattrs("objstore.local.setxattr", Status::NotSupported("injected"));
  Status s = store_->Put("m", "x", PutOptions{.metadata = {{"owner", "alice"}}});
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.ToString();
  EXPECT_NE(s.message().find("extended attributes"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("'m'"), std::string::npos) << s.ToString();
  EXPECT_EQ(store_->Head("m").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Entries(root_).empty());
  CIUIC_EXPECT_OK(store_->Put("m", "x"));
}

TEST_F(LocalDirStoreTest, FailedPutLeavesNoTempFileNoObjectAndNoNewDirectory) {
#ifndef CIUIC_FAULT_INJECTION
  GTEST_SKIP() << "needs CIUIC_FAULT_INJECTION";
#endif
  for (const char* point : {"objstore.local.write", "objstore.local.before_rename"}) {
    SCOPED_TRACE(point);
    ScopedFault fault(point, Status::IoError("injected"));
    CIUIC_EXPECT_CODE(store_->Put("new/dir/obj", "data"), kIoError);
    CIUIC_EXPECT_CODE(store_->PutStream("new/dir/obj", 3,
                                        [](uint64_t, std::span<char> dst) {
                                          std::fill(dst.begin(), dst.end(), 'x');
                                          return Status::OK();
                                        }),
                      kIoError);
    EXPECT_EQ(Entries(root_), std::vector<std::string>{});
  }
  // Over an existing object, which stays as it was.
  CIUIC_ASSERT_OK(store_->Put("old/obj", "old"));
  {
    ScopedFault fault("objstore.local.before_rename", Status::IoError("injected"));
    CIUIC_EXPECT_CODE(store_->Put("old/obj", "new"), kIoError);
  }
  EXPECT_EQ(store_->GetAll("old/obj").value_or("?"), "old");
  EXPECT_EQ(Entries(P("old")), (std::vector<std::string>{"obj"}));
}

TEST_F(LocalDirStoreTest, TempFilesOfACrashedPutAreNeverListedAndCanBeCollected) {
  CIUIC_ASSERT_OK(store_->Put("d/real", "r"));
  // What a put that crashed before its rename leaves behind.
  WriteFile(P(".ciuic-tmp.top.0123456789abcdef"), "partial");
  WriteFile(P("d/.ciuic-tmp.obj.0123456789abcdef"), "partial");
  WriteFile(P("only-tmp/.ciuic-tmp.x.0000000000000001"), "partial");
  EXPECT_EQ(ListKeys(*store_, Opts("")), (std::vector<std::string>{"d/real"}));
  EXPECT_EQ(ListKeys(*store_, Opts("", "/")), (std::vector<std::string>{"d/"}));
  EXPECT_EQ(ListKeys(*store_, Opts(".ciuic")), std::vector<std::string>{});
  // The names are reserved.
  CIUIC_EXPECT_CODE(store_->Put(".ciuic-tmp.top.0123456789abcdef", "x"), kInvalidArgument);
  CIUIC_EXPECT_CODE(store_->Head("d/.ciuic-tmp.obj.0123456789abcdef"), kInvalidArgument);

  Result<uint64_t> young = store_->RemoveTempFiles(std::chrono::hours(1));
  CIUIC_ASSERT_OK(young);
  EXPECT_EQ(*young, 0u);  // just written: they might belong to puts in progress
  Result<uint64_t> removed = store_->RemoveTempFiles(std::chrono::seconds(0));
  CIUIC_ASSERT_OK(removed);
  EXPECT_EQ(*removed, 3u);
  EXPECT_EQ(Entries(P("d")), (std::vector<std::string>{"real"}));
  EXPECT_EQ(store_->GetAll("d/real").value_or("?"), "r");
}

TEST_F(LocalDirStoreTest, NonRegularFilesAndSymlinksAreNoObjects) {
  WriteFile(P("plain"), "p");
  WriteFile(tmp_.path() + "/outside/secret", "s");
  ASSERT_EQ(::mkfifo(P("fifo").c_str(), 0600), 0);
  ASSERT_EQ(::symlink("plain", P("link").c_str()), 0);
  ASSERT_EQ(::symlink((tmp_.path() + "/outside").c_str(), P("outdir").c_str()), 0);
  ASSERT_EQ(::symlink("/nonexistent", P("dangling").c_str()), 0);
  int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string sock_path = P("sock");
  if (sock_path.size() < sizeof(addr.sun_path)) {
    std::memcpy(addr.sun_path, sock_path.c_str(), sock_path.size() + 1);
    ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ::close(sock);

  EXPECT_EQ(ListKeys(*store_, Opts("")), (std::vector<std::string>{"plain"}));
  EXPECT_EQ(ListKeys(*store_, Opts("", "/")), (std::vector<std::string>{"plain"}));
  for (const char* key : {"fifo", "link", "outdir/secret", "dangling", "sock"}) {
    SCOPED_TRACE(key);
    CIUIC_EXPECT_CODE(store_->Head(key), kNotFound);  // and opening the FIFO did not hang
    char buf[4];
    CIUIC_EXPECT_CODE(store_->Get(key, 0, std::span<char>(buf, sizeof(buf))), kNotFound);
  }
  // Nothing outside the root is removed or written through a link.
  CIUIC_EXPECT_OK(store_->Delete("outdir/secret"));
  EXPECT_EQ(ReadFile(tmp_.path() + "/outside/secret"), "s");
  EXPECT_FALSE(store_->Put("outdir/new", "n").ok());
  EXPECT_FALSE(fs::exists(tmp_.path() + "/outside/new"));
}

TEST_F(LocalDirStoreTest, EmptyDirectoriesAreNotPrefixesAndDoNotBlockAPut) {
  fs::create_directories(P("empty/sub"));
  EXPECT_EQ(ListKeys(*store_, Opts("", "/")), std::vector<std::string>{});
  // A put of key "empty" removes the empty directories in its way...
  fs::remove(P("empty/sub"));
  CIUIC_ASSERT_OK(store_->Put("empty", "now a file"));
  EXPECT_EQ(store_->GetAll("empty").value_or("?"), "now a file");
  // ...but not a directory holding files that are not objects.
  fs::create_directories(P("busy"));
  ASSERT_EQ(::mkfifo(P("busy/fifo").c_str(), 0600), 0);
  Status s = store_->Put("busy", "x");
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
  EXPECT_NE(s.message().find("'busy'"), std::string::npos) << s.ToString();
}

TEST_F(LocalDirStoreTest, DeleteRemovesTheDirectoriesItEmptiesButNotTheRoot) {
  CIUIC_ASSERT_OK(store_->Put("x/y/z", "1"));
  CIUIC_ASSERT_OK(store_->Put("x/keep", "2"));
  CIUIC_ASSERT_OK(store_->Delete("x/y/z"));
  EXPECT_EQ(Entries(P("x")), (std::vector<std::string>{"keep"}));
  CIUIC_ASSERT_OK(store_->Delete("x/keep"));
  EXPECT_TRUE(Entries(root_).empty());
  EXPECT_TRUE(fs::is_directory(root_));
}

TEST_F(LocalDirStoreTest, ModesOfCreatedDirectoriesAndFiles) {
  CIUIC_ASSERT_OK(store_->Put("p/q/r", "x"));
  struct stat st;
  for (const char* dir : {"", "p", "p/q"}) {
    ASSERT_EQ(::stat(P(dir).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0700u) << dir;
  }
  ASSERT_EQ(::stat(P("p/q/r").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // Files of any mode are read (as far as the process may: root may read mode 0 too).
  WriteFile(P("ro"), "read only", 0400);
  EXPECT_EQ(store_->GetAll("ro").value_or("?"), "read only");
  if (::geteuid() == 0) {
    WriteFile(P("none"), "no mode", 0);
    EXPECT_EQ(store_->GetAll("none").value_or("?"), "no mode");
  }
}

TEST_F(LocalDirStoreTest, KeyComponentsLongerThanAFileNameAreRefused) {
  std::string key = "d/" + std::string(256, 'n');
  Status s = store_->Put(key, "x");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("256 bytes"), std::string::npos) << s.ToString();
  CIUIC_EXPECT_OK(store_->Put("d/" + std::string(255, 'n'), "x"));
}

TEST(LocalDirStoreListTest, ListsTwentyThousandFilesInPagesInKeyOrder) {
  // Creating the files takes most of the time; on a tmpfs (where the test may mount one) it
  // is several times quicker than on a disk.
  testing::TempDir tmp;
  ScopedTmpfs tmpfs(tmp.path() + "/fast", "size=64m,mode=0700", 0);
  const std::string root = tmpfs.ok() ? tmp.path() + "/fast" : tmp.path() + "/store";
  Result<std::unique_ptr<LocalDirStore>> opened = LocalDirStore::Open(root);
  CIUIC_ASSERT_OK(opened);
  LocalDirStore& store = **opened;
  auto P = [&](const std::string& rel) { return root + "/" + rel; };

  // Written as another tool would, quickly: 12,000 in one directory (names in an order that
  // readdir will not keep) and 40 directories of 200, some named so that a directory walk
  // in name order would be out of key order ("d07" vs "d07-x").
  std::set<std::string> keys;
  for (int i = 0; i < 12'000; ++i) {
    keys.insert(fmt::format("flat/{:08x}", (i * 2654435761u) & 0xffffffffu));
  }
  for (int d = 0; d < 40; ++d) {
    for (int f = 0; f < 200; ++f) {
      keys.insert(fmt::format("nested/d{:02}{}/f{:03}", d, d % 2 == 0 ? "" : "-x", f));
    }
  }
  // Key "nested/d00-" sorts before every key under "nested/d00/" ('-' < '/'), though the name
  // "d00-" sorts after the name "d00".
  keys.insert("nested/d00-");
  ASSERT_EQ(keys.size(), 20'001u);
  fs::create_directories(P("flat"));
  for (const std::string& k : keys) {
    if (k.starts_with("nested/")) {
      fs::create_directories(fs::path(P(k)).parent_path());
    }
    int fd = ::open(P(k).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << k << ": " << std::strerror(errno);
    ::close(fd);
  }
  const std::vector<std::string> all(keys.begin(), keys.end());
  EXPECT_EQ(ListKeys(store, Opts("")), all);
  EXPECT_EQ(ListKeys(store, Opts("", "", 333)), all);

  std::vector<std::string> flat;
  std::copy_if(all.begin(), all.end(), std::back_inserter(flat),
               [](const std::string& k) { return k.starts_with("flat/"); });
  EXPECT_EQ(ListKeys(store, Opts("flat/", "/", 1000)), flat);

  std::vector<std::string> dirs;
  dirs.reserve(41);
  for (int d = 0; d < 40; ++d) {
    dirs.push_back(fmt::format("nested/d{:02}{}/", d, d % 2 == 0 ? "" : "-x"));
  }
  dirs.push_back("nested/d00-");
  std::sort(dirs.begin(), dirs.end());
  std::vector<std::string> rolled = ListKeys(store, Opts("nested/", "/", 7));
  std::vector<std::string> rolled_sorted = rolled;
  std::sort(rolled_sorted.begin(), rolled_sorted.end());
  EXPECT_EQ(rolled_sorted, dirs);
}

TEST_F(LocalDirStoreTest, ConcurrentPutsAndDeletesInOneDirectory) {
  // Deletes remove the directory whenever it empties while puts create it again: every put
  // must still land (the retry on a vanished directory).
  std::atomic<int> failures{0};
  auto worker = [&](int t) {
    for (int i = 0; i < 30; ++i) {
      const std::string key = fmt::format("deep/a/b/c/t{}", t);
      Status s = store_->Put(key, "x");
      if (!s.ok() && failures.fetch_add(1) < 5) {
        ADD_FAILURE() << s.ToString();
      }
      s = store_->Delete(key);
      if (!s.ok() && failures.fetch_add(1) < 5) {
        ADD_FAILURE() << s.ToString();
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back(worker, t);
  }
  for (std::thread& th : threads) {
    th.join();
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(Entries(root_).empty());
}

TEST(LocalErrnoCodeTest, MapsTheErrnosCallersHandle) {
  using internal::LocalErrnoCode;
  EXPECT_EQ(LocalErrnoCode(ENOSPC), StatusCode::kNoSpace);
  EXPECT_EQ(LocalErrnoCode(EDQUOT), StatusCode::kNoSpace);
  EXPECT_EQ(LocalErrnoCode(EACCES), StatusCode::kPermissionDenied);
  EXPECT_EQ(LocalErrnoCode(EPERM), StatusCode::kPermissionDenied);
  EXPECT_EQ(LocalErrnoCode(EROFS), StatusCode::kPermissionDenied);
  EXPECT_EQ(LocalErrnoCode(ENOENT), StatusCode::kNotFound);
  EXPECT_EQ(LocalErrnoCode(ENAMETOOLONG), StatusCode::kInvalidArgument);
  EXPECT_EQ(LocalErrnoCode(EMFILE), StatusCode::kUnavailable);
  EXPECT_EQ(LocalErrnoCode(EIO), StatusCode::kIoError);
}

TEST(LocalDirStoreFsTest, FullFileSystemIsNoSpaceNamingStoreAndKey) {
  testing::TempDir tmp;
  const std::string mnt = tmp.path() + "/small";
  ScopedTmpfs tmpfs(mnt, "size=256k,mode=0700", 0);
  if (!tmpfs.ok()) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << tmpfs.why() << "); needs root";
  }
  Result<std::unique_ptr<LocalDirStore>> store = LocalDirStore::Open(mnt);
  CIUIC_ASSERT_OK(store);
  const std::string big(1 << 20, 'b');
  Status s = (*store)->Put("dir/big", big);
  EXPECT_EQ(s.code(), StatusCode::kNoSpace) << s.ToString();
  EXPECT_NE(s.message().find("file://" + mnt), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("'dir/big'"), std::string::npos) << s.ToString();
  s = (*store)->PutStream("big", big.size(), [&](uint64_t offset, std::span<char> dst) {
    std::memcpy(dst.data(), big.data() + offset, dst.size());
    return Status::OK();
  });
  EXPECT_EQ(s.code(), StatusCode::kNoSpace) << s.ToString();
  // Filling it with small objects ends in kNoSpace from the writes, not a crash or a torn one.
  Status last;
  int stored = 0;
  for (; stored < 1000 && last.ok(); ++stored) {
    last = (*store)->Put(fmt::format("small/{:04}", stored), std::string(16 << 10, 's'));
  }
  EXPECT_EQ(last.code(), StatusCode::kNoSpace) << last.ToString();
  // Nothing half-written is left: every file is a whole object and no temp file remains.
  for (const std::string& name : Entries(mnt + "/small")) {
    EXPECT_FALSE(name.starts_with(".ciuic-tmp.")) << name;
    EXPECT_EQ(fs::file_size(fs::path(mnt) / "small" / name), 16u << 10) << name;
  }
  EXPECT_FALSE(fs::exists(mnt + "/dir/big"));
  EXPECT_FALSE(fs::exists(mnt + "/big"));
}

TEST(LocalDirStoreFsTest, ReadOnlyFileSystemIsPermissionDenied) {
  testing::TempDir tmp;
  const std::string mnt = tmp.path() + "/ro";
  ScopedTmpfs tmpfs(mnt, "size=64k,mode=0700", MS_RDONLY);
  if (!tmpfs.ok()) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << tmpfs.why() << "); needs root";
  }
  Result<std::unique_ptr<LocalDirStore>> store = LocalDirStore::Open(mnt);
  CIUIC_ASSERT_OK(store);
  Status s = (*store)->Put("k", "x");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("file://" + mnt), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("'k'"), std::string::npos) << s.ToString();
  CIUIC_EXPECT_OK((*store)->List(ListOptions()));
}

}  // namespace
}  // namespace ciuic::objstore
