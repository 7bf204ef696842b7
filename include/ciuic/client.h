// libciuic: the POSIX-like C++ client of a ciuic cluster.
//
// A Client holds one session with the MDS (renewed in the background) and one connection per OSS.
// Metadata goes to the MDS; file data goes straight to the OSTs, computed from each file's layout
// (RAID-0 striping over PFL components), with all of a request's stripe RPCs in flight at once.
//
// Paths are absolute within the cluster ("/a/b"). A path that is relative, has an empty
// component ("/a//b"), a component longer than 255 bytes or a NUL byte is rejected with
// kInvalidArgument or kNameTooLong. Errors carry the path: "NotFound: /a/b: no such entry".
//
// Consistency is close-to-open (as on NFS): data written through a File is visible to other
// clients that open the file after the writer's Close() or Fsync() returned. O_APPEND is atomic
// among the Files of one Client (appends from different clients may interleave or overlap), as on
// NFS. Durability: a successful Fsync() means the data and the size survive a crash of any server.
//
// Thread-safety: Client and File are thread-safe; any method may be called from any thread, except
// that a File must not be used after Close() or destruction begins. Blocking methods must not be
// called from an async completion callback (callbacks run on a client network thread).
// Ownership: each File keeps the machinery it needs alive, but all Files should be closed before
// their Client is destroyed (the Client's destructor fails their later IO with kAborted).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ciuic/layout.h"
#include "ciuic/status.h"

namespace ciuic {

struct ClientOptions {
  // Cluster file (MDS address and secret). Empty: $CIUIC_CLUSTER, then ~/ciuic/cluster.conf.
  std::string cluster_file;
  // Caller identity sent with every MDS request (permission checks, owner of new files).
  uint32_t uid = ::geteuid();
  uint32_t gid = ::getegid();
  std::vector<uint32_t> groups;  // supplementary groups
  // Name of this client in the MDS's session table; empty: "<hostname>:<pid>".
  std::string client_name;

