// RFC 8259 JSON reader/writer. See json.h for the contract.
//
// Implementation notes:
// - Recursive descent with an explicit depth bound (kMaxDepth), so hostile
//   input cannot exhaust the stack.
// - The input must be valid UTF-8 (RFC 8259 section 8.1); invalid sequences,
//   unescaped control characters and lone surrogate escapes are rejected.
// - Numbers: the literal is checked against the RFC grammar, converted with
//   strtod in the "C" locale (locale-independent) and, when it is an integer
//   literal that fits in int64, also kept exactly. Literals whose magnitude
//   overflows a double are rejected; underflow rounds towards zero.
// - Serialize() writes doubles in the shortest form that round-trips and
//   appends ".0" to integral non-integer numbers so that re-parsing keeps the
//   integer/double distinction. Non-finite doubles have no JSON form and are
//   written as null.
#include "transport/base/json.h"

#include <locale.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace prism::json {

namespace {

constexpr int kMaxDepth = 64;

locale_t CLocale() {
  static locale_t loc = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(0));
  return loc;
}

}  // namespace

namespace internal {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<Value> ParseDocument() {
    SkipWs();
    Value v;
    if (absl::Status s = ParseValue(0, &v); !s.ok()) return s;
    SkipWs();
    if (pos_ != text_.size()) return Error("unexpected data after value");
    return v;
  }

 private:
  absl::Status Error(std::string_view what) const {
    return ErrorAt(pos_, what);
  }

  absl::Status ErrorAt(size_t at, std::string_view what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("json: ", line, ":", col, ": ", std::string(what)));
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  void SkipWs() {
    while (!AtEnd()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  bool ConsumeLiteral(std::string_view lit) {
    if (text_.substr(pos_, lit.size()) == lit) {
      pos_ += lit.size();
      return true;
    }
    return false;
  }

  absl::Status ParseValue(int depth, Value* out) {
    if (AtEnd()) return Error("unexpected end of input, expected a value");
    char c = Peek();
    switch (c) {
      case '{':
        return ParseObject(depth + 1, out);
      case '[':
        return ParseArray(depth + 1, out);
      case '"': {
        std::string s;
        if (absl::Status st = ParseString(&s); !st.ok()) return st;
        *out = Value::String(std::move(s));
        return absl::OkStatus();
      }
      case 't':
        if (ConsumeLiteral("true")) {
          *out = Value::Bool(true);
          return absl::OkStatus();
        }
        return Error("invalid literal");
      case 'f':
        if (ConsumeLiteral("false")) {
          *out = Value::Bool(false);
          return absl::OkStatus();
        }
        return Error("invalid literal");
      case 'n':
        if (ConsumeLiteral("null")) {
          *out = Value();
          return absl::OkStatus();
        }
        return Error("invalid literal");
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
        return Error("unexpected character, expected a value");
    }
  }

  absl::Status ParseObject(int depth, Value* out) {
    if (depth > kMaxDepth) return Error("nesting deeper than 64");
    ++pos_;  // '{'
    Value obj = Value::Object();
    std::unordered_set<std::string> keys;  // membership only; order unused
    SkipWs();
    if (Peek() == '}') {
      ++pos_;
      *out = std::move(obj);
      return absl::OkStatus();
    }
    while (true) {
      SkipWs();
      if (Peek() != '"') return Error("expected string key in object");
      size_t key_pos = pos_;
      std::string key;
      if (absl::Status st = ParseString(&key); !st.ok()) return st;
      if (!keys.insert(key).second) {
        return ErrorAt(key_pos, absl::StrCat("duplicate key \"", key, "\""));
      }
      SkipWs();
      if (Peek() != ':') return Error("expected ':' after object key");
      ++pos_;
      SkipWs();
      Value v;
      if (absl::Status st = ParseValue(depth, &v); !st.ok()) return st;
      // Keys are unique (checked above): append in O(1); Set() would scan.
      obj.members_.emplace_back(std::move(key), std::move(v));
      SkipWs();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        break;
      }
      return Error("expected ',' or '}' in object");
    }
    *out = std::move(obj);
    return absl::OkStatus();
  }

  absl::Status ParseArray(int depth, Value* out) {
    if (depth > kMaxDepth) return Error("nesting deeper than 64");
    ++pos_;  // '['
    Value arr = Value::Array();
    SkipWs();
    if (Peek() == ']') {
      ++pos_;
      *out = std::move(arr);
      return absl::OkStatus();
    }
    while (true) {
      SkipWs();
      Value v;
      if (absl::Status st = ParseValue(depth, &v); !st.ok()) return st;
      arr.Push(std::move(v));
      SkipWs();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == ']') {
        ++pos_;
        break;
      }
      return Error("expected ',' or ']' in array");
    }
    *out = std::move(arr);
    return absl::OkStatus();
  }

