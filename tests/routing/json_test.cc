// Tests for transport/base/json.{h,cc}: RFC 8259 acceptance and rejection,
// error positions, depth limit, duplicate keys, escapes, integer exactness and
// serialize/parse round trips.
#include "transport/base/json.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::json {
namespace {

using ::testing::HasSubstr;

Value MustParse(std::string_view text) {
  absl::StatusOr<Value> v = Parse(text);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  return v.ok() ? *v : Value();
}

std::string ErrorOf(std::string_view text) {
  absl::StatusOr<Value> v = Parse(text);
  EXPECT_FALSE(v.ok()) << "accepted: " << text;
  if (v.ok()) return "";
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(v.status().message());
}

TEST(JsonTest, Scalars) {
  EXPECT_TRUE(MustParse("null").is_null());
  EXPECT_TRUE(MustParse(" true ").as_bool());
  EXPECT_FALSE(MustParse("false").as_bool());
  EXPECT_EQ(MustParse("\"hi\"").as_string(), "hi");
  Value n = MustParse("-12.5e1");
  EXPECT_TRUE(n.is_number());
  EXPECT_FALSE(n.is_integer());
  EXPECT_DOUBLE_EQ(n.as_double(), -125.0);
}

TEST(JsonTest, IntegersAreExact) {
  Value v = MustParse(
      "[9007199254740993, -9223372036854775808, "
      "9223372036854775807, 9223372036854775808, 0, -0]");
  ASSERT_EQ(v.items().size(), 6u);
  EXPECT_TRUE(v.items()[0].is_integer());
  EXPECT_EQ(v.items()[0].as_int(), 9007199254740993LL);  // not a double
  EXPECT_EQ(v.items()[1].as_int(), INT64_MIN);
  EXPECT_EQ(v.items()[2].as_int(), INT64_MAX);
  EXPECT_FALSE(v.items()[3].is_integer());  // does not fit: double only
  EXPECT_DOUBLE_EQ(v.items()[3].as_double(), 9223372036854775808.0);
  EXPECT_TRUE(v.items()[4].is_integer());
  EXPECT_EQ(v.items()[5].as_int(), 0);
  EXPECT_FALSE(MustParse("1.0").is_integer());
  EXPECT_FALSE(MustParse("1e2").is_integer());
}

TEST(JsonTest, AsIntSaturatesNonIntegers) {
  EXPECT_EQ(MustParse("1e300").as_int(), INT64_MAX);
  EXPECT_EQ(MustParse("-1e300").as_int(), INT64_MIN);
  EXPECT_EQ(MustParse("-2.75").as_int(), -2);
  EXPECT_EQ(Value::Number(0.0 / 0.0).as_int(), 0);
}

TEST(JsonTest, LargeObjectParsesInLinearTime) {
  std::string text = "{";
  for (int i = 0; i < 100000; ++i) {
    if (i) text += ",";
    text += "\"k" + std::to_string(i) + "\":" + std::to_string(i);
  }
  text += "}";
  Value v = MustParse(text);  // quadratic member insertion would take minutes
  ASSERT_EQ(v.members().size(), 100000u);
  EXPECT_EQ(v.members()[99999].second.as_int(), 99999);
  EXPECT_THAT(ErrorOf(text.substr(0, text.size() - 1) + ",\"k5\":1}"),
              HasSubstr("duplicate key \"k5\""));
}

TEST(JsonTest, ObjectsKeepOrder) {
  Value v = MustParse(R"({"z":1,"a":{"b":[1,2,{}]},"m":null})");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.members().size(), 3u);
  EXPECT_EQ(v.members()[0].first, "z");
  EXPECT_EQ(v.members()[1].first, "a");
  EXPECT_EQ(v.members()[2].first, "m");
  ASSERT_NE(v.Find("a"), nullptr);
  EXPECT_EQ(v.Find("a")->Find("b")->items().size(), 3u);
  EXPECT_EQ(v.Find("nope"), nullptr);
  EXPECT_EQ(MustParse("[1]").Find("a"), nullptr);  // not an object
}