  // Bytes read ahead of a sequential reader, per open file (0 disables readahead).
  size_t readahead_bytes = size_t{8} << 20;
  // Small sequential writes are gathered per open file up to this many bytes before they are sent
  // (0 disables aggregation). Larger writes go straight from the caller's buffer.
  size_t write_buffer_bytes = size_t{4} << 20;
  // Deadline of one RPC to an OSS, and of one RPC to the MDS.
  int io_timeout_ms = 60000;
  int mds_timeout_ms = 30000;
  // How long IO keeps retrying (with backoff and jitter) an OST that is down, unreachable or busy
  // before it fails with kUnavailable naming the OST. The MDS gets the same bound.
  int ost_retry_ms = 30000;
  // Network threads of the client (asio event loop). One is enough for several GB/s.
  int io_threads = 1;
  // Most data RPCs in flight per File (bounds memory and queueing; 0 = no limit).
  int max_inflight_per_file = 64;
  // Lifetime of cached Stat/Lstat results by path; 0 disables the cache (every Stat asks the
  // MDS). Any mutation this client sends clears it; another client's changes may be seen this
  // much later.
  int attr_cache_ms = 0;
  // Lifetime of cached directory path -> identity lookups used to find the parent of a path
  // (saves one MDS round trip per create/mkdir/unlink). Another client's rename of a directory
  // may be seen this much later; this client's own renames and rmdirs clear the cache.
  int dentry_cache_ms = 1000;
  // Lifetime of a directory's attributes as returned by this client's own create, mkdir,
  // symlink, unlink and rmdir in it: GetAttrAt(dir) serves them without an MDS round trip. 0
  // disables. Any other mutation this client sends clears them; another client's changes may be
  // seen this much later. A FUSE mount sets it to its attribute timeout (the kernel asks for the
  // directory's attributes after every create or unlink in it).
  int dir_attr_cache_ms = 0;
  // Reads into SharedMemory from an OSS on this host (reached over a loopback address) are
  // placed there by the OSS directly, and writes from it are taken from there by the OSS,
  // without crossing a socket. $CIUIC_SHM_READS=0 turns both off too.
  bool shm_reads = true;
  // Small reads to one OSS that are waiting to be sent at the same time (a loader's samples,
  // random 4 KiB reads at depth) go out as one ReadBatch frame (docs/formats/wire.md): reads
  // placed in shared memory, and reads over TCP of up to 16 KiB. $CIUIC_BATCH_READS=0 turns it
  // off too.
  bool batch_reads = true;
  // The node cache (docs/design.md "Node cache"): a directory shared by every ciuic client on
  // this machine that keeps 1 MiB blocks of the files read, keyed by FID and data_version, so a
  // second read (another epoch, another process) comes from local disk. Files opened read-only
  // are read through it. Empty: $CIUIC_NODE_CACHE, else the cluster file's `node_cache`
  // (`ciuic cluster up --node-cache DIR`), else none; "none" turns it off. A directory that
  // cannot be used is logged once and the client runs without it.
  std::string node_cache_dir;
  // Its size cap in bytes; 0: $CIUIC_NODE_CACHE_BYTES, else the cluster file's, else 8 GiB.
  uint64_t node_cache_bytes = 0;
  // The share of the cache device always left free, in percent: while the device has less, the
  // cache empties itself and stores nothing. Negative: $CIUIC_NODE_CACHE_MIN_FREE, else the
  // cluster file's `node_cache_min_free`, else 10.
  double node_cache_min_free_pct = -1;
};

// Memory shared with the OSSes on this host (a sealed memfd, docs/formats/shm-register.md).
// A read whose destination lies in it (4 KiB-aligned, whole 4 KiB blocks of the file) from an
// OSS reached over a loopback address is written there by the OSS, straight from its disk: no
// byte crosses a socket. Any other read into it goes over TCP as usual, so it is ordinary memory
// to the caller. Valid while this object lives (it may outlive the Client). Thread-safe.
// A read that failed (timeout, lost connection) may still be placed later: do not reuse the
// destination of a failed read for other data.
class SharedMemory {
 public:
  virtual ~SharedMemory() = default;
  virtual uint8_t* data() const = 0;
  virtual size_t size() const = 0;
};

// Attributes of a file, directory or symlink.
struct FileStat {
  uint64_t ino = 0;  // the FID sequence: stable, never reused (root is 1)
  uint32_t fid_mds = 0;
  uint32_t fid_ver = 0;
  uint32_t mode = 0;  // S_IFMT | permission bits
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t nlink = 0;
  uint64_t size = 0;
  uint64_t blocks = 0;  // 512-byte blocks
  uint64_t rdev = 0;
  // Bumped by the MDS whenever the file's data may have changed (close/fsync after writes,
  // truncate): caches key on it.
  uint64_t data_version = 0;
  // Excluded from node caches (Client::SetNodeCacheExcluded; new entries of an excluded
  // directory inherit it).
  bool no_node_cache = false;
  int64_t atime_sec = 0;
  uint32_t atime_nsec = 0;
  int64_t mtime_sec = 0;
  uint32_t mtime_nsec = 0;
  int64_t ctime_sec = 0;
  uint32_t ctime_nsec = 0;
  int64_t btime_sec = 0;
  uint32_t btime_nsec = 0;