  static int HexVal(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Reads 4 hex digits at pos_ (after "\u").
  absl::Status ReadHex4(uint32_t* out) {
    if (pos_ + 4 > text_.size()) return Error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      int h = HexVal(text_[pos_ + i]);
      if (h < 0) return ErrorAt(pos_ + i, "invalid hex digit in \\u escape");
      v = (v << 4) | static_cast<uint32_t>(h);
    }
    pos_ += 4;
    *out = v;
    return absl::OkStatus();
  }

  static void AppendUtf8(uint32_t cp, std::string* s) {
    if (cp < 0x80) {
      s->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // Length of the valid UTF-8 sequence at pos_, or 0 if invalid.
  size_t Utf8SeqLen() const {
    auto b = [&](size_t i) -> uint8_t {
      return pos_ + i < text_.size() ? static_cast<uint8_t>(text_[pos_ + i])
                                     : 0;
    };
    auto cont = [&](size_t i) { return (b(i) & 0xC0) == 0x80; };
    uint8_t c = b(0);
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
      if (!cont(1) || !cont(2)) return 0;
      if (c == 0xE0 && b(1) < 0xA0) return 0;   // overlong
      if (c == 0xED && b(1) >= 0xA0) return 0;  // surrogates
      return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
      if (!cont(1) || !cont(2) || !cont(3)) return 0;
      if (c == 0xF0 && b(1) < 0x90) return 0;   // overlong
      if (c == 0xF4 && b(1) >= 0x90) return 0;  // > U+10FFFF
      return 4;
    }
    return 0;
  }

  absl::Status ParseString(std::string* out) {
    ++pos_;  // opening quote
    out->clear();
    while (true) {
      if (AtEnd()) return Error("unterminated string");
      char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (static_cast<uint8_t>(c) < 0x20) {
        return Error("unescaped control character in string");
      }
      if (c == '\\') {
        size_t esc_pos = pos_;
        ++pos_;
        if (AtEnd()) return Error("unterminated escape");
        char e = text_[pos_++];
        switch (e) {
          case '"':
            out->push_back('"');
            break;
          case '\\':
            out->push_back('\\');
            break;
          case '/':
            out->push_back('/');
            break;
          case 'b':
            out->push_back('\b');
            break;
          case 'f':
            out->push_back('\f');
            break;
          case 'n':
            out->push_back('\n');
            break;
          case 'r':
            out->push_back('\r');
            break;
          case 't':
            out->push_back('\t');
            break;
          case 'u': {
            uint32_t cp = 0;
            if (absl::Status st = ReadHex4(&cp); !st.ok()) return st;
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
              return ErrorAt(esc_pos, "lone low surrogate in \\u escape");
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (text_.substr(pos_, 2) != "\\u") {
                return ErrorAt(esc_pos, "high surrogate without low surrogate");
              }
              pos_ += 2;
              uint32_t lo = 0;
              if (absl::Status st = ReadHex4(&lo); !st.ok()) return st;
              if (lo < 0xDC00 || lo > 0xDFFF) {
                return ErrorAt(esc_pos, "high surrogate without low surrogate");
              }
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            AppendUtf8(cp, out);
            break;
          }
          default:
            return ErrorAt(esc_pos, "invalid escape sequence");
        }
        continue;
      }
      size_t n = Utf8SeqLen();
      if (n == 0) return Error("invalid UTF-8 in string");
      out->append(text_.substr(pos_, n));
      pos_ += n;
    }
  }

  absl::Status ParseNumber(Value* out) {
    size_t start = pos_;
    bool integer = true;
    if (Peek() == '-') ++pos_;
    auto digit = [&] {
      return !AtEnd() && text_[pos_] >= '0' && text_[pos_] <= '9';
    };
    if (!digit()) return Error("invalid number: expected digit");
    if (text_[pos_] == '0') {
      ++pos_;
      if (digit()) return Error("invalid number: leading zero");
    } else {
      while (digit()) ++pos_;
    }
    if (Peek() == '.') {
      integer = false;
      ++pos_;
      if (!digit()) return Error("invalid number: expected digit after '.'");
      while (digit()) ++pos_;
    }
    if (Peek() == 'e' || Peek() == 'E') {
      integer = false;
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (!digit()) return Error("invalid number: expected exponent digit");
      while (digit()) ++pos_;
    }
    std::string_view lit = text_.substr(start, pos_ - start);
    std::string buf(lit);
    double d = strtod_l(buf.c_str(), nullptr, CLocale());
    if (std::isinf(d)) return ErrorAt(start, "number out of range");
    if (integer) {
      int64_t i = 0;
      auto [ptr, ec] = std::from_chars(lit.data(), lit.data() + lit.size(), i);
      if (ec == std::errc() && ptr == lit.data() + lit.size()) {
        *out = Value::Int(i);
        return absl::OkStatus();
      }
    }
    *out = Value::Number(d);
    return absl::OkStatus();
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace internal

namespace {

void AppendEscaped(const std::string& s, std::string* out) {
  out->push_back('"');
  static constexpr char kHex[] = "0123456789abcdef";
  for (char ch : s) {
    uint8_t c = static_cast<uint8_t>(ch);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 0xF]);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

void AppendNumber(const Value& v, std::string* out) {
  if (v.is_integer()) {
    out->append(std::to_string(v.as_int()));
    return;
  }
  double d = v.as_double();
  if (!std::isfinite(d)) {
    out->append("null");
    return;
  }
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), d);
  if (ec != std::errc()) {
    out->append("null");
    return;
  }
  std::string_view s(buf, static_cast<size_t>(ptr - buf));
  out->append(s);
  if (s.find_first_of(".eE") == std::string_view::npos) out->append(".0");
}

void NewLine(int indent, int level, std::string* out) {
  out->push_back('\n');
  out->append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
}

void SerializeTo(const Value& v, int indent, int level, std::string* out) {
  switch (v.type()) {
    case Value::Type::kNull:
      out->append("null");
      return;
    case Value::Type::kBool:
      out->append(v.as_bool() ? "true" : "false");
      return;
    case Value::Type::kNumber:
      AppendNumber(v, out);
      return;
    case Value::Type::kString:
      AppendEscaped(v.as_string(), out);
      return;
    case Value::Type::kArray: {
      if (v.items().empty()) {
        out->append("[]");
        return;
      }
      out->push_back('[');
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out->push_back(',');
        first = false;
        if (indent >= 0) NewLine(indent, level + 1, out);
        SerializeTo(item, indent, level + 1, out);
      }
      if (indent >= 0) NewLine(indent, level, out);
      out->push_back(']');
      return;
    }
    case Value::Type::kObject: {
      if (v.members().empty()) {
        out->append("{}");
        return;
      }
      out->push_back('{');
      bool first = true;
      for (const auto& [key, member] : v.members()) {
        if (!first) out->push_back(',');
        first = false;
        if (indent >= 0) NewLine(indent, level + 1, out);
        AppendEscaped(key, out);
        out->append(indent >= 0 ? ": " : ":");
        SerializeTo(member, indent, level + 1, out);
      }
      if (indent >= 0) NewLine(indent, level, out);
      out->push_back('}');
      return;
    }
  }
}

}  // namespace

