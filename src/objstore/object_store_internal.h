// What the object-store backends share beyond the interface: message quoting, option checks,
// and the one listing algorithm (prefix, delimiter roll-up, pagination) that each backend runs
// over a cursor of its keys. Not for users of ObjectStore.
// Thread-safety: free functions are pure; a KeyCursor is used by one thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "objstore/object_store.h"

namespace ciuic::objstore::internal {

inline constexpr size_t kMaxKeyBytes = 1024;
inline constexpr uint32_t kMaxListKeys = 1000;
inline constexpr size_t kMaxMetadataNameBytes = 128;
inline constexpr size_t kMaxMetadataBytes = 2048;

// Returns `key` in single quotes for messages: valid UTF-8 as is, other bytes, control
// characters, quotes and backslashes escaped ("\x01").
std::string QuoteKey(std::string_view key);

// Returns true if `s` is well-formed UTF-8: no stray continuation bytes, overlong forms,
// UTF-16 surrogates or code points past U+10FFFF.
bool IsValidUtf8(std::string_view s);

// Returns OK if every metadata name is 1..128 bytes of [a-z0-9-], every value printable ASCII,
// and names and values come to at most 2 KiB together (what S3 carries in x-amz-meta-*
// headers); else kInvalidArgument naming it, prefixed by `where` (the store and key).
Status ValidateMetadata(const PutOptions& opts, std::string_view where);

// Returns OK if max_keys is 1..1000 and prefix, delimiter and start hold no NUL; else
// kInvalidArgument prefixed by `where` (the store).
Status ValidateListOptions(const ListOptions& opts, std::string_view where);

// Returns the smallest string greater than every string that starts with `prefix`, or nullopt
// if there is none (`prefix` is empty or all 0xff bytes).
std::optional<std::string> PrefixSuccessor(std::string_view prefix);

// A forward-only position in a store's keys, in unsigned-byte order.
class KeyCursor {
 public:
  virtual ~KeyCursor() = default;
  // Moves to the first key >= `lower`. `lower` never precedes the current key. Errors are the
  // store's (kIoError, kPermissionDenied).
  virtual Status Seek(const std::string& lower) = 0;
  // True while the cursor is on a key.
  virtual bool Valid() const = 0;
  // The current key's info (key, size, etag, mtime_ms; no metadata). Only while Valid().
  virtual const ObjectInfo& info() const = 0;
  // Moves to the next key.
  virtual Status Next() = 0;
};

// Produces one page of `opts` (already validated) from `cursor`, which must be unpositioned
// and may hold keys outside opts.prefix. The page's `next` is the last key or prefix it
// returned; a page that ends on a rolled-up prefix resumes after every key under it.
Result<ListPage> ListWithCursor(const ListOptions& opts, KeyCursor& cursor);

}  // namespace ciuic::objstore::internal
