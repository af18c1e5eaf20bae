// Fuzz target: a GGUF file, read as `fpdt inspect`, `convert` and `--init-from` read it — the container,
// every metadata value described, the model config, the tokenizer, and the weights of a small model.
//
// Beyond the contract of every target (fuzz_target.h), what the readers accept must be sound:
//   - a message quotes the file's names and strings escaped: no control byte, only well-formed UTF-8;
//   - every tensor's data lies inside the file, and no two tensors share a byte;
//   - the model's reals (norm epsilon, RoPE θ, scaling factor and ramp) are finite, the sizes positive;
//   - every weight read is finite.
// The data is fuzzed as well as the bytes. A file that parses is read a second time with one edit that
// byte mutations would seldom make, picked by a hash of the input (so a new input is a new edit): a NaN
// or an Inf where the tensor's type keeps a value or a block's scale, a tensor's data offset moved onto
// or into another tensor's data, a tensor's type changed, a number in the metadata made non-finite,
// zero, negative or huge, a NUL, control or non-UTF-8 byte put into a string of the metadata. The seeds
// (fuzz/corpus/gguf, tools/make_gguf_fuzz_seeds.py) are the cases of issue 45 made by the same edits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "fpdt/base/json.h"
#include "fpdt/data/gguf_tokenizer.h"
#include "fpdt/data/text/unicode.h"
#include "fpdt/model/gguf.h"
#include "fpdt/model/gguf_types.h"
#include "fuzz_target.h"

namespace {

using fpdt::fuzz::finding;
using fpdt::model::GgmlType;
using fpdt::model::GgufTensorInfo;
using fpdt::model::GgufValueType;

// ---- The checks of what was read --------------------------------------------------------------------

// A message shows as itself: no control byte (a NUL would end it when printed) and only UTF-8.
void check_message(const fpdt::Error& error) {
  for (const std::string* text : {&error.message(), &error.hint()}) {
    for (const char byte : *text)
      if (static_cast<unsigned char>(byte) < 0x20 || byte == 0x7F)
        finding("a message holding the control byte " + std::to_string(static_cast<unsigned char>(byte)) + ": " +
                fpdt::json::excerpt_text(*text));
    if (fpdt::data::text::first_invalid_utf8(*text) != text->size())
      finding("a message holding bytes that are not UTF-8: " + fpdt::json::excerpt_text(*text));
  }
}

// Runs body() under expect_clean, and checks the message of the error it throws.
template <typename Body>
void read_checked(Body&& body) {
  fpdt::fuzz::expect_clean([&] {
    try {
      body();
    } catch (const fpdt::Error& error) {
      check_message(error);
      throw;
    }
  });
}

void check_layout(const fpdt::model::GgufFile& gguf, uint64_t file_bytes) {
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& info : gguf.tensors()) {
    if (info.offset > file_bytes || info.bytes > file_bytes - info.offset)
      finding("tensor data past the end of the file accepted: " + fpdt::json::excerpt_text(info.name));
    by_offset.push_back(&info);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->offset < by_offset[i - 1]->offset + by_offset[i - 1]->bytes)
      finding("tensors sharing data accepted: " + fpdt::json::excerpt_text(by_offset[i - 1]->name) + " and " +
              fpdt::json::excerpt_text(by_offset[i]->name));
}

void check_config(const fpdt::model::ModelConfig& config) {
  const auto positive = [](double value) { return std::isfinite(value) && value > 0; };
  if (!positive(config.norm_eps)) finding("a norm epsilon of " + std::to_string(config.norm_eps) + " accepted");
  if (config.uses_rope() && !positive(config.rope_theta))
    finding("a RoPE θ of " + std::to_string(config.rope_theta) + " accepted");
  const fpdt::model::RopeScaling& scaling = config.rope_scaling;
  if (scaling.type == fpdt::model::RopeType::none) return;
  if (!positive(scaling.factor)) finding("a RoPE scaling factor of " + std::to_string(scaling.factor) + " accepted");
  if (scaling.type == fpdt::model::RopeType::yarn &&
      (!std::isfinite(scaling.beta_fast) || !std::isfinite(scaling.beta_slow) || scaling.original_max_positions <= 0))
    finding("a yarn ramp of beta_fast " + std::to_string(scaling.beta_fast) + ", beta_slow " +
            std::to_string(scaling.beta_slow) + ", original context " +
            std::to_string(scaling.original_max_positions) + " accepted");
}

void check_weights(const fpdt::model::ParameterBlock& params) {
  for (int64_t i = 0; i < params.numel(); ++i)
    if (!std::isfinite(params.data()[i])) finding("a non-finite weight accepted at " + std::to_string(i));
}

// What the edits need to know of a file that parsed.
struct Parsed {
  std::vector<GgufTensorInfo> tensors;
  std::vector<std::pair<std::string, GgufValueType>> metadata;  // scalar keys and their types
};

