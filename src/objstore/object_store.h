// ObjectStore: the cold tier's interface to an object store (S3 and S3-compatible servers, a
// local directory, an in-memory twin for tests). Servers use it (the OSS moves stripe objects
// to and from it; the MDS lists data repositories); the client library never links it.
//
// Keys are byte strings of 1..1024 bytes without NUL, compared as unsigned bytes (S3's order).
// Every store is rooted: a store opened on s3://bucket/prefix or file:///dir sees keys relative
// to that root, and never anything outside it.
//
// Errors every method may return, beside the ones it names:
//   kInvalidArgument  a malformed key or option (says which);
//   kPermissionDenied the store refused the credentials or the operation (403), naming the
//                     bucket (or directory) and the key;
//   kUnavailable      the store could not be reached, or kept answering 5xx/throttling past the
//                     retry bound;
//   kTimedOut         a request ran past its timeout on every try;
//   kIoError          any other failure (a local disk error, an unexpected HTTP answer);
//   kCorruption       the store answered something that cannot be right (a short body, an
//                     unparsable listing).
// Every message names the store (Describe()) and the key, so it can be shown to a user as is.
//
// Thread-safety: every method may be called from many threads at once. Methods block the
// caller (they do network or disk IO): never call them on an asio network thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ciuic::objstore {

struct ObjectInfo {
  std::string key;  // relative to the store's root
  uint64_t size = 0;
  // Opaque; changes whenever the content changes (S3's ETag without quotes; a local file's
  // identity and modification time). Data repositories remember it to see changes.
  std::string etag;
  int64_t mtime_ms = 0;  // last modification, Unix milliseconds
  // User metadata given to Put (S3's x-amz-meta-*): lower-case names, filled by Head only.
  std::map<std::string, std::string> metadata;
};

struct ListOptions {
  std::string prefix;        // only keys that start with it
  std::string delimiter;     // "" lists every key; "/" rolls keys up at the next "/" (a directory)
  std::string start;         // ListPage::next of the page before; "" for the first page
  uint32_t max_keys = 1000;  // per page, objects and prefixes together; 1..1000
};

struct ListPage {
  std::vector<ObjectInfo> objects;    // sorted by key; metadata is not filled
  std::vector<std::string> prefixes;  // the rolled-up "directories", each ending in the delimiter
  std::string next;                   // "" when this is the last page
};

struct PutOptions {
  std::map<std::string, std::string> metadata;  // names are [a-z0-9-], values printable ASCII
};

// Fills `dst` with the object's bytes [offset, offset + dst.size()) while a Put streams them.
// It is called for disjoint ranges, possibly from several threads at once, and possibly more
// than once for the same range (a retried part). An error stops the put and is returned.
using PutSource = std::function<Status(uint64_t offset, std::span<char> dst)>;

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // Stores `data` as the whole object `key`, replacing any object of that key. When it returns
  // OK the object is complete and durable, and readers see all of it or (before) none of it.
  virtual Status Put(std::string_view key, std::string_view data, const PutOptions& opts = {}) = 0;

  // Stores an object of `size` bytes read through `source`. S3 uploads it in parts, several at
  // once, past the backend's part size; a failed upload is aborted and leaves no object.
  // Atomic and durable as Put.
  virtual Status PutStream(std::string_view key,
                           uint64_t size,
                           const PutSource& source,
                           const PutOptions& opts = {}) = 0;

  // Reads the object's bytes [offset, offset + dst.size()) into `dst` and returns how many it
  // read: fewer only when the object ends first (0 at or past its end). Large ranges are read
  // as several ranged GETs at once. Returns kNotFound if there is no such object.
  virtual Result<size_t> Get(std::string_view key, uint64_t offset, std::span<char> dst) = 0;

  // Get, but only from the object's version whose ETag is `etag` (as Head and List give it):
  // kAborted naming the key when the object has another ETag (it changed), kNotFound when
  // there is none. S3 checks it in each request (If-Match, and the ETag of the answer), so a
  // data repository's file loads with one request per range; the default Heads before and
  // after the Get.
  virtual Result<size_t> GetVersion(std::string_view key,
                                    std::string_view etag,
                                    uint64_t offset,
                                    std::span<char> dst);

  // Returns the object's size, ETag, time and metadata. kNotFound if there is none.
  virtual Result<ObjectInfo> Head(std::string_view key) = 0;

  // Returns one page of the keys under opts.prefix, in key order.
  virtual Result<ListPage> List(const ListOptions& opts) = 0;

  // Removes the object. Removing one that does not exist is OK (as in S3).
  virtual Status Delete(std::string_view key) = 0;

  // Names the store for messages and `ciuic` output: "s3://bucket/prefix", "file:///dir",
  // "mem://name".
  virtual std::string Describe() const = 0;

  // Reads the whole object (Head, then Get). kCorruption if it changed size in between.
  Result<std::string> GetAll(std::string_view key);
};

// Returns OK if `key` is a valid key: 1..1024 bytes, no NUL, no empty, "." or ".." component
// (so no "//", no leading or trailing "/"): what both S3 and a directory can hold; else
// kInvalidArgument naming it.
Status ValidateKey(std::string_view key);

}  // namespace ciuic::objstore