  bool is_dir() const { return (mode & S_IFMT) == S_IFDIR; }
  bool is_reg() const { return (mode & S_IFMT) == S_IFREG; }
  bool is_symlink() const { return (mode & S_IFMT) == S_IFLNK; }
};

struct DirEntry {
  std::string name;
  uint64_t ino = 0;
  uint32_t type = 0;    // S_IFMT bits of the entry's mode
  uint64_t cookie = 0;  // pass to ReadDirPage to continue after this entry (fits off_t)
  bool has_attr = false;
  FileStat attr;  // filled when has_attr (ReadDirPage with plus = true)
};

// One page of a directory listing.
struct DirPage {
  std::vector<DirEntry> entries;
  uint64_t next_cookie = 0;  // cookie of the last entry (or the one passed in when empty)
  bool eof = false;
};

struct OpenOptions {
  // Expected final size: lets the adaptive layout policy choose the stripe count up front.
  uint64_t size_hint = 0;
  // Random access expected: turns readahead off and favors wide stripes for big files.
  bool random_access = false;
  // Explicit layout for a file this Open creates (ignored for an existing file); OSTs may be
  // left empty for the MDS to choose.
  const FileLayout* layout = nullptr;
  // Read this file past the node cache (ClientOptions::node_cache_dir): neither served from it
  // nor filling it.
  bool no_node_cache = false;
};

struct StatFs {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t avail_bytes = 0;
  uint64_t total_inodes = 0;
  uint64_t free_inodes = 0;
  uint32_t block_size = 4096;
  uint32_t name_max = 255;
  // Cold tier (filled by StatfsTiers only): files with a copy there and its bytes; of those,
  // released (data only there) and dirty (changed since archived).
  uint64_t cold_files = 0;
  uint64_t cold_bytes = 0;
  uint64_t released_files = 0;
  uint64_t released_bytes = 0;
  uint64_t dirty_files = 0;
};

struct OstStatus {
  uint32_t index = 0;
  std::string addr;  // host:port of the serving OSS
  uint64_t capacity = 0;
  uint64_t free = 0;
  std::string state;  // "up", "down", "full", "readonly"
  // The OSS's scrubber on this OST, as of its last heartbeat (docs/design.md "Scrubbing").
  struct Scrub {
    uint64_t passes = 0;         // whole passes finished since the OSS started
    uint64_t objects = 0;        // verified in the pass under way
    uint64_t objects_total = 0;  // in the pass under way
    uint64_t bytes = 0;          // verified, all passes
    uint64_t bad = 0;            // objects found with a bad block
    uint64_t repaired = 0;       // of those, rewritten from a good copy
    uint64_t lost = 0;           // of those, with no good copy
    int64_t last_pass_end_ms = 0;
  } scrub;
};

// A replication chain (docs/design.md "Replication"): the OSTs holding the copies of the
// objects that name it, in order, and its version.
struct ChainMemberStatus {
  uint32_t ost = 0;
  std::string state;  // "serving", "offline" (missed writes), "syncing" (catching up)
  // Syncing: the resync's progress as the chain's head last reported it.
  uint64_t sync_objects_done = 0;
  uint64_t sync_objects_total = 0;
  uint64_t sync_bytes_copied = 0;
};
struct ChainStatus {
  uint32_t id = 0;  // as layouts name it (>= kChainBase)
  uint64_t version = 0;
  std::vector<ChainMemberStatus> members;
};

// Identity of a file (Decision 1): the FID. `seq` is also its inode number (root is 1).
struct FileId {
  uint64_t seq = 0;
  uint32_t mds = 0;
  uint32_t ver = 0;
  bool operator==(const FileId&) const = default;
};
inline FileId IdOf(const FileStat& s) {
  return FileId{s.ino, s.fid_mds, s.fid_ver};
}

// Attribute changes for Client::SetAttrAt; fields apply when their flag is set.
struct SetAttrRequest {
  bool set_mode = false;
  uint32_t mode = 0;  // permission bits (07777)
  bool set_uid = false;
  uint32_t uid = 0;
  bool set_gid = false;
  uint32_t gid = 0;
  bool set_size = false;  // truncate (regular files only)
  uint64_t size = 0;
  // tv_nsec may be UTIME_NOW; UTIME_OMIT (the default) leaves the time unchanged.
  struct timespec atime = {0, UTIME_OMIT};
  struct timespec mtime = {0, UTIME_OMIT};
};

// Makes the MDS requests this thread sends through any Client act for another user (uid, gid,
// supplementary groups) until the scope ends: permission checks and owners of new files use it.
// Used by servers such as the FUSE daemon that act for many users. Data IO is not affected.
// Not nestable across threads: it applies only to the constructing thread.
class ScopedCaller {
 public:
  ScopedCaller(uint32_t uid, uint32_t gid, std::vector<uint32_t> groups = {});
  ~ScopedCaller();
  ScopedCaller(const ScopedCaller&) = delete;
  ScopedCaller& operator=(const ScopedCaller&) = delete;
};

// Advisory locks (Client::LockAt): POSIX byte ranges (fcntl) or whole-file flock locks. The
// two kinds never conflict with each other, as on Linux.
enum class LockKind : uint32_t { kPosix = 1, kFlock = 2 };
enum class LockType : uint32_t { kShared = 1, kExclusive = 2, kUnlock = 3 };
struct LockRange {
  LockType type = LockType::kShared;
  uint64_t start = 0;
  uint64_t end = UINT64_MAX;  // last byte, inclusive; UINT64_MAX: to end of file (and beyond)
  uint32_t pid = 0;           // the locking process, reported to other clients' tests
};

// Completion of an async IO: bytes transferred or the error.
using IoCallback = std::function<void(Result<size_t>)>;

// One open file. Thread-safe: concurrent Pread/Pwrite/async calls are fine (one Client never has
// two overlapping writes to the same range in flight: overlapping writes are ordered). Read/Write
// share one file position.
class File {
 public:
  virtual ~File() = default;  // closes the file if Close() was not called (errors are logged)

