// GGUF files (llama.cpp's model format, versions 2 and 3, little-endian): the one place that reads
// them. GgufFile parses and checks the container — metadata key/values, tensor infos, data offsets;
// gguf_model_config turns an architecture's keys (llama, mistral, qwen2, gpt2) into a ModelConfig;
// load_gguf_weights dequantizes the tensors (gguf_types.h) into fp32 parameters under their Hugging
// Face names, undoing llama.cpp's permutation of the q/k rows (the tokenizer the metadata describes is
// data/gguf_tokenizer.h's). What fpdt does not read (an architecture, a tensor type, a version) is one
// fpdt::Error naming the file and the key or tensor.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fpdt/model/config.h"
#include "fpdt/model/parameters.h"
#include "fpdt/tensor/tensor.h"

namespace fpdt::model {

// True for a path whose name ends in ".gguf" (any case): `--init-from`, `inspect` and `convert` read
// it as a GGUF file.
bool is_gguf_path(const std::string& path);

// The value types of GGUF metadata.
enum class GgufValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9,
  u64 = 10, i64 = 11, f64 = 12,
};

struct GgufValue {
  GgufValueType type = GgufValueType::u8;
  // Scalars: integers (any width and sign; u64 values above 2^63 do not fit and are refused), reals,
  // booleans (integer 0/1), strings.
  int64_t integer = 0;
  double real = 0.0;
  std::string text;
  // Arrays: the element type and the elements (no nested arrays deeper than one level in practice;
  // the parser allows a few).
  GgufValueType element_type = GgufValueType::u8;
  std::vector<GgufValue> items;

  bool is_integer() const;
  bool is_real() const { return type == GgufValueType::f32 || type == GgufValueType::f64; }
  // A short text for people: 42, 1e-05, "llama", [49152 strings].
  std::string describe() const;
};

struct GgufTensorInfo {
  std::string name;      // llama.cpp's ("blk.0.attn_q.weight")
  Shape shape;           // outermost first, as PyTorch would hold it (ggml's ne reversed)
  uint32_t type = 0;     // ggml type id (gguf_types.h)
  uint64_t offset = 0;   // of its data, from the start of the file
  uint64_t bytes = 0;
};

class GgufFile {
 public:
  // Reads and checks the header, metadata and tensor infos of `path` (not the tensor data). Throws
  // fpdt::Error naming the file for anything else than GGUF version 2 or 3, a truncated or corrupt
  // header, a tensor whose data lies outside the file or is not aligned, or whose shape is not a
  // whole number of its type's blocks.
  explicit GgufFile(std::string path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* tensor(const std::string& name) const;

  // Typed metadata: throws fpdt::Error naming the file and key when it is missing (the unsuffixed
  // forms) or has another type.
  std::string text(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  std::optional<int64_t> optional_integer(const std::string& key) const;
  std::optional<double> optional_real(const std::string& key) const;  // f32, f64 or an integer
  std::optional<bool> optional_boolean(const std::string& key) const;
  // An array of `element` values (nullptr when the key is absent).
  const std::vector<GgufValue>* array(const std::string& key, GgufValueType element) const;

  // dst[numel] = the tensor's values in fp32 (dequantized). Throws fpdt::Error naming the tensor and
  // the file for a type fpdt does not read.
  void read(const GgufTensorInfo& tensor, float* dst) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint32_t version_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// The model the file's metadata describes (general.architecture llama, mistral, qwen2 or gpt2 and its
// keys: sizes, heads, norm epsilon, RoPE base and scaling, context length; the token ids of
// tokenizer.ggml.*; tied embeddings when the file has no output.weight), validated. Throws fpdt::Error
// naming the file and key for another architecture, a missing key or a value fpdt does not implement.
ModelConfig gguf_model_config(const GgufFile& file);

// Dequantizes every tensor of `config` (gguf_model_config of the same file) into `params`, q/k rows in
// Hugging Face's order. Every tensor is checked (present, shape, type) before any is read; an
// unexpected tensor is an error as for Hugging Face folders.
void load_gguf_weights(const GgufFile& file, const ModelConfig& config, const ParameterLayout& layout,
                       ParameterBlock& params);

}  // namespace fpdt::model