Value Value::Bool(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.bool_ = b;
  return v;
}

Value Value::Number(double d) {
  Value v;
  v.type_ = Type::kNumber;
  v.number_ = d;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.type_ = Type::kNumber;
  v.is_int_ = true;
  v.int_ = i;
  v.number_ = static_cast<double>(i);
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.string_ = std::move(s);
  return v;
}

Value Value::Array() {
  Value v;
  v.type_ = Type::kArray;
  return v;
}

Value Value::Object() {
  Value v;
  v.type_ = Type::kObject;
  return v;
}

const Value* Value::Find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& [k, v] : members_) {
    if (k == key) return &v;
  }
  return nullptr;
}

absl::StatusOr<double> Value::GetDouble(std::string_view key,
                                        double def) const {
  const Value* v = Find(key);
  if (v == nullptr) return def;
  if (!v->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("json: \"", std::string(key), "\" must be a number"));
  }
  return v->as_double();
}

absl::StatusOr<int64_t> Value::GetInt(std::string_view key, int64_t def) const {
  const Value* v = Find(key);
  if (v == nullptr) return def;
  if (const std::optional<int64_t> w = v->as_whole()) return *w;
  return absl::InvalidArgumentError(
      absl::StrCat("json: \"", std::string(key), "\" must be an integer"));
}