  // Reads up to `len` bytes at `offset` into `buf`. Returns the bytes read: fewer than `len`
  // only at end of file (0 at or past EOF). Holes read as zeros. Errors: kCorruption when a
  // block fails its checksum (names OST, object and offset; no bad data is returned),
  // kUnavailable when an OST stayed unreachable for ost_retry_ms, kPermissionDenied if not
  // opened for reading, kIoError.
  virtual Result<size_t> Pread(void* buf, size_t len, uint64_t offset) = 0;
  // Writes `len` bytes at `offset`; returns `len`. The data may sit in the file's write buffer
  // until Fsync/Close/a read of the range. Errors: kPermissionDenied if not opened for writing,
  // kUnavailable, kNoSpace, kIoError (a buffered write's error is reported by the next call,
  // Fsync or Close).
  virtual Result<size_t> Pwrite(const void* buf, size_t len, uint64_t offset) = 0;
  // Read/Write at the file position, advancing it. With O_APPEND, Write appends at the current
  // end of file (atomic within this Client).
  virtual Result<size_t> Read(void* buf, size_t len) = 0;
  virtual Result<size_t> Write(const void* buf, size_t len) = 0;
  // Moves the file position (SEEK_SET/SEEK_CUR/SEEK_END); returns the new position.
  virtual Result<uint64_t> Seek(int64_t offset, int whence) = 0;

  // Async forms: start the IO and return at once; `cb` runs exactly once on a client network
  // thread when it is done. `buf` must stay valid (and, for writes, unchanged) until then. Many
  // may be in flight (queue depth is not thread count). `cb` may start more async IO but must
  // not call blocking methods. Async writes bypass the write buffer; async writes to overlapping
  // ranges that are in flight at the same time land in an unspecified order (as with POSIX AIO).
  // A PreadAsync that ends at the end of the file may write zeros to `buf` past the bytes it
  // returns, up to the next 4 KiB of the file (never past `len`): it then reads whole blocks,
  // one request per object (into shared memory from an OSS on this host).
  virtual void PreadAsync(void* buf, size_t len, uint64_t offset, IoCallback cb) = 0;
  virtual void PwriteAsync(const void* buf, size_t len, uint64_t offset, IoCallback cb) = 0;

  // Sends buffered data, waits for writes in flight, syncs every OST object this File wrote
  // and records the size durably on the MDS. Returns the first error of any earlier write.
  virtual Status Fsync() = 0;
  // Sends buffered data and waits for writes in flight (not durable yet); publishes the size.
  virtual Status Flush() = 0;
  // Flush without blocking when there is nothing to do (nothing buffered, no write in flight, no
  // size to publish): returns what Flush would return then. nullopt: call Flush.
  virtual std::optional<Status> FlushIfIdle() = 0;
  // Sets the file size (as ftruncate): shrinking punches the objects, growing reads as zeros.
  virtual Status Truncate(uint64_t size) = 0;
  // Reserves space for [offset, offset+len) and, unless keep_size, extends the size (size hint
  // for the layout policy). kNotSupported if the MDS has no fallocate.
  virtual Status Allocate(uint64_t offset, uint64_t len, bool keep_size) = 0;
  // Current attributes from the MDS, with the size including this File's unflushed writes.
  virtual Result<FileStat> Stat() = 0;
  // Flushes and closes: the data becomes visible to the next opener (close-to-open). Returns the
  // first error of any earlier write. Idempotent; later IO fails with kInvalidArgument.
  virtual Status Close() = 0;

