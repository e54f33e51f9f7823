// fuzz-libs: prism_base
// Fuzzes the JSON reader: parse, serialize (compact and pretty), re-parse,
// and compare the two trees value by value (types, integer exactness, member
// order, strings byte for byte).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "transport/base/json.h"

namespace {

using prism::json::Value;

void Check(bool ok) {
  if (!ok) abort();
}

bool Same(const Value& a, const Value& b) {
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kNull:
      return true;
    case Value::Type::kBool:
      return a.as_bool() == b.as_bool();
    case Value::Type::kNumber:
      // as_int() is only meaningful (and defined) for integer literals.
      return a.is_integer() == b.is_integer() &&
             (!a.is_integer() || a.as_int() == b.as_int()) &&
             a.as_double() == b.as_double();
    case Value::Type::kString:
      return a.as_string() == b.as_string();
    case Value::Type::kArray:
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!Same(a.items()[i], b.items()[i])) return false;
      }
      return true;
    case Value::Type::kObject:
      if (a.members().size() != b.members().size()) return false;
      for (size_t i = 0; i < a.members().size(); ++i) {
        if (a.members()[i].first != b.members()[i].first ||
            !Same(a.members()[i].second, b.members()[i].second)) {
          return false;
        }
      }
      return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Value> v = prism::json::Parse(text);
  if (!v.ok()) {
    Check(v.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  for (int indent : {-1, 2}) {
    const std::string s = prism::json::Serialize(*v, indent);
    absl::StatusOr<Value> w = prism::json::Parse(s);
    Check(w.ok());
    Check(Same(*v, *w));
    Check(prism::json::Serialize(*w, indent) == s);
  }
  return 0;
}
