#include "objstore/s3_xml.h"

#include <cstdint>

namespace ciuic::objstore::xml {
namespace {

constexpr int kMaxDepth = 64;

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes one reference "&...;" at text[0]; returns its length, or 0 if it is not one.
size_t DecodeReference(std::string_view text, std::string& out) {
  size_t semi = text.find(';');
  if (semi == std::string_view::npos || semi > 12) {
    return 0;
  }
  std::string_view ref = text.substr(1, semi - 1);
  static constexpr std::pair<std::string_view, char> kNamed[] = {
      {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
  for (const auto& [name, c] : kNamed) {
    if (ref == name) {
      out.push_back(c);
      return semi + 1;
    }
  }
  if (ref.size() >= 2 && ref[0] == '#') {
    bool hex = ref[1] == 'x' || ref[1] == 'X';
    std::string_view digits = ref.substr(hex ? 2 : 1);
    if (digits.empty()) {
      return 0;
    }
    uint32_t cp = 0;
    for (char c : digits) {
      int v;
      if (c >= '0' && c <= '9') {
        v = c - '0';
      } else if (hex && c >= 'a' && c <= 'f') {
        v = c - 'a' + 10;
      } else if (hex && c >= 'A' && c <= 'F') {
        v = c - 'A' + 10;
      } else {
        return 0;
      }
      cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(v);
      if (cp > 0x10FFFF) {
        return 0;
      }
    }
    AppendUtf8(cp, out);
    return semi + 1;
  }
  return 0;
}

bool IsNameChar(char c) {
  return c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '>' && c != '/' && c != '=';
}

class Parser {
 public:
  explicit Parser(std::string_view doc) : doc_(doc) {}

  Result<Element> ParseDocument() {
    CIUIC_RETURN_IF_ERROR(SkipMisc());
    if (pos_ >= doc_.size() || doc_[pos_] != '<') {
      return Fail("no root element");
    }
    Element root;
    CIUIC_RETURN_IF_ERROR(ParseElement(root, 0));
    return root;
  }

 private:
  Status Fail(const std::string& what) const {
    return Status::Corruption("malformed XML at byte " + std::to_string(pos_) + ": " + what);
  }

  bool StartsWith(std::string_view s) const { return doc_.substr(pos_, s.size()) == s; }

  // Skips text up to and including `end`.
  Status SkipPast(std::string_view end) {
    size_t at = doc_.find(end, pos_);
    if (at == std::string_view::npos) {
      return Fail("unterminated markup, expected '" + std::string(end) + "'");
    }
    pos_ = at + end.size();
    return Status::OK();
  }

  // Skips white space, the declaration, processing instructions, comments and DOCTYPE.
  Status SkipMisc() {
    while (pos_ < doc_.size()) {
      char c = doc_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\xEF' || c == '\xBB' ||
          c == '\xBF') {
        ++pos_;  // white space, or a UTF-8 byte order mark
      } else if (StartsWith("<?")) {
        CIUIC_RETURN_IF_ERROR(SkipPast("?>"));
      } else if (StartsWith("<!--")) {
        CIUIC_RETURN_IF_ERROR(SkipPast("-->"));
      } else if (StartsWith("<!")) {
        CIUIC_RETURN_IF_ERROR(SkipPast(">"));
      } else {
        break;
      }
    }
    return Status::OK();
  }

  std::string ReadName() {
    size_t start = pos_;
    while (pos_ < doc_.size() && IsNameChar(doc_[pos_])) {
      ++pos_;
    }
    std::string_view name = doc_.substr(start, pos_ - start);
    size_t colon = name.rfind(':');
    if (colon != std::string_view::npos) {
      name.remove_prefix(colon + 1);
    }
    return std::string(name);
  }

  // Skips attributes up to '>' or "/>"; returns whether the tag closed itself.
  Result<bool> SkipAttributes() {
    while (pos_ < doc_.size()) {
      char c = doc_[pos_];
      if (c == '"' || c == '\'') {
        size_t end = doc_.find(c, pos_ + 1);
        if (end == std::string_view::npos) {
          return Fail("unterminated attribute value");
        }
        pos_ = end + 1;
      } else if (c == '/' && pos_ + 1 < doc_.size() && doc_[pos_ + 1] == '>') {
        pos_ += 2;
        return true;
      } else if (c == '>') {
        ++pos_;
        return false;
      } else {
        ++pos_;
      }
    }
    return Fail("unterminated start tag");
  }

  Status ParseElement(Element& el, int depth) {
    if (depth >= kMaxDepth) {
      return Fail("nested deeper than " + std::to_string(kMaxDepth) + " elements");
    }
    ++pos_;  // '<'
    el.name = ReadName();
    if (el.name.empty()) {
      return Fail("a tag without a name");
    }
    CIUIC_ASSIGN_OR_RETURN(bool empty, SkipAttributes());
    if (empty) {
      return Status::OK();
    }
    while (pos_ < doc_.size()) {
      char c = doc_[pos_];
      if (c != '<') {
        size_t lt = doc_.find('<', pos_);
        if (lt == std::string_view::npos) {
          lt = doc_.size();
        }
        el.text.append(DecodeEntities(doc_.substr(pos_, lt - pos_)));
        pos_ = lt;
      } else if (StartsWith("<![CDATA[")) {
        size_t end = doc_.find("]]>", pos_ + 9);
        if (end == std::string_view::npos) {
          return Fail("unterminated CDATA");
        }
        el.text.append(doc_.substr(pos_ + 9, end - pos_ - 9));
        pos_ = end + 3;
      } else if (StartsWith("<!--")) {
        CIUIC_RETURN_IF_ERROR(SkipPast("-->"));
      } else if (StartsWith("<?")) {
        CIUIC_RETURN_IF_ERROR(SkipPast("?>"));
      } else if (StartsWith("</")) {
        pos_ += 2;
        std::string name = ReadName();
        if (name != el.name) {
          return Fail("</" + name + "> closes <" + el.name + ">");
        }
        return SkipPast(">");
      } else {
        el.children.emplace_back();
        CIUIC_RETURN_IF_ERROR(ParseElement(el.children.back(), depth + 1));
      }
    }
    return Fail("<" + el.name + "> is not closed");
  }

  std::string_view doc_;
  size_t pos_ = 0;
};

}  // namespace

const Element* Element::Child(std::string_view child) const {
  for (const Element& c : children) {
    if (c.name == child) {
      return &c;
    }
  }
  return nullptr;
}

std::vector<const Element*> Element::Children(std::string_view child) const {
  std::vector<const Element*> out;
  for (const Element& c : children) {
    if (c.name == child) {
      out.push_back(&c);
    }
  }
  return out;
}

std::string Element::ChildText(std::string_view child) const {
  const Element* c = Child(child);
  return c == nullptr ? std::string() : c->text;
}

Result<Element> Parse(std::string_view doc) {
  return Parser(doc).ParseDocument();
}

std::string DecodeEntities(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '&') {
      size_t used = DecodeReference(text.substr(i), out);
      if (used > 0) {
        i += used - 1;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

std::string EscapeText(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out.append("&amp;");
        break;
      case '<':
        out.append("&lt;");
        break;
      case '>':
        out.append("&gt;");
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace ciuic::objstore::xml