  // The layout as last seen (instantiated components get OSTs as the file is written).
  virtual FileLayout layout() const = 0;
  virtual const std::string& path() const = 0;  // as opened
  virtual int flags() const = 0;                // open(2) flags as given
  virtual uint64_t ino() const = 0;
};

// HSM state of a file (Client::HsmGetState; docs/design.md "HSM").
enum class HsmState {
  kNone,      // never archived (or its copy was removed)
  kArchived,  // a checksummed copy of the current data version is in the cold tier
  kReleased,  // only the cold tier holds the data; the next open restores it
  kDirty,     // archived, but changed since (the copy holds an older data version)
  kLost,      // a restore found the archived copy corrupt or missing
};
// "none", "archived", "released", "dirty", "lost".
const char* HsmStateName(HsmState s);

// A file of a data repository (Client::HsmImport, docs/formats/repo-xattrs.md).
struct RepoImport {
  std::string url;   // the repository: s3://bucket[/prefix] or file:///dir
  std::string key;   // the object's key in it
  std::string etag;  // the object's ETag as listed; a different one later means it changed
  uint64_t size = 0;
  int64_t mtime_ms = 0;
  uint32_t mode = 0644;
  std::string xattr_name;  // optional user.* attribute set in the same step
  std::string xattr_value;
};

// A file closed after writing below a directory that exports on close, waiting for its export
// (Client::RepoListQueue).
struct RepoQueued {
  FileId id;
  uint64_t version = 0;  // the data version its last close made
  std::string path;      // relative to the linked directory; empty: no path there any more
};
struct RepoLink {
  std::string path;  // from the root
  bool export_on_close = false;
};
struct RepoQueue {
  bool export_on_close = false;
  std::vector<RepoQueued> entries;
};

struct HsmStatus {
  HsmState state = HsmState::kNone;
  std::string backend;            // the cold tier holding the copy ("file:///...", "mem://x")
  uint64_t archived_version = 0;  // the data version archived (0: none)
  uint64_t data_version = 0;      // the file's current data version
  // Decayed access count on the MDS (opens and OSS-reported reads; docs/design.md "HSM
  // policy"); has_heat false when the MDS saw no access since it started.
  bool has_heat = false;
  double heat = 0;
};

class Client {
 public:
  // Reads the cluster file, connects to the MDS (authenticated handshake), opens a session and
  // fetches the OST map. kNotFound (no cluster file), kUnavailable (MDS unreachable),
  // kPermissionDenied (wrong secret), kInvalidArgument (bad cluster file).
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  // Closes the session (open files are released by the MDS) and the connections.
  virtual ~Client() = default;

  // Opens `path` with open(2) flags: O_RDONLY/O_WRONLY/O_RDWR, O_CREAT, O_EXCL, O_TRUNC,
  // O_APPEND (O_DIRECTORY, O_NOFOLLOW, O_CLOEXEC, O_DIRECT, O_NOATIME are accepted). One MDS round
  // trip. Errors: kNotFound, kAlreadyExists (O_CREAT|O_EXCL), kIsADirectory (write to a
  // directory), kNotADirectory, kPermissionDenied, kLoop (O_NOFOLLOW on a symlink),
  // kInvalidArgument.
  virtual Result<std::unique_ptr<File>> Open(const std::string& path,
                                             int flags,
                                             uint32_t mode = 0644,
                                             const OpenOptions& options = {}) = 0;
  // Creates or replaces the contents of `path` with `data`: Open(O_CREAT|O_WRONLY|O_TRUNC) +
  // Write + Close. Returns as Close does.
  virtual Status WriteFile(const std::string& path,
                           const std::string& data,
                           uint32_t mode = 0644) = 0;
  // Reads a whole file.
  virtual Result<std::string> ReadFile(const std::string& path) = 0;

  // Attributes of `path`, following (Stat) or not following (Lstat) a final symlink.
  virtual Result<FileStat> Stat(const std::string& path) = 0;
  virtual Result<FileStat> Lstat(const std::string& path) = 0;
  // Creates a directory; kAlreadyExists, kNotFound (parent), kNotADirectory.
  virtual Status Mkdir(const std::string& path, uint32_t mode = 0755) = 0;
  // Creates a directory and its missing parents; OK if it already exists as a directory.
  virtual Status MkdirAll(const std::string& path, uint32_t mode = 0755) = 0;
  // Creates a special file or a regular file (mode includes S_IFIFO, S_IFCHR, S_IFREG...).
  virtual Status Mknod(const std::string& path, uint32_t mode, uint64_t rdev = 0) = 0;
  // Lists a whole directory ("." and ".." not included). For huge directories prefer pages.
  virtual Result<std::vector<DirEntry>> ReadDir(const std::string& path) = 0;
  // Lists up to `max_entries` entries after `cookie` (0: from the start); "." and ".." are not
  // included (a page may then hold fewer entries, even none, without being the last: continue
  // from next_cookie until eof). With `plus`, each entry carries its attributes.
  virtual Result<DirPage> ReadDirPage(const std::string& path,
                                      uint64_t cookie,
                                      uint32_t max_entries,
                                      bool plus = false) = 0;
  // Removes a non-directory; an open File keeps reading and writing it until closed.
  virtual Status Unlink(const std::string& path) = 0;
  // Removes an empty directory; kNotEmpty, kNotADirectory.
  virtual Status Rmdir(const std::string& path) = 0;
  // Renames atomically (replacing `to` as rename(2)). flags: RENAME_NOREPLACE (1),
  // RENAME_EXCHANGE (2). Errors: kNotFound, kAlreadyExists, kNotEmpty, kIsADirectory,
  // kNotADirectory, kInvalidArgument (moving a directory under itself).
  virtual Status Rename(const std::string& from, const std::string& to, unsigned flags = 0) = 0;
  // Sets the size of a regular file (as truncate(2)).
  virtual Status Truncate(const std::string& path, uint64_t size) = 0;
  virtual Status Symlink(const std::string& target, const std::string& linkpath) = 0;
  virtual Result<std::string> Readlink(const std::string& path) = 0;
  // Makes `newpath` another name of the file `existing`; kTooManyLinks, kNotPermitted (dir).
  virtual Status Link(const std::string& existing, const std::string& newpath) = 0;
  virtual Status Chmod(const std::string& path, uint32_t mode) = 0;
  // uid/gid of UINT32_MAX leave that field unchanged.
  virtual Status Chown(const std::string& path, uint32_t uid, uint32_t gid) = 0;
  // Sets access and modification times; tv_nsec may be UTIME_NOW or UTIME_OMIT.
  virtual Status Utimens(const std::string& path,
                         const struct timespec& atime,
                         const struct timespec& mtime) = 0;

