// A small, tolerant XML reader for the S3 answers S3Store needs (ListObjectsV2, multipart
// upload results, error bodies). It builds a tree of elements with their text, skips the
// declaration, comments, processing instructions, DOCTYPE and attributes, reads CDATA as text,
// decodes the five named entities and numeric character references, and drops namespace
// prefixes from names. It is not a validating parser: it only has to read what S3-compatible
// servers send, and to fail cleanly (kCorruption) on anything else.
//
// Thread-safety: pure functions and values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ciuic::objstore::xml {

struct Element {
  std::string name;  // local name, without a namespace prefix
  std::string text;  // the element's own character data, entities decoded, untrimmed
  std::vector<Element> children;

  // Returns the first child named `child`, or nullptr.
  const Element* Child(std::string_view child) const;
  // Returns every child named `child`, in document order.
  std::vector<const Element*> Children(std::string_view child) const;
  // Returns the text of the first child named `child`, or "" if there is none.
  std::string ChildText(std::string_view child) const;
};

// Parses a document and returns its root element. kCorruption (saying where) if it is not
// well-formed enough to read, nests deeper than 64 elements or is empty.
Result<Element> Parse(std::string_view doc);

// Returns `text` with &amp; &lt; &gt; &quot; &apos; and &#N; / &#xH; decoded (as UTF-8). An
// unknown or unterminated reference is kept as written.
std::string DecodeEntities(std::string_view text);

// Returns `text` with & < > written as entities: character data of a request body. Quotes are
// left alone (an ETag is sent as "..."; not every server decodes &quot;).
std::string EscapeText(std::string_view text);

}  // namespace ciuic::objstore::xml
