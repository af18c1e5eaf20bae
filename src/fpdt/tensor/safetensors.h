// Reading and writing the safetensors format (Hugging Face): u64 little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {string: string}}, then raw data.
// Used for weights (Hugging Face compatible checkpoints), optimizer state and golden test files.
// Every malformed input is one fpdt::Error naming the file and the problem.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fpdt/base/file_io.h"
#include "fpdt/tensor/tensor.h"

namespace fpdt {

struct SafetensorsEntry {
  DType dtype = DType::f32;
  Shape shape;
  size_t begin_bytes = 0;  // offset from the start of the data section
  size_t end_bytes = 0;
};

// A safetensors header, parsed and checked: every tensor's dtype is known, its shape has
// non-negative extents, its data_offsets cover exactly its bytes inside the data section, and no
// two tensors' bytes overlap.
struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;  // non-string values kept as their JSON text
};

// Parses the JSON header of a safetensors file whose data section holds data_bytes bytes. Every
// problem throws one fpdt::Error naming `path` (names and values quoted as bounded excerpts).
SafetensorsHeader parse_safetensors_header(std::string_view header, size_t data_bytes, const std::string& path);

class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Metadata value, or throws fpdt::Error naming the missing key.
  const std::string& metadata(const std::string& key) const;
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;

  // Copies tensor `name` into dst after checking its dtype and shape; F32 destinations also accept
  // BF16 and F16 tensors (converted exactly). Throws fpdt::Error naming the tensor, file and mismatch.
  void read(const std::string& name, const Tensor& dst) const;
  // Elements [begin, begin + count) of F32 tensor `name` (flattened) into dst: a piece of a large
  // tensor without reading the rest (a rank's share of a saved optimizer shard).
  void read_range(const std::string& name, int64_t begin, int64_t count, float* dst) const;
  // Convenience for tests and small tensors: the tensor converted to float.
  std::vector<float> read_floats(const std::string& name) const;
  std::vector<int32_t> read_ints(const std::string& name) const;

 private:
  void read_raw(const SafetensorsEntry& entry, void* dst) const;
  std::string path_;
  InputFile file_;
  size_t data_begin_bytes_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;  // from the parsed header
  std::map<std::string, std::string> metadata_;
};

// Collects tensor views (not copies: the data must stay alive until write()) and writes them
// atomically in the order added.
class SafetensorsWriter {
 public:
  void add(const std::string& name, const Tensor& tensor);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  void write(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace fpdt