  // Extended attributes. flags: XATTR_CREATE (1), XATTR_REPLACE (2). GetXattr/RemoveXattr of a
  // missing name: kNotFound.
  virtual Status SetXattr(const std::string& path,
                          const std::string& name,
                          const std::string& value,
                          int flags = 0) = 0;
  virtual Result<std::string> GetXattr(const std::string& path, const std::string& name) = 0;
  virtual Result<std::vector<std::string>> ListXattr(const std::string& path) = 0;
  virtual Status RemoveXattr(const std::string& path, const std::string& name) = 0;

  // Layout of a file, or the default layout a directory gives new files (empty if none).
  virtual Result<FileLayout> GetLayout(const std::string& path) = 0;
  // Sets the layout of an empty regular file, or a directory's default for new files.
  // kInvalidArgument (bad layout), kBusy (the file already has data).
  virtual Status SetLayout(const std::string& path, const FileLayout& layout) = 0;

  // Makes every namespace change made so far durable (as fsync(2) on a directory does): creates,
  // renames, unlinks and attribute changes of `path` and of every other directory, since the
  // MDS commits its mutations in one ordered log and this syncs it. Namespace mutations are
  // acknowledged before they are durable (the MDS's log is synced in groups); file data is made
  // durable by File::Fsync, not by this. `path` may name a file too (the same sync). One MDS
  // round trip. Errors: kNotFound, kUnavailable, kIoError (the MDS could not sync).
  virtual Status FsyncDir(const std::string& path) = 0;

  // Space and inodes of the whole cluster.
  virtual Result<StatFs> Statfs() = 0;
  // Statfs plus the cold tier's totals: the MDS scans every HSM record (for `ciuic df`).
  virtual Result<StatFs> StatfsTiers() = 0;
  // The OSTs as the MDS sees them (fresh from the MDS).
  virtual Result<std::vector<OstStatus>> OstMap() = 0;
  // The replication chains, fetched from the MDS now.
  virtual Result<std::vector<ChainStatus>> Chains() = 0;

  // The order this process will read files in (a data loader's epoch, its exact sample order):
  // while it is set, the node cache (ClientOptions::node_cache_dir) keeps the blocks needed
  // soonest instead of the most recently used, and removes first what the order does not need
  // again. Each read of a block uses up its next place in the order. An empty order goes back
  // to least recently used. Without a node cache it does nothing. One MDS round trip per file.
  struct PlannedRead {
    std::string path;  // empty: `id` and `data_version` name the file (no MDS round trip)
    uint64_t offset = 0;
    uint64_t length = 0;
    FileId id;
    uint64_t data_version = 0;
  };
  virtual Status SetNodeCachePlan(const std::vector<PlannedRead>& order) = 0;
  // Whether reads of this client go through a node cache.
  virtual bool HasNodeCache() const = 0;
  // Excludes a file or directory from every machine's node cache, or includes it again: opens
  // of an excluded file read and write past the cache, and entries created in an excluded
  // directory are excluded too (existing ones keep their setting: `ciuic cache exclude -r`
  // walks a tree). Owner or root. One MDS round trip.
  virtual Status SetNodeCacheExcluded(const std::string& path, bool excluded) = 0;

  virtual const std::string& cluster_uuid() const = 0;
  virtual const ClientOptions& options() const = 0;