std::optional<int64_t> Value::as_whole() const {
  if (!is_number()) return std::nullopt;
  if (is_integer()) return as_int();
  // Integral doubles such as 1e3 when they fit exactly.
  if (std::trunc(number_) == number_ && number_ >= -9.2e18 &&
      number_ <= 9.2e18) {
    return static_cast<int64_t>(number_);
  }
  return std::nullopt;
}

absl::StatusOr<bool> Value::GetBool(std::string_view key, bool def) const {
  const Value* v = Find(key);
  if (v == nullptr) return def;
  if (!v->is_bool()) {
    return absl::InvalidArgumentError(
        absl::StrCat("json: \"", std::string(key), "\" must be a boolean"));
  }
  return v->as_bool();
}

absl::StatusOr<std::string> Value::GetString(std::string_view key,
                                             std::string_view def) const {
  const Value* v = Find(key);
  if (v == nullptr) return std::string(def);
  if (!v->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("json: \"", std::string(key), "\" must be a string"));
  }
  return v->as_string();
}

absl::Status Value::CheckKeys(absl::Span<const std::string_view> known,
                              absl::Span<const std::string_view> more,
                              std::string_view where) const {
  if (type_ != Type::kObject) return absl::OkStatus();
  for (const auto& member : members_) {
    if (std::find(known.begin(), known.end(), member.first) != known.end() ||
        std::find(more.begin(), more.end(), member.first) != more.end()) {
      continue;
    }
    std::string list;
    for (absl::Span<const std::string_view> part : {known, more}) {
      for (std::string_view k : part) {
        if (!list.empty()) list += ", ";
        list += k;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(where), ": unknown key \"", member.first,
                     "\" (known: ", list, ")"));
  }
  return absl::OkStatus();
}

Value& Value::Push(Value v) {
  if (type_ != Type::kArray) {
    *this = Array();
  }
  items_.push_back(std::move(v));
  return items_.back();
}

Value& Value::Set(std::string key, Value v) {
  if (type_ != Type::kObject) {
    *this = Object();
  }
  for (auto& [k, existing] : members_) {
    if (k == key) {
      existing = std::move(v);
      return existing;
    }
  }
  members_.emplace_back(std::move(key), std::move(v));
  return members_.back().second;
}

absl::StatusOr<Value> Parse(std::string_view text) {
  return internal::Parser(text).ParseDocument();
}

absl::StatusOr<Value> ParseFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("json: cannot open ", path));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<Value> v = Parse(ss.str());
  if (!v.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", v.status().message()));
  }
  return v;
}

std::string Serialize(const Value& v, int indent) {
  std::string out;
  SerializeTo(v, indent, 0, &out);
  return out;
}

}  // namespace prism::json
