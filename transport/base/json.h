// A small JSON reader/writer for configuration files (topologies, simulator
// scenarios, benchmark output). Not for the data path.
//
// Contract: Parse() accepts RFC 8259 JSON (UTF-8 passed through, \u escapes
// decoded), rejects anything else with InvalidArgument naming line:column,
// and bounds nesting depth (64). Objects keep member order as written, so
// iteration is deterministic; duplicate keys are an error. Numbers are held
// as double plus, when the literal was an integer that fits, an exact int64.
#ifndef PRISM_BASE_JSON_H_
#define PRISM_BASE_JSON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace prism::json {

namespace internal {
class Parser;  // json.cc; appends object members it has already checked
}  // namespace internal

class Value {
 public:
  enum class Type : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };

  Value() = default;  // null
  static Value Bool(bool b);
  static Value Number(double d);
  static Value Int(int64_t i);
  static Value String(std::string s);
  static Value Array();
  static Value Object();

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  bool as_bool() const { return bool_; }
  double as_double() const { return number_; }
  // Exact when the literal was an integer; otherwise the truncated double
  // (saturated to the int64 range, 0 for NaN, so the cast is always defined).
  int64_t as_int() const {
    if (is_int_) return int_;
    if (!(number_ == number_)) return 0;
    if (number_ >= 9223372036854775807.0) return INT64_MAX;
    if (number_ <= -9223372036854775808.0) return INT64_MIN;
    return static_cast<int64_t>(number_);
  }
  bool is_integer() const { return is_int_; }
  const std::string& as_string() const { return string_; }
  const std::vector<Value>& items() const { return items_; }
  const std::vector<std::pair<std::string, Value>>& members() const {
    return members_;
  }

  // A number that is a whole int64 (an integer literal, or an integral
  // double such as 1e3 that fits exactly); nullopt for anything else.
  std::optional<int64_t> as_whole() const;

  // Object lookup; nullptr when absent or not an object.
  const Value* Find(std::string_view key) const;
  // Typed lookups with defaults; InvalidArgument if present with a wrong type.
  absl::StatusOr<double> GetDouble(std::string_view key, double def) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key, int64_t def) const;
  absl::StatusOr<bool> GetBool(std::string_view key, bool def) const;
  absl::StatusOr<std::string> GetString(std::string_view key,
                                        std::string_view def) const;
  // For an object: InvalidArgument naming the first member whose key is not
  // in `known` ("<where>: unknown key \"x\" (known: a, b, ...)"), so that a
  // misspelt setting is an error instead of silently taking its default.
  // OK for any other type (the caller checks the type). `more`: keys known
  // besides `known` (a shared list plus one place's own).
  absl::Status CheckKeys(absl::Span<const std::string_view> known,
                         std::string_view where) const {
    return CheckKeys(known, {}, where);
  }
  absl::Status CheckKeys(absl::Span<const std::string_view> known,
                         absl::Span<const std::string_view> more,
                         std::string_view where) const;

  // Builders (arrays / objects). Set() replaces an existing key.
  Value& Push(Value v);
  Value& Set(std::string key, Value v);

 private:
  friend class internal::Parser;

  Type type_ = Type::kNull;
  bool bool_ = false;
  bool is_int_ = false;
  double number_ = 0;
  int64_t int_ = 0;
  std::string string_;
  std::vector<Value> items_;
  std::vector<std::pair<std::string, Value>> members_;
};

absl::StatusOr<Value> Parse(std::string_view text);
absl::StatusOr<Value> ParseFile(const std::string& path);
// indent < 0: compact; otherwise pretty-printed with that many spaces.
std::string Serialize(const Value& v, int indent = -1);

}  // namespace prism::json

#endif  // PRISM_BASE_JSON_H_