// Reads the file at `path` as the program does and checks what was accepted; the container when it
// parsed.
std::optional<Parsed> read_as_the_program(const std::string& path, uint64_t file_bytes) {
  std::optional<Parsed> parsed;
  read_checked([&] {
    const fpdt::model::GgufFile gguf(path);
    check_layout(gguf, file_bytes);
    parsed.emplace();
    parsed->tensors = gguf.tensors();
    for (const auto& [key, value] : gguf.metadata()) {
      (void)value.describe();
      if (value.type != GgufValueType::array) parsed->metadata.emplace_back(key, value.type);
    }
    try {
      (void)fpdt::data::gguf_tokenizer(gguf);
    } catch (const fpdt::Error& error) {
      if (error.module() == "internal") throw;  // expect_clean reports it
      check_message(error);
    }
    const fpdt::model::ModelConfig config = fpdt::model::gguf_model_config(gguf);
    check_config(config);
    // The weights a file this small can hold: every tensor is checked against the file before reading.
    if (config.parameter_count() > (int64_t{1} << 20)) return;
    const fpdt::model::ParameterLayout layout(config);
    fpdt::model::ParameterBlock params(layout, "fuzzed weights");
    fpdt::model::load_gguf_weights(gguf, config, layout, params);
    check_weights(params);
  });
  return parsed;
}

// ---- The edits ---------------------------------------------------------------------------------------

// The choices of one input's edit: splitmix64 from a hash (FNV-1a) of its bytes.
class Choices {
 public:
  explicit Choices(const std::string& bytes) {
    for (const char byte : bytes) state_ = (state_ ^ static_cast<unsigned char>(byte)) * 0x100000001b3ull;
  }
  uint64_t below(uint64_t n) {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return n == 0 ? 0 : (z ^ (z >> 31)) % n;
  }
  template <typename T, size_t N>
  T pick(const T (&items)[N]) { return items[below(N)]; }

 private:
  uint64_t state_ = 0xcbf29ce484222325ull;
};

template <typename T>
void put(std::string& bytes, uint64_t at, T value) {
  if (at <= bytes.size() && sizeof(T) <= bytes.size() - at) std::memcpy(bytes.data() + at, &value, sizeof(T));
}