  // Operations by file identity rather than path (what an inode-based server such as the FUSE
  // daemon needs: a rename never invalidates a FileId). Each is one MDS round trip unless noted;
  // errors are those of the path-based twin above, with kStale or kNotFound for an id whose file
  // is gone. `name` is one path component (no '/', at most 255 bytes).
  virtual FileId RootId() const = 0;
  // Looks `name` up in directory `parent` (does not follow a final symlink).
  virtual Result<FileStat> LookupAt(const FileId& parent, const std::string& name) = 0;
  // Attributes of the file; the size includes unflushed writes of Files open in this Client.
  virtual Result<FileStat> GetAttrAt(const FileId& id) = 0;
  // What GetAttrAt would return from this client's caches alone (dir_attr_cache_ms), without
  // blocking; nullopt when it would ask the MDS.
  virtual std::optional<FileStat> CachedAttrAt(const FileId& id) = 0;
  // Applies `req` (a size change truncates as File::Truncate does) and returns the new attributes.
  virtual Result<FileStat> SetAttrAt(const FileId& id, const SetAttrRequest& req) = 0;
  // Opens an existing regular file with open(2) flags (O_TRUNC applies); `attr` (optional) gets
  // its attributes as opened.
  virtual Result<std::unique_ptr<File>> OpenAt(const FileId& id, int flags, FileStat* attr) = 0;
  // Opens regular file `id` read-only from a layout and size the caller resolved earlier
  // (GetAttrAt + GetLayoutAt, e.g. once per data set rather than once per sample): no MDS round
  // trip, now or at Close; each read goes straight to the OSTs. The caller vouches that the file
  // has not changed since: reads return the objects' current bytes within `size`, and an object
  // missing on its OST (the file was removed or rewritten since) fails the read with kStale.
  // `name` names the file in errors. Local: fails only (kInvalidArgument) for a layout that
  // does not Validate(). `data_version` (FileStat::data_version at the resolve) lets its reads
  // go through the node cache, keyed by it; without it they go past the cache (a block must
  // never be cached under a version it does not belong to).
  virtual Result<std::unique_ptr<File>> OpenResolved(
      const FileId& id,
      const FileLayout& layout,
      uint64_t size,
      const std::string& name,
      std::optional<uint64_t> data_version = std::nullopt) = 0;
  // Creates (or, without O_EXCL, opens) regular file `name` in `parent` and opens it with
  // `flags`; `attr` (optional) gets its attributes.
  virtual Result<std::unique_ptr<File>> CreateAt(
      const FileId& parent, const std::string& name, int flags, uint32_t mode, FileStat* attr) = 0;
  virtual Result<FileStat> MkdirAt(const FileId& parent,
                                   const std::string& name,
                                   uint32_t mode) = 0;
  // `mode` includes the file type (S_IFREG, S_IFIFO, S_IFCHR, S_IFBLK, S_IFSOCK).
  virtual Result<FileStat> MknodAt(const FileId& parent,
                                   const std::string& name,
                                   uint32_t mode,
                                   uint64_t rdev) = 0;
  virtual Result<FileStat> SymlinkAt(const std::string& target,
                                     const FileId& parent,
                                     const std::string& name) = 0;
  virtual Result<FileStat> LinkAt(const FileId& id,
                                  const FileId& new_parent,
                                  const std::string& new_name) = 0;
  virtual Result<std::string> ReadlinkAt(const FileId& id) = 0;
  virtual Status UnlinkAt(const FileId& parent, const std::string& name) = 0;
  virtual Status RmdirAt(const FileId& parent, const std::string& name) = 0;
  virtual Status RenameAt(const FileId& parent,
                          const std::string& name,
                          const FileId& new_parent,
                          const std::string& new_name,
                          unsigned flags) = 0;
  // One page of directory `dir`, as ReadDirPage, except that "." (cookie 1) and ".." (cookie 2)
  // come first (from cookie 0) as the MDS sends them.
  virtual Result<DirPage> ReadDirAt(const FileId& dir,
                                    uint64_t cookie,
                                    uint32_t max_entries,
                                    bool plus) = 0;
  virtual Status SetXattrAt(const FileId& id,
                            const std::string& name,
                            const std::string& value,
                            int flags) = 0;
  virtual Result<std::string> GetXattrAt(const FileId& id, const std::string& name) = 0;
  virtual Result<std::vector<std::string>> ListXattrAt(const FileId& id) = 0;
  virtual Status RemoveXattrAt(const FileId& id, const std::string& name) = 0;
  virtual Result<FileLayout> GetLayoutAt(const FileId& id) = 0;
  virtual Status SetLayoutAt(const FileId& id, const FileLayout& layout) = 0;
  // FsyncDir of the file or directory `id`.
  virtual Status FsyncDirAt(const FileId& id) = 0;

