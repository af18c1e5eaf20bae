// base/json: parsing refuses nesting past kMaxDepth (no input can make later recursion overflow the
// stack) and every message quotes input as a bounded excerpt.
#include <gtest/gtest.h>

#include "fpdt/base/error.h"
#include "fpdt/base/json.h"
#include "testing.h"

namespace fpdt {
namespace {

using testing::error_message;
using testing::expect_contains;

// `depth` arrays, one inside the other.
std::string nested(int depth) {
  return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']');
}

TEST(Json, ParsesUpToTheDepthLimitAndRefusesDeeper) {
  EXPECT_EQ(json::parse(R"({"a": [1, {"b": null}]})", "x.json", "test")["a"][1].size(), 1u);
  const nlohmann::json deepest = json::parse(nested(json::kMaxDepth), "x.json", "test");
  EXPECT_TRUE(deepest.is_array());
  std::string deep_objects;
  for (int level = 0; level < 100000; ++level) deep_objects += R"({"k":)";
  for (const std::string& deep : {nested(json::kMaxDepth + 1), nested(100000), deep_objects}) {
    const std::string message = error_message([&] { json::parse(deep, "x.json", "test", "fix it"); });
    expect_contains(message, {"[test] x.json nests JSON deeper than 64 levels", "hint: fix it"});
  }
}

TEST(Json, ParseErrorsAreBounded) {
  const std::string huge_token = "[\"" + std::string(1 << 20, 'x');  // unterminated 1 MB string
  for (const std::string& text : {huge_token, std::string("{not json"), std::string(""),
                                  std::string(1 << 20, '1') + "x"}) {
    const std::string message = error_message([&] { json::parse(text, "x.json", "test"); });
    expect_contains(message, {"[test] x.json is not valid JSON: "});
    EXPECT_LT(message.size(), 400u) << message;
  }
}

TEST(Json, ExcerptsAreBoundedAndMarkTheCut) {
  EXPECT_EQ(json::excerpt(nlohmann::json::parse(R"({"a":[1,2.5,"x"],"b":null})")), R"({"a":[1,2.5,"x"],"b":null})");
  const std::string long_text(100000, 'y');
  const std::string cut = json::excerpt(nlohmann::json{{"key", long_text}, {"other", {1, 2, 3}}}, 40);
  EXPECT_EQ(cut, R"({"key":")" + std::string(32, 'y') + "...");
  EXPECT_EQ(json::excerpt(nlohmann::json::array({long_text, long_text}), 10).size(), 13u);
  EXPECT_EQ(json::excerpt_text("short"), "short");
  EXPECT_EQ(json::excerpt_text(long_text, 5), "yyyyy...");
  // Never cut inside a UTF-8 sequence: "é" is two bytes.
  EXPECT_EQ(json::excerpt_text("aé", 2), "a...");
  // A value built in code may nest deeper than parse allows; its excerpt still stops.
  nlohmann::json deep = nlohmann::json::array();
  for (int level = 0; level < 1000; ++level) deep = nlohmann::json::array({deep});
  EXPECT_LE(json::excerpt(deep).size(), json::kExcerptChars + 3);
}

// Raw input quoted in a message shows every byte: what a terminal would not show as itself is escaped,
// and a NUL no longer ends the message (issue 45: a GGUF architecture of binary bytes was cut at its NUL).
TEST(Json, TextExcerptsEscapeWhatWouldNotShow) {
  using namespace std::string_literals;
  EXPECT_EQ(json::excerpt_text("l\0a\x01m"s), "l\\x00a\\x01m");
  EXPECT_EQ(json::excerpt_text("a\nb\tc\rd\x1B\x7F"), "a\\nb\\tc\\rd\\x1B\\x7F");
  // A backslash in the text is doubled: the two characters \n read "\\n", the newline "\n".
  EXPECT_EQ(json::excerpt_text("C:\\new\n"), "C:\\\\new\\n");
  // Well-formed UTF-8 is kept; stray continuation bytes, overlong forms, surrogates, code points past
  // U+10FFFF and a sequence cut by the end are escaped byte by byte.
  EXPECT_EQ(json::excerpt_text("é€𝄞"), "é€𝄞");
  EXPECT_EQ(json::excerpt_text("\x80\xFF"), "\\x80\\xFF");
  EXPECT_EQ(json::excerpt_text("\xC0\xAF"), "\\xC0\\xAF");
  EXPECT_EQ(json::excerpt_text("\xE0\x80\xAF"), "\\xE0\\x80\\xAF");
  EXPECT_EQ(json::excerpt_text("\xED\xA0\x80"), "\\xED\\xA0\\x80");
  EXPECT_EQ(json::excerpt_text("\xF4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");
  EXPECT_EQ(json::excerpt_text("a\xE2\x82"), "a\\xE2\\x82");
  // The bound counts the escapes, and a cut never falls inside one.
  EXPECT_EQ(json::excerpt_text("ab\x01" "cd", 5), "ab...");
  EXPECT_EQ(json::excerpt_text("ab\x01" "cd", 6), "ab\\x01...");
  EXPECT_EQ(json::excerpt_text(std::string(1000, '\0')).size(), json::kExcerptChars / 4 * 4 + 3);
}

TEST(Json, IntegersAreWholeNumbersInTheirTypesRange) {
  const auto parsed = [](const char* text) { return nlohmann::json::parse(text); };
  EXPECT_EQ(json::integer<int>(parsed("-7"), "x", "test"), -7);
  EXPECT_EQ(json::integer<uint64_t>(parsed("18446744073709551615"), "x", "test"), UINT64_MAX);
  EXPECT_EQ(json::integer<int64_t>(parsed("-9223372036854775808"), "x", "test"), INT64_MIN);
  for (const char* bad : {"2147483648", "-2147483649", "1.0", "1e30", "\"3\"", "true", "null", "[1]"})
    expect_contains(error_message([&] { json::integer<int>(parsed(bad), "f.json: n", "test"); }),
                    {"[test] f.json: n is ", "not a whole number in [-2147483648, 2147483647]"});
  expect_contains(error_message([&] { json::integer<uint32_t>(parsed("-1"), "n", "test"); }),
                  {"n is -1, not a whole number in [0, 4294967295]"});
}

}  // namespace
}  // namespace fpdt
