// safetensors: round trip, bf16 and f16 reading, and one clear error for each kind of bad file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "fpdt/base/error.h"
#include "fpdt/tensor/safetensors.h"
#include "testing.h"

namespace fpdt {
namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("fpdt_safetensors_" + std::to_string(testing::fresh_seed()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static void write_bytes(const std::string& file, const std::string& bytes) {
    std::ofstream(file, std::ios::binary) << bytes;
  }
  // Expects an fpdt::Error whose message contains each of `parts`.
  static void expect_error(const std::string& file, std::initializer_list<const char*> parts) {
    try {
      SafetensorsReader reader(file);
      FAIL() << "no error for " << file;
    } catch (const Error& error) {
      for (const char* part : parts) EXPECT_NE(std::string(error.what()).find(part), std::string::npos) << error.what();
    }
  }
  std::filesystem::path dir_;
};

TEST_F(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  Rng rng(testing::fresh_seed());
  std::vector<float> a = testing::random_normal<float>(rng, 6 * 7);
  std::vector<int32_t> b = {1, -2, 3};
  SafetensorsWriter writer;
  writer.add("a", Tensor(a.data(), DType::f32, {6, 7}));
  writer.add("b", Tensor(b.data(), DType::i32, {3}));
  writer.set_metadata("format", "pt");
  writer.write(path("x.safetensors"));

  SafetensorsReader reader(path("x.safetensors"));
  EXPECT_EQ(reader.metadata("format"), "pt");
  EXPECT_EQ(reader.entry("a").shape, (Shape{6, 7}));
  EXPECT_EQ(reader.read_floats("a"), a);  // bitwise: no conversion on the way
  EXPECT_EQ(reader.read_ints("b"), b);
  std::vector<float> wrong_shape(42);
  EXPECT_THROW(reader.read("a", Tensor(wrong_shape.data(), DType::f32, {7, 6})), Error);
  EXPECT_THROW(reader.entry("missing"), Error);
}

TEST_F(SafetensorsTest, ReadsBf16AsFloat) {
  // bf16 is the top half of a float: 1.5f = 0x3fc00000 → 0x3fc0; -2.0f = 0xc0000000 → 0xc000.
  std::vector<uint16_t> raw = {0x3fc0, 0xc000};
  SafetensorsWriter writer;
  writer.add("w", Tensor(raw.data(), DType::bf16, {2}));
  writer.write(path("bf16.safetensors"));
  EXPECT_EQ(SafetensorsReader(path("bf16.safetensors")).read_floats("w"), (std::vector<float>{1.5f, -2.0f}));
}

TEST_F(SafetensorsTest, ReadsEveryF16BitPatternExactly) {
  // All 65536 halves, against the definition: (−1)^s · 2^(e−15) · (1 + m/1024), subnormals (e = 0)
  // m · 2^−24, e = 31 inf (m = 0) or NaN. Every half is a float, so the conversion is exact.
  std::vector<uint16_t> raw(65536);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint16_t>(i);
  SafetensorsWriter writer;
  writer.add("w", Tensor(raw.data(), DType::f16, {65536}));
  writer.write(path("f16.safetensors"));
  const std::vector<float> got = SafetensorsReader(path("f16.safetensors")).read_floats("w");
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const int sign = (bits >> 15) != 0 ? -1 : 1, exponent = (bits >> 10) & 31, mantissa = bits & 1023;
    const double want = exponent == 31 ? (mantissa == 0 ? sign * INFINITY : NAN)
                        : exponent == 0 ? sign * std::ldexp(mantissa, -24)
                                        : sign * std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got[bits])) << std::hex << bits;
    } else {
      EXPECT_EQ(got[bits], static_cast<float>(want)) << std::hex << bits;
      EXPECT_EQ(std::signbit(got[bits]), sign < 0) << std::hex << bits;  // −0 stays −0
    }
  }
}

TEST_F(SafetensorsTest, EachBadFileGetsOneClearError) {
  expect_error(path("absent.safetensors"), {"cannot open", "absent.safetensors"});
  write_bytes(path("short"), "abc");
  expect_error(path("short"), {"too short", "short"});
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  std::string header_bytes(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(header_bytes.data(), &length, 8);
  write_bytes(path("truncated"), header_bytes + header + std::string(8, '\0'));  // 8 of 16 data bytes
  expect_error(path("truncated"), {"truncated", "'w'"});
  std::string huge(8, '\0');
  const uint64_t huge_length = 1u << 30;
  std::memcpy(huge.data(), &huge_length, 8);
  write_bytes(path("huge_header"), huge + "{}");
  expect_error(path("huge_header"), {"header", "huge_header"});
  const std::string bad_json = "{not json";
  std::string bad_length(8, '\0');
  const uint64_t bad_json_length = bad_json.size();
  std::memcpy(bad_length.data(), &bad_json_length, 8);
  write_bytes(path("bad_json"), bad_length + bad_json);
  expect_error(path("bad_json"), {"is not valid JSON", "bad_json"});
  const std::string bad_dtype = R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})";
  std::string dtype_length(8, '\0');
  const uint64_t bad_dtype_length = bad_dtype.size();
  std::memcpy(dtype_length.data(), &bad_dtype_length, 8);
  write_bytes(path("bad_dtype"), dtype_length + bad_dtype + "x");
  expect_error(path("bad_dtype"), {"unknown dtype 'Q7'"});
}

