#include "objstore/object_store.h"

#include <algorithm>

#include <fmt/format.h>

#include "objstore/object_store_internal.h"

namespace ciuic::objstore {

using internal::QuoteKey;

Status ValidateKey(std::string_view key) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format("invalid object key {}: {}", QuoteKey(key), why));
  };
  if (key.empty()) {
    return bad("empty");
  }
  if (key.size() > internal::kMaxKeyBytes) {
    return bad(fmt::format("{} bytes, more than {}", key.size(), internal::kMaxKeyBytes));
  }
  if (key.find('\0') != std::string_view::npos) {
    return bad("holds a NUL byte");
  }
  size_t begin = 0;
  while (begin <= key.size()) {
    size_t end = key.find('/', begin);
    if (end == std::string_view::npos) {
      end = key.size();
    }
    std::string_view part = key.substr(begin, end - begin);
    if (part.empty()) {
      return bad("has an empty path component (a leading, trailing or doubled '/')");
    }
    if (part == "." || part == "..") {
      return bad("has a '.' or '..' path component");
    }
    begin = end + 1;
  }
  return Status::OK();
}

Result<size_t> ObjectStore::GetVersion(std::string_view key,
                                       std::string_view etag,
                                       uint64_t offset,
                                       std::span<char> dst) {
  auto check = [&]() -> Status {
    CIUIC_ASSIGN_OR_RETURN(ObjectInfo info, Head(key));
    if (info.etag != etag) {
      return Status::Aborted(fmt::format("{}: object {} has ETag {}, not {} (it changed)",
                                         Describe(), QuoteKey(key), info.etag, etag));
    }
    return Status::OK();
  };
  CIUIC_RETURN_IF_ERROR(check());
  CIUIC_ASSIGN_OR_RETURN(size_t n, Get(key, offset, dst));
  CIUIC_RETURN_IF_ERROR(check());
  return n;
}

Result<std::string> ObjectStore::GetAll(std::string_view key) {
  CIUIC_ASSIGN_OR_RETURN(ObjectInfo info, Head(key));
  if (info.size == 0) {
    // Nothing to read; a ranged GET of an empty object is what some S3 servers get wrong.
    return std::string();
  }
  // One byte more than Head saw, so an object that grew in between is noticed too.
  std::string data(info.size + 1, '\0');
  CIUIC_ASSIGN_OR_RETURN(size_t n, Get(key, 0, std::span<char>(data.data(), data.size())));
  if (n != info.size) {
    return Status::Corruption(fmt::format("{}: object {} changed size while read ({} -> {}{})",
                                          Describe(), QuoteKey(key), info.size, n,
                                          n > info.size ? " or more" : ""));
  }
  data.resize(n);
  return data;
}

namespace internal {

namespace {

// Returns the length of the valid UTF-8 sequence of 2..4 bytes at the start of `s`, or 0.
size_t Utf8SequenceLength(std::string_view s) {
  auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  auto cont = [&](size_t i, unsigned lo, unsigned hi) {
    return i < s.size() && b(i) >= lo && b(i) <= hi;
  };
  unsigned c = b(0);
  if (c >= 0xc2 && c <= 0xdf) {
    return cont(1, 0x80, 0xbf) ? 2 : 0;
  }
  if (c >= 0xe0 && c <= 0xef) {
    // No overlong forms (E0 80..9F) and no UTF-16 surrogates (ED A0..BF).
    unsigned lo = c == 0xe0 ? 0xa0 : 0x80;
    unsigned hi = c == 0xed ? 0x9f : 0xbf;
    return cont(1, lo, hi) && cont(2, 0x80, 0xbf) ? 3 : 0;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    unsigned lo = c == 0xf0 ? 0x90 : 0x80;
    unsigned hi = c == 0xf4 ? 0x8f : 0xbf;
    return cont(1, lo, hi) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf) ? 4 : 0;
  }
  return 0;
}

bool IsMetadataNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t len = Utf8SequenceLength(s.substr(i));
    if (len == 0) {
      return false;
    }
    i += len;
  }
  return true;
}