TEST(JsonTest, Escapes) {
  Value v =
      MustParse(R"("a\"b\\c\/d\b\f\n\r\t\u0041\u00e9\u20ac\ud83d\ude00")");
  EXPECT_EQ(v.as_string(),
            "a\"b\\c/d\b\f\n\r\tA\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  // Raw UTF-8 passes through.
  EXPECT_EQ(MustParse("\"\xE2\x82\xAC\"").as_string(), "\xE2\x82\xAC");
}

TEST(JsonTest, RejectsBadEscapesAndUtf8) {
  EXPECT_THAT(ErrorOf(R"("\ud83d")"), HasSubstr("surrogate"));
  EXPECT_THAT(ErrorOf(R"("\ud83d\u0041")"), HasSubstr("surrogate"));
  EXPECT_THAT(ErrorOf(R"("\ude00")"), HasSubstr("surrogate"));
  EXPECT_THAT(ErrorOf(R"("\u12")"), HasSubstr("escape"));
  EXPECT_THAT(ErrorOf(R"("\u12G4")"), HasSubstr("hex"));
  EXPECT_THAT(ErrorOf(R"("\x")"), HasSubstr("escape"));
  EXPECT_THAT(ErrorOf("\"a\nb\""), HasSubstr("control"));
  EXPECT_THAT(ErrorOf("\"\xC0\xAF\""), HasSubstr("UTF-8"));      // overlong
  EXPECT_THAT(ErrorOf("\"\xED\xA0\x80\""), HasSubstr("UTF-8"));  // surrogate
  EXPECT_THAT(ErrorOf("\"\xE2\x82\""), HasSubstr("UTF-8"));      // truncated
  EXPECT_THAT(ErrorOf("\"abc"), HasSubstr("unterminated"));
}

TEST(JsonTest, RejectsNonRfcInput) {
  for (const char* bad : {"",        " ",
                          "01",      "1.",
                          ".5",      "+1",
                          "-",       "1e",
                          "1e+",     "0x10",
                          "NaN",     "Infinity",
                          "[1,]",    "{\"a\":1,}",
                          "{a:1}",   "{'a':1}",
                          "[1 2]",   "{\"a\" 1}",
                          "tru",     "nul",
                          "[",       "{",
                          "]",       "1 2",
                          "// c\n1", "\xEF\xBB\xBF{}",
                          "1e999",   "-1e999"}) {
    ErrorOf(bad);
  }
}

TEST(JsonTest, ErrorsNameLineAndColumn) {
  EXPECT_THAT(ErrorOf("{\n  \"a\": 1,\n  \"b\" 2\n}"), HasSubstr("3:7"));
  EXPECT_THAT(ErrorOf("[1,\n\n   x]"), HasSubstr("3:4"));
  EXPECT_THAT(ErrorOf("{\"k\":1,\n \"k\":2}"), HasSubstr("2:2"));
  EXPECT_THAT(ErrorOf("{\"k\":1,\n \"k\":2}"), HasSubstr("duplicate key"));
}

TEST(JsonTest, DepthLimit) {
  std::string ok(64, '[');
  ok += std::string(64, ']');
  EXPECT_TRUE(Parse(ok).ok());
  std::string deep(65, '[');
  deep += std::string(65, ']');
  EXPECT_THAT(ErrorOf(deep), HasSubstr("nesting"));
  // Far deeper input must fail cleanly, not overflow the stack.
  std::string huge(1000000, '[');
  EXPECT_THAT(ErrorOf(huge), HasSubstr("nesting"));
  std::string objs;
  for (int i = 0; i < 65; ++i) objs += "{\"a\":";
  objs += "1" + std::string(65, '}');
  EXPECT_THAT(ErrorOf(objs), HasSubstr("nesting"));
}

TEST(JsonTest, TypedGetters) {
  Value v = MustParse(R"({"i":7,"d":2.5,"e":1e3,"b":true,"s":"x"})");
  EXPECT_EQ(*v.GetInt("i", 0), 7);
  EXPECT_EQ(*v.GetInt("e", 0), 1000);
  EXPECT_EQ(*v.GetInt("missing", 42), 42);
  EXPECT_FALSE(v.GetInt("d", 0).ok());  // not integral
  EXPECT_FALSE(v.GetInt("s", 0).ok());
  EXPECT_DOUBLE_EQ(*v.GetDouble("d", 0), 2.5);
  EXPECT_DOUBLE_EQ(*v.GetDouble("i", 0), 7.0);
  EXPECT_FALSE(v.GetDouble("b", 0).ok());
  EXPECT_TRUE(*v.GetBool("b", false));
  EXPECT_FALSE(v.GetBool("i", false).ok());
  EXPECT_EQ(*v.GetString("s", ""), "x");
  EXPECT_EQ(*v.GetString("missing", "dflt"), "dflt");
  EXPECT_FALSE(v.GetString("i", "").ok());
}

TEST(JsonTest, BuildersAndSerialize) {
  Value o = Value::Object();
  o.Set("b", Value::Int(1));
  o.Set("a", Value::String("q\"\n\x01"));
  o.Set("b", Value::Int(2));  // replaces, keeps position
  Value& arr = o.Set("arr", Value::Array());
  arr.Push(Value::Number(0.1));
  arr.Push(Value::Number(3.0));
  arr.Push(Value::Bool(false));
  arr.Push(Value());
  arr.Push(Value::Object());
  EXPECT_EQ(Serialize(o),
            R"({"b":2,"a":"q\"\n\u0001","arr":[0.1,3.0,false,null,{}]})");
  EXPECT_EQ(Serialize(MustParse("{\"a\":[1,{\"b\":[]}]}"), 2),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ]\n}");
  EXPECT_EQ(Serialize(Value::Number(1.0 / 0.0)), "null");
}