// A file made of `header` and `data_bytes` zero bytes of data.
std::string file_with_header(const std::string& header, size_t data_bytes) {
  std::string bytes(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, 8);
  return bytes + header + std::string(data_bytes, '\0');
}

TEST_F(SafetensorsTest, ShapesAndOffsetsFromTheFileAreCheckedArithmetic) {
  struct Case {
    const char* name;
    std::string header;
    std::vector<const char*> parts;  // each must be in the message
  };
  const std::vector<Case> cases = {
      {"negative_extent", R"({"w":{"dtype":"F32","shape":[-2,2],"data_offsets":[0,16]}})", {"'w'", "its shape holds -2, a negative number"}},
      {"fractional_extent", R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", {"'w'", "its shape is 1.5, not a whole number"}},
      // 2^32 · 2^32 wraps to 0 in int64: it must not pass as an empty tensor.
      {"overflowing_shape", R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})",
       {"'w'", "2^63 elements"}},
      {"overflowing_bytes", R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})",
       {"'w'", "2^64 bytes"}},
      {"negative_offset", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", {"'w'", "its data_offsets holds -4, a negative number"}},
      {"reversed_offsets", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", {"'w'", "[8, 4]"}},
      {"three_offsets", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", {"'w'", "two offsets"}},
      {"overlap", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       {"'a' and 'b' overlap", "bytes 8 to 16"}},
      {"not_an_object", R"({"w":[1,2]})", {"'w'", "not an object"}},
      {"metadata_not_an_object", R"({"__metadata__":"x"})", {"__metadata__", "not an object"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    write_bytes(path(c.name), file_with_header(c.header, 16));
    const std::string message = testing::error_message([&] { SafetensorsReader reader(path(c.name)); });
    for (const char* part : c.parts) testing::expect_contains(message, {part});
  }
  // Empty tensors may share an offset, and tensors may touch.
  write_bytes(path("touching"),
              file_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16));
  EXPECT_EQ(SafetensorsReader(path("touching")).names().size(), 3u);
}

TEST_F(SafetensorsTest, DeepOrHugeHeadersGiveABoundedError) {
  // 100k levels of nesting in the metadata used to overflow the stack when the message dumped it.
  const std::string deep = R"({"__metadata__":{"x":)" + std::string(100000, '[') + std::string(100000, ']') + "}}";
  write_bytes(path("deep"), file_with_header(deep, 0));
  const std::string deep_message = testing::error_message([&] { SafetensorsReader reader(path("deep")); });
  testing::expect_contains(deep_message, {"deep's header", "nests JSON deeper than 64 levels"});
  EXPECT_LT(deep_message.size(), 1000u);
  // A 1 MB tensor name and a 1 MB dtype are quoted as excerpts, not in full.
  const std::string long_name(1 << 20, 'n');
  write_bytes(path("long"), file_with_header(R"({")" + long_name + R"(":{"dtype":")" + long_name +
                                                 R"(","shape":[1],"data_offsets":[0,4]}})", 4));
  const std::string long_message = testing::error_message([&] { SafetensorsReader reader(path("long")); });
  testing::expect_contains(long_message, {"tensor 'nnnn", "...' is invalid", "unknown dtype 'nnnn"});
  EXPECT_LT(long_message.size(), 1000u);
  // An unterminated 1 MB string: nlohmann's message quotes the token it read; ours cuts it.
  write_bytes(path("unterminated"), file_with_header(R"({")" + long_name, 0));
  const std::string open_message = testing::error_message([&] { SafetensorsReader reader(path("unterminated")); });
  testing::expect_contains(open_message, {"is not valid JSON"});
  EXPECT_LT(open_message.size(), 1000u);
}

TEST_F(SafetensorsTest, FailedWriteKeepsThePreviousFile) {
  std::vector<float> a = {1, 2, 3};
  SafetensorsWriter writer;
  writer.add("a", Tensor(a.data(), DType::f32, {3}));
  writer.write(path("keep.safetensors"));
  EXPECT_THROW(writer.write(path("no_such_dir/keep.safetensors")), Error);
  EXPECT_EQ(SafetensorsReader(path("keep.safetensors")).read_floats("a"), a);
}

}  // namespace
}  // namespace fpdt