std::string QuoteKey(std::string_view key) {
  // Keys are at most 1 KiB; a longer (invalid) one is cut so a message stays readable.
  constexpr size_t kMaxShown = kMaxKeyBytes;
  std::string_view shown = key.substr(0, std::min(key.size(), kMaxShown));
  std::string out = "'";
  size_t i = 0;
  while (i < shown.size()) {
    unsigned char c = static_cast<unsigned char>(shown[i]);
    if (c >= 0x80) {
      size_t len = Utf8SequenceLength(shown.substr(i));
      if (len > 0) {
        out.append(shown.substr(i, len));
        i += len;
        continue;
      }
    }
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  out += '\'';
  if (shown.size() < key.size()) {
    out += fmt::format("... ({} bytes)", key.size());
  }
  return out;
}

Status ValidateMetadata(const PutOptions& opts, std::string_view where) {
  size_t total = 0;
  for (const auto& entry : opts.metadata) {
    // Not a structured binding: clang 14 cannot capture one in the lambda.
    const std::string& name = entry.first;
    const std::string& value = entry.second;
    auto bad = [&](std::string_view why) {
      return Status::InvalidArgument(
          fmt::format("{}: metadata {}: {}", where, QuoteKey(name), why));
    };
    if (name.empty() || name.size() > kMaxMetadataNameBytes) {
      return bad(fmt::format("a name must be 1..{} bytes", kMaxMetadataNameBytes));
    }
    if (!std::all_of(name.begin(), name.end(), IsMetadataNameChar)) {
      return bad("a name may hold only a-z, 0-9 and '-'");
    }
    if (!std::all_of(value.begin(), value.end(), [](char c) { return c >= 0x20 && c < 0x7f; })) {
      return bad("the value must be printable ASCII");
    }
    total += name.size() + value.size();
  }
  if (total > kMaxMetadataBytes) {
    return Status::InvalidArgument(
        fmt::format("{}: metadata of {} bytes, more than {} (names and values together)", where,
                    total, kMaxMetadataBytes));
  }
  return Status::OK();
}

Status ValidateListOptions(const ListOptions& opts, std::string_view where) {
  if (opts.max_keys < 1 || opts.max_keys > kMaxListKeys) {
    return Status::InvalidArgument(
        fmt::format("{}: list max_keys {} is not in 1..{}", where, opts.max_keys, kMaxListKeys));
  }
  auto has_nul = [](const std::string& s) { return s.find('\0') != std::string::npos; };
  if (has_nul(opts.prefix) || has_nul(opts.delimiter) || has_nul(opts.start)) {
    return Status::InvalidArgument(fmt::format(
        "{}: list prefix {}, delimiter or start holds a NUL byte", where, QuoteKey(opts.prefix)));
  }
  return Status::OK();
}

std::optional<std::string> PrefixSuccessor(std::string_view prefix) {
  std::string s(prefix);
  while (!s.empty() && static_cast<unsigned char>(s.back()) == 0xff) {
    s.pop_back();
  }
  if (s.empty()) {
    return std::nullopt;
  }
  s.back() = static_cast<char>(static_cast<unsigned char>(s.back()) + 1);
  return s;
}

Result<ListPage> ListWithCursor(const ListOptions& opts, KeyCursor& cursor) {
  const std::string& prefix = opts.prefix;
  const std::string& delim = opts.delimiter;
  // A key rolls up when the delimiter occurs in it after the prefix; its common prefix ends
  // with the first such occurrence.
  auto rollup_end = [&](const std::string& key) -> size_t {
    if (delim.empty() || key.size() < prefix.size()) {
      return std::string::npos;
    }
    size_t pos = key.find(delim, prefix.size());
    return pos == std::string::npos ? pos : pos + delim.size();
  };

  std::string lower = prefix;
  if (!opts.start.empty()) {
    // `start` is the last entry of the page before. If it was a rolled-up prefix (it ends with
    // the delimiter's first occurrence past the prefix), everything under it was covered.
    std::string after;
    if (opts.start.starts_with(prefix) && rollup_end(opts.start) == opts.start.size()) {
      std::optional<std::string> succ = PrefixSuccessor(opts.start);
      if (!succ) {
        return ListPage{};
      }
      after = std::move(*succ);
    } else {
      after = opts.start + '\0';  // keys hold no NUL: the first key after `start`
    }
    lower = std::max(lower, after);
  }

  ListPage page;
  uint32_t count = 0;
  std::string last;
  CIUIC_RETURN_IF_ERROR(cursor.Seek(lower));
  while (cursor.Valid()) {
    const ObjectInfo& info = cursor.info();
    if (!info.key.starts_with(prefix)) {
      break;  // past every key under the prefix (the cursor is at or after it)
    }
    if (count == opts.max_keys) {
      page.next = last;
      break;
    }
    ++count;
    size_t end = rollup_end(info.key);
    if (end == std::string::npos) {
      page.objects.push_back(info);
      last = info.key;
      CIUIC_RETURN_IF_ERROR(cursor.Next());
      continue;
    }
    std::string common = info.key.substr(0, end);
    std::optional<std::string> succ = PrefixSuccessor(common);
    last = common;
    page.prefixes.push_back(std::move(common));
    if (!succ) {
      break;  // nothing sorts after this prefix's keys
    }
    CIUIC_RETURN_IF_ERROR(cursor.Seek(*succ));
  }
  return page;
}

}  // namespace internal
}  // namespace ciuic::objstore