  // HSM (docs/design.md "HSM"): copies between the OSTs and the cluster's cold tier, done by
  // the OSSes (no file data passes through this client). Blocking. Each returns OK when there
  // is nothing to do (archiving an archived file, restoring one that is not released).
  // Archive: copies the current data version with its checksums, then records it. kBusy when
  // the file changed meanwhile; kNotSupported when the cluster has no cold tier.
  virtual Status HsmArchive(const std::string& path) = 0;
  // Release: after the OSSes checked the copy against the objects, frees the objects (inode,
  // layout, size and times stay). kInvalidArgument when not archived or dirty; kBusy when open.
  virtual Status HsmRelease(const std::string& path) = 0;
  // Restore: writes the released objects back, every block verified. kIoError naming the
  // file when the archived copy is corrupt or missing (the file is then "lost").
  virtual Status HsmRestore(const std::string& path) = 0;
  // Remove: deletes the archived copy (kBusy for a released file: it is the only copy).
  virtual Status HsmRemove(const std::string& path) = 0;
  virtual Result<HsmStatus> HsmGetState(const std::string& path) = 0;
  // Makes `path` (which must not exist) a released file whose data is the plain object
  // `spec.key` of the data repository `spec.url`: size, mtime and one extended attribute set,
  // no byte copied; the first read restores it from the object (`ciuic repo link`). The admin
  // key only (the OSSes fetch what it names). kAlreadyExists when `path` exists.
  virtual Status HsmImport(const std::string& path, const RepoImport& spec) = 0;
  // Export on close of the linked directory `dir` (the admin key only): switched on, every
  // close that wrote a file below `dir` queues the file on the MDS, durably, until
  // RepoQueueDone names it at that data version or later (`ciuic repo sync --interval` drains
  // the queue). Switching it off drops the queue.
  virtual Status RepoSetExportOnClose(const std::string& dir, bool on) = 0;
  // Up to `max` queued files (0: 1,000) and whether `dir` exports on close.
  virtual Result<RepoQueue> RepoListQueue(const std::string& dir, uint32_t max) = 0;
  // Drops the entries exported (each at `version` or later; a newer close stays queued).
  virtual Status RepoQueueDone(const std::string& dir, const std::vector<RepoQueued>& done) = 0;
  // Records `dir` as linked to a data repository (admin key; `ciuic repo link`), so RepoLinks
  // lists it; removing the directory forgets it.
  virtual Status RepoRecordLink(const std::string& dir) = 0;
  // The linked directories, by path, and which of them export on close (admin key).
  virtual Result<std::vector<RepoLink>> RepoLinks() = 0;

  // A SharedMemory of at least `bytes` (rounded up to 4 KiB; pages are allocated when first
  // touched). kInvalidArgument for 0 or more than 16 GiB; kIoError when memfds are unavailable.
  virtual Result<std::shared_ptr<SharedMemory>> NewSharedMemory(size_t bytes) = 0;
  // A SharedMemory over the caller's memfd `fd` (this maps a duplicate; the caller may close
  // its own), for memory another library made. The memfd must be sealed against resizing
  // (F_SEAL_SHRINK | F_SEAL_GROW) and hold a positive multiple of 4 KiB: kInvalidArgument
  // otherwise, since an OSS must never fault on pages taken away under it.
  virtual Result<std::shared_ptr<SharedMemory>> ImportSharedMemory(int fd) = 0;

  // Advisory locks, held by the MDS for this Client's session and coherent across every client
  // of the cluster; released when the session closes or its lease expires (and lost when the
  // MDS restarts). The owner is (this session, `owner`); a new lock of an owner replaces what
  // it held in the range (POSIX: ranges split and merge; flock: the range is the whole file).
  // Never waits: returns true when done, false when another owner holds a conflicting lock
  // (described in *conflict when not null); callers that want to wait retry. kUnlock always
  // succeeds. kStale when the session is gone.
  virtual Result<bool> LockAt(const FileId& id,
                              LockKind kind,
                              uint64_t owner,
                              const LockRange& want,
                              LockRange* conflict) = 0;
  // F_GETLK: true when `want` could be granted now (nothing changes), else false with the
  // first conflicting lock in *conflict.
  virtual Result<bool> TestLockAt(const FileId& id,
                                  LockKind kind,
                                  uint64_t owner,
                                  const LockRange& want,
                                  LockRange* conflict) = 0;
};

}  // namespace ciuic