TEST(JsonTest, RoundTripPreservesValues) {
  const char* text =
      R"({"a":[1,-2,3.25,1e-300,1.7976931348623157e308,-0.0,123456789012345678],)"
      R"("s":"\u0000\u001f\u007f\u20ac\ud83d\ude00","n":null,"t":true,)"
      R"("o":{"x":{"y":{}}}})";
  Value v = MustParse(text);
  for (int indent : {-1, 0, 2}) {
    std::string s = Serialize(v, indent);
    Value w = MustParse(s);
    EXPECT_EQ(Serialize(w), Serialize(v)) << s;
  }
  const Value& a = *v.Find("a");
  Value w = MustParse(Serialize(v));
  for (size_t i = 0; i < a.items().size(); ++i) {
    EXPECT_EQ(w.Find("a")->items()[i].is_integer(), a.items()[i].is_integer());
    EXPECT_EQ(w.Find("a")->items()[i].as_double(), a.items()[i].as_double());
    EXPECT_EQ(w.Find("a")->items()[i].as_int(), a.items()[i].as_int());
  }
  EXPECT_EQ(w.Find("s")->as_string(), v.Find("s")->as_string());
  EXPECT_EQ(w.Find("s")->as_string().size(), 1u + 1u + 1u + 3u + 4u);
}

TEST(JsonTest, ParseFile) {
  std::string path = ::testing::TempDir() + "/prism_json_test.json";
  {
    std::ofstream out(path);
    out << "{\"x\": [1,\n 2,]}";
  }
  absl::StatusOr<Value> v = ParseFile(path);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr(path));
  EXPECT_THAT(v.status().message(), HasSubstr("2:4"));
  {
    std::ofstream out(path);
    out << "{\"x\": 5}";
  }
  v = ParseFile(path);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v->GetInt("x", 0), 5);
  std::remove(path.c_str());
  EXPECT_EQ(ParseFile(path).status().code(), absl::StatusCode::kNotFound);
}

TEST(JsonTest, CheckKeysNamesTheFirstUnknownOne) {
  absl::StatusOr<Value> v = Parse(R"({"a": 1, "bb": 2, "c": 3})");
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->CheckKeys({"a", "bb", "c", "d"}, "here").ok());
  const absl::Status st = v->CheckKeys({"a", "c"}, "cfg.part");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "cfg.part: unknown key \"bb\" (known: a, c)");
  // Only objects have keys: anything else passes (its caller checks type).
  EXPECT_TRUE(Parse("[1, 2]")->CheckKeys({}, "x").ok());
  EXPECT_TRUE(Parse("7")->CheckKeys({}, "x").ok());
  EXPECT_FALSE(Parse(R"({"k": 1})")->CheckKeys({}, "x").ok());
  EXPECT_TRUE(Parse("{}")->CheckKeys({}, "x").ok());
}

}  // namespace
}  // namespace prism::json