template <typename T>
T get(const std::string& bytes, uint64_t at) {
  T value{};
  if (at <= bytes.size() && sizeof(T) <= bytes.size() - at) std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

// A string as GGUF writes it: its u64 length, then its bytes.
std::string gguf_string(const std::string& text) {
  std::string out(8, '\0');
  const uint64_t length = text.size();
  std::memcpy(out.data(), &length, 8);
  return out + text;
}

// Where the type field of `info`'s description lies in the header (its u64 data offset follows): after
// its name, dimension count and extents; the last match before the first tensor's data. npos: not found.
size_t type_field_at(const std::string& bytes, const Parsed& parsed, const GgufTensorInfo& info) {
  uint64_t data_begin = bytes.size();
  for (const GgufTensorInfo& tensor : parsed.tensors) data_begin = std::min(data_begin, tensor.offset);
  std::string key = gguf_string(info.name) + std::string(4, '\0');
  const uint32_t dims = static_cast<uint32_t>(info.shape.size());
  std::memcpy(key.data() + key.size() - 4, &dims, 4);
  const size_t at = bytes.rfind(key, data_begin);
  return at == std::string::npos ? at : at + key.size() + 8 * dims;
}

// Where the value of metadata `key` of type `type` lies (after its key and type). npos: not found.
size_t value_at(const std::string& bytes, const std::string& key, GgufValueType type) {
  std::string pattern = gguf_string(key) + std::string(4, '\0');
  const auto type_id = static_cast<uint32_t>(type);
  std::memcpy(pattern.data() + pattern.size() - 4, &type_id, 4);
  const size_t at = bytes.find(pattern);
  return at == std::string::npos ? at : at + pattern.size();
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A NaN or an Inf where the tensor's type keeps a value (F32, F16, BF16) or a block's scale: Q8_0 and
// Q4_0 d, Q4_1 d or m, Q4_K and Q5_K d or dmin (the first bytes of a block), Q6_K d (its last two).
void put_non_finite(std::string& bytes, const GgufTensorInfo& info, Choices& choose) {
  const std::optional<fpdt::model::GgmlBlock> block = fpdt::model::ggml_block(info.type);
  if (!block || block->bytes <= 0) return;
  const uint64_t at = info.offset + choose.below(info.bytes / static_cast<uint64_t>(block->bytes)) *
                                        static_cast<uint64_t>(block->bytes);
  const float value = choose.pick({kNaN, kInf, -kInf});
  const uint16_t half = std::isnan(value) ? 0x7E00 : value > 0 ? 0x7C00 : 0xFC00;
  switch (static_cast<GgmlType>(info.type)) {
    case GgmlType::f32: put(bytes, at, value); break;
    case GgmlType::bf16: {  // the float's upper half
      uint32_t bits = 0;
      std::memcpy(&bits, &value, 4);
      put(bytes, at, static_cast<uint16_t>(bits >> 16));
      break;
    }
    case GgmlType::q6_k: put(bytes, at + 208, half); break;
    case GgmlType::q4_1:
    case GgmlType::q4_k:
    case GgmlType::q5_k: put(bytes, at + 2 * choose.below(2), half); break;
    default: put(bytes, at, half);  // F16, Q8_0, Q4_0; another type: its first bytes
  }
}

// Applies one edit, picked by `choose`, to `bytes`, a file that parsed as `parsed`.
void edit(std::string& bytes, const Parsed& parsed, Choices& choose) {
  const std::vector<GgufTensorInfo>& tensors = parsed.tensors;
  switch (choose.below(5)) {
    case 0:  // a non-finite value in a tensor's data
      if (!tensors.empty()) put_non_finite(bytes, tensors[choose.below(tensors.size())], choose);
      return;
    case 1: {  // a tensor's data moved onto or into another's (offsets are relative to the data section)
      if (tensors.size() < 2) return;
      const GgufTensorInfo& moved = tensors[choose.below(tensors.size())];
      const GgufTensorInfo& onto = tensors[choose.below(tensors.size())];
      const size_t moved_at = type_field_at(bytes, parsed, moved), onto_at = type_field_at(bytes, parsed, onto);
      if (moved_at == std::string::npos || onto_at == std::string::npos) return;
      const uint64_t into = choose.below(2) == 0 ? 0 : choose.below(onto.bytes) / 32 * 32;  // 32: the default alignment
      put(bytes, moved_at + 4, get<uint64_t>(bytes, onto_at + 4) + into);
      return;
    }
    case 2: {  // a tensor's type: every type fpdt reads, a few it does not, unknown ids
      if (tensors.empty()) return;
      const size_t at = type_field_at(bytes, parsed, tensors[choose.below(tensors.size())]);
      if (at == std::string::npos) return;
      put(bytes, at, choose.pick({0u, 1u, 30u, 8u, 2u, 3u, 12u, 13u, 14u, 6u, 11u, 20u, 39u, 40u, 1000u, ~0u}));
      return;
    }
    case 3: {  // a number of the metadata
      std::vector<std::pair<std::string, GgufValueType>> numbers;
      for (const auto& entry : parsed.metadata)
        if (entry.second != GgufValueType::string && entry.second != GgufValueType::boolean) numbers.push_back(entry);
      if (numbers.empty()) return;
      const auto& [key, type] = numbers[choose.below(numbers.size())];
      const size_t at = value_at(bytes, key, type);
      if (at == std::string::npos) return;
      const float real = choose.pick({kNaN, kInf, -kInf, 0.0f, -1.0f, 1e-45f, 3e38f});  // also an f64's value
      const uint64_t integer = choose.pick({0ull, ~0ull, 0x7fffffffull, 0x80000000ull, 0xffffffffull,
                                            0x7fffffffffffffffull, 0x8000000000000000ull});
      switch (type) {
        case GgufValueType::f32: put(bytes, at, real); break;
        case GgufValueType::f64: put(bytes, at, static_cast<double>(real)); break;
        case GgufValueType::u8:
        case GgufValueType::i8: put(bytes, at, static_cast<uint8_t>(integer)); break;
        case GgufValueType::u16:
        case GgufValueType::i16: put(bytes, at, static_cast<uint16_t>(integer)); break;
        case GgufValueType::u32:
        case GgufValueType::i32: put(bytes, at, static_cast<uint32_t>(integer)); break;
        default: put(bytes, at, integer);
      }
      return;
    }
    default: {  // a byte of a string of the metadata: NUL, control, DEL, not UTF-8
      std::vector<std::string> strings;
      for (const auto& [key, type] : parsed.metadata)
        if (type == GgufValueType::string) strings.push_back(key);
      if (strings.empty()) return;
      const size_t at = value_at(bytes, strings[choose.below(strings.size())], GgufValueType::string);
      if (at == std::string::npos) return;
      const uint64_t length = get<uint64_t>(bytes, at);
      if (length == 0 || length > bytes.size()) return;
      const char byte = choose.pick({'\0', '\x01', '\x1B', '\n', '\x7F', '\x80', '\xC3', '\xFF'});
      put(bytes, at + 8 + choose.below(length), byte);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fpdt::fuzz::MemoryFile file;
  const std::optional<Parsed> parsed = read_as_the_program(file.write(data, size), size);
  if (!parsed) return 0;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  Choices choose(bytes);
  edit(bytes, *parsed, choose);
  (void)read_as_the_program(file.write(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), bytes.size());
  return 0;
}
