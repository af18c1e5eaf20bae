// GGUF container: header, metadata, tensor infos and reading a tensor (see gguf.h). The layout
// (llama.cpp's docs/gguf.md), all little-endian:
//   u32 magic "GGUF", u32 version, u64 tensor count, u64 metadata count,
//   metadata: string key, u32 value type, value (string = u64 length + bytes; array = u32 element
//             type, u64 count, elements),
//   tensor infos: string name, u32 dims, u64 ne[dims] (innermost first), u32 ggml type, u64 offset,
//   padding to general.alignment (default 32), then the data section (offsets are relative to it).
#include "fpdt/model/gguf.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "fpdt/base/checked_math.h"
#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/json.h"
#include "fpdt/model/gguf_types.h"

namespace fpdt::model {

namespace {

constexpr const char* kModule = "gguf";
constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;
constexpr const char* kTruncatedHint = "the file is truncated or corrupt: download it again";

// Reads the header sequentially through a buffer, every read bounded by the file's size.
class HeaderReader {
 public:
  HeaderReader(int fd, uint64_t file_bytes, const std::string& path) : fd_(fd), file_bytes_(file_bytes), path_(path) {}

  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return file_bytes_ - offset_; }

  void bytes(void* dst, uint64_t count, const char* what) {
    if (count > remaining())
      throw Error(kModule, path_ + " ends inside its header (reading " + what + " at byte " + std::to_string(offset_) + ")",
                  kTruncatedHint);
    auto* out = static_cast<uint8_t*>(dst);
    while (count > 0) {
      if (buffer_begin_ > offset_ || offset_ >= buffer_begin_ + buffer_.size()) fill();
      const uint64_t in_buffer = buffer_begin_ + buffer_.size() - offset_;
      const uint64_t take = std::min(count, in_buffer);
      std::memcpy(out, buffer_.data() + (offset_ - buffer_begin_), take);
      out += take;
      offset_ += take;
      count -= take;
    }
  }
  template <typename T>
  T scalar(const char* what) {
    T value;
    bytes(&value, sizeof value, what);
    return value;  // little-endian host (x86-64, aarch64 Linux)
  }
  std::string string(const char* what) {
    const uint64_t length = scalar<uint64_t>(what);
    if (length > remaining())
      throw Error(kModule, path_ + ": " + what + " at byte " + std::to_string(offset_) + " claims " +
                               std::to_string(length) + " bytes, more than the file holds",
                  kTruncatedHint);
    std::string text(length, '\0');
    bytes(text.data(), length, what);
    return text;
  }

 private:
  void fill() {
    buffer_begin_ = offset_;
    buffer_.resize(static_cast<size_t>(std::min<uint64_t>(kBufferBytes, remaining())));
    read_fully_at(fd_, buffer_.data(), buffer_.size(), offset_, path_, kModule);
  }
  static constexpr uint64_t kBufferBytes = 1 << 20;
  int fd_;
  uint64_t file_bytes_;
  const std::string& path_;
  uint64_t offset_ = 0;
  uint64_t buffer_begin_ = 0;
  std::vector<uint8_t> buffer_;
};

const char* value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::u8: return "u8";
    case GgufValueType::i8: return "i8";
    case GgufValueType::u16: return "u16";
    case GgufValueType::i16: return "i16";
    case GgufValueType::u32: return "u32";
    case GgufValueType::i32: return "i32";
    case GgufValueType::f32: return "f32";
    case GgufValueType::boolean: return "bool";
    case GgufValueType::string: return "string";
    case GgufValueType::array: return "array";
    case GgufValueType::u64: return "u64";
    case GgufValueType::i64: return "i64";
    case GgufValueType::f64: return "f64";
  }
  return "?";
}

GgufValue read_value(HeaderReader& reader, GgufValueType type, const std::string& key, const std::string& path,
                     int depth) {
  GgufValue value;
  value.type = type;
  switch (type) {
    case GgufValueType::u8: value.integer = reader.scalar<uint8_t>("a u8"); break;
    case GgufValueType::i8: value.integer = reader.scalar<int8_t>("an i8"); break;
    case GgufValueType::u16: value.integer = reader.scalar<uint16_t>("a u16"); break;
    case GgufValueType::i16: value.integer = reader.scalar<int16_t>("an i16"); break;
    case GgufValueType::u32: value.integer = reader.scalar<uint32_t>("a u32"); break;
    case GgufValueType::i32: value.integer = reader.scalar<int32_t>("an i32"); break;
    case GgufValueType::i64: value.integer = reader.scalar<int64_t>("an i64"); break;
    case GgufValueType::u64: {
      const uint64_t number = reader.scalar<uint64_t>("a u64");
      if (number > static_cast<uint64_t>(INT64_MAX))
        throw Error(kModule, path + ": metadata '" + json::excerpt_text(key) + "' holds " + std::to_string(number) +
                                 ", beyond any size fpdt reads", "the file is corrupt");
      value.integer = static_cast<int64_t>(number);
      break;
    }
    case GgufValueType::f32: value.real = reader.scalar<float>("an f32"); break;
    case GgufValueType::f64: value.real = reader.scalar<double>("an f64"); break;
    case GgufValueType::boolean: {
      const uint8_t byte = reader.scalar<uint8_t>("a bool");
      if (byte > 1)
        throw Error(kModule, path + ": metadata '" + json::excerpt_text(key) + "' is a bool holding " +
                                 std::to_string(byte), "the file is corrupt");
      value.integer = byte;
      break;
    }
    case GgufValueType::string: value.text = reader.string("a string"); break;
    case GgufValueType::array: {
      if (depth >= kMaxArrayDepth)
        throw Error(kModule, path + ": metadata '" + json::excerpt_text(key) + "' nests arrays deeper than " +
                                 std::to_string(kMaxArrayDepth), "the file is corrupt");
      const uint32_t element = reader.scalar<uint32_t>("an array's element type");
      if (element > static_cast<uint32_t>(GgufValueType::f64))
        throw Error(kModule, path + ": metadata '" + json::excerpt_text(key) + "' is an array of unknown type " +
                                 std::to_string(element), "the file is corrupt or newer than GGUF version 3");
      value.element_type = static_cast<GgufValueType>(element);
      const uint64_t count = reader.scalar<uint64_t>("an array's length");
      // Every element takes at least one byte: a count beyond the file is corrupt, not a huge allocation.
      if (count > reader.remaining())
        throw Error(kModule, path + ": metadata '" + json::excerpt_text(key) + "' claims " + std::to_string(count) +
                                   " elements, more than the file holds", kTruncatedHint);
      value.items.reserve(static_cast<size_t>(count));
      for (uint64_t i = 0; i < count; ++i)
        value.items.push_back(read_value(reader, value.element_type, key, path, depth + 1));
      break;
    }
  }
  return value;
}

}  // namespace

bool is_gguf_path(const std::string& path) {
  if (path.size() < 5) return false;
  std::string tail = path.substr(path.size() - 5);
  std::transform(tail.begin(), tail.end(), tail.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return tail == ".gguf";
}

bool GgufValue::is_integer() const {
  return type != GgufValueType::f32 && type != GgufValueType::f64 && type != GgufValueType::string &&
         type != GgufValueType::array && type != GgufValueType::boolean;
}

std::string GgufValue::describe() const {
  switch (type) {
    case GgufValueType::string: return "\"" + json::excerpt_text(text, 60) + "\"";
    case GgufValueType::boolean: return integer != 0 ? "true" : "false";
    case GgufValueType::f32:
    case GgufValueType::f64: {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%.9g", real);
      return buffer;
    }
    case GgufValueType::array: {
      if (items.size() <= 4 && element_type != GgufValueType::array) {
        std::string text = "[";
        for (size_t i = 0; i < items.size(); ++i) text += (i ? ", " : "") + items[i].describe();
        return text + "]";
      }
      return "[" + std::to_string(items.size()) + " " + value_type_name(element_type) + "s]";
    }
    default: return std::to_string(integer);
  }
}

// ---- GgufFile ----------------------------------------------------------------------------------------

GgufFile::GgufFile(std::string path) : path_(std::move(path)) {
  const uint64_t file_bytes = file_size(path_, kModule);
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(kModule, "cannot open " + path_ + ": " + std::strerror(errno), "check the path and its permissions");
  try {
    HeaderReader reader(fd_, file_bytes, path_);
    if (file_bytes < 4 || reader.scalar<uint32_t>("the magic") != kMagic)
      throw Error(kModule, path_ + " is not a GGUF file (it does not start with \"GGUF\")",
                  "give a .gguf file written by llama.cpp or the gguf Python package");
    version_ = reader.scalar<uint32_t>("the version");
    if (version_ == 1)
      throw Error(kModule, path_ + " is GGUF version 1, which fpdt does not read (versions 2 and 3)",
                  "convert the model again with a current llama.cpp (convert_hf_to_gguf.py)");
    if ((version_ & 0xffff) == 0 && version_ != 0)
      throw Error(kModule, path_ + " is a big-endian GGUF file; fpdt reads little-endian ones",
                  "convert it with llama.cpp's gguf_convert_endian.py");
    if (version_ != 2 && version_ != 3)
      throw Error(kModule, path_ + " is GGUF version " + std::to_string(version_) + "; fpdt reads versions 2 and 3",
                  "convert the model again with a llama.cpp whose format fpdt reads");
    const uint64_t tensor_count = reader.scalar<uint64_t>("the tensor count");
    const uint64_t metadata_count = reader.scalar<uint64_t>("the metadata count");
    if (tensor_count > file_bytes || metadata_count > file_bytes)
      throw Error(kModule, path_ + " claims " + std::to_string(tensor_count) + " tensors and " +
                               std::to_string(metadata_count) + " metadata entries, more than its size allows",
                  "the file is corrupt");
    for (uint64_t i = 0; i < metadata_count; ++i) {
      std::string key = reader.string("a metadata key");
      const uint32_t type = reader.scalar<uint32_t>("a metadata value type");
      if (type > static_cast<uint32_t>(GgufValueType::f64))
        throw Error(kModule, path_ + ": metadata '" + json::excerpt_text(key) + "' has unknown value type " +
                                 std::to_string(type), "the file is corrupt or newer than GGUF version 3");
      GgufValue value = read_value(reader, static_cast<GgufValueType>(type), key, path_, 0);
      if (metadata_index_.count(key) != 0)
        throw Error(kModule, path_ + ": metadata '" + json::excerpt_text(key) + "' appears twice", "the file is corrupt");
      metadata_index_[key] = metadata_.size();
      metadata_.emplace_back(std::move(key), std::move(value));
    }
    uint64_t alignment = kDefaultAlignment;
    if (const GgufValue* value = find("general.alignment")) {
      if (!value->is_integer() || value->integer <= 0 || (value->integer & (value->integer - 1)) != 0)
        throw Error(kModule, path_ + ": general.alignment is " + value->describe() + ", not a power of two",
                    "the file is corrupt");
      alignment = static_cast<uint64_t>(value->integer);
    }
    for (uint64_t i = 0; i < tensor_count; ++i) {
      GgufTensorInfo info;
      info.name = reader.string("a tensor name");
      const uint32_t dims = reader.scalar<uint32_t>("a tensor's dimension count");
      if (dims == 0 || dims > kMaxDims)
        throw Error(kModule, path_ + ": tensor '" + json::excerpt_text(info.name) + "' has " + std::to_string(dims) +
                                 " dimensions (1 to 4 are valid)", "the file is corrupt");
      std::vector<int64_t> ne(dims);
      for (uint32_t d = 0; d < dims; ++d) {
        const uint64_t extent = reader.scalar<uint64_t>("a tensor extent");
        if (extent == 0 || extent > static_cast<uint64_t>(INT64_MAX))
          throw Error(kModule, path_ + ": tensor '" + json::excerpt_text(info.name) + "' has an extent of " +
                                   std::to_string(extent), "the file is corrupt");
        ne[d] = static_cast<int64_t>(extent);
      }
      info.shape.assign(ne.rbegin(), ne.rend());
      info.type = reader.scalar<uint32_t>("a tensor type");
      info.offset = reader.scalar<uint64_t>("a tensor offset");
      const std::optional<GgmlBlock> block = ggml_block(info.type);
      if (!block)
        throw Error(kModule, path_ + ": tensor '" + json::excerpt_text(info.name) + "' has unknown ggml type " +
                                 std::to_string(info.type), "the file is corrupt or uses a type newer than fpdt knows");
      if (ne[0] % block->elements != 0)
        throw Error(kModule, path_ + ": tensor '" + json::excerpt_text(info.name) + "' has rows of " +
                                 std::to_string(ne[0]) + " elements, not a whole number of " + *ggml_type_name(info.type) +
                                 " blocks of " + std::to_string(block->elements), "the file is corrupt");
      int64_t blocks = ne[0] / block->elements;
      for (uint32_t d = 1; d < dims; ++d)
        if (!checked_mul(blocks, blocks, ne[d]))
          throw Error(kModule, path_ + ": tensor '" + json::excerpt_text(info.name) + "' is too large", "the file is corrupt");
      int64_t bytes = 0;
      if (!checked_mul(bytes, blocks, block->bytes))
        throw Error(kModule, path_ + ": tensor '" + json::excerpt_text(info.name) + "' is too large", "the file is corrupt");
      info.bytes = static_cast<uint64_t>(bytes);
      if (tensor_index_.count(info.name) != 0)
        throw Error(kModule, path_ + ": tensor '" + json::excerpt_text(info.name) + "' appears twice", "the file is corrupt");
      tensor_index_[info.name] = tensors_.size();
      tensors_.push_back(std::move(info));
    }
    const uint64_t data_begin = (reader.offset() + alignment - 1) / alignment * alignment;
    for (GgufTensorInfo& info : tensors_) {
      if (info.offset % alignment != 0)
        throw Error(kModule, path_ + ": tensor '" + json::excerpt_text(info.name) + "' starts at data offset " +
                                 std::to_string(info.offset) + ", not a multiple of the alignment " + std::to_string(alignment),
                    "the file is corrupt");
      uint64_t end = 0;
      if (!checked_add(info.offset, info.offset, data_begin) || !checked_add(end, info.offset, info.bytes) || end > file_bytes)
        throw Error(kModule, path_ + ": tensor '" + json::excerpt_text(info.name) + "' lies beyond the end of the file",
                    "the file is truncated: download it again");
    }
    // No two tensors share bytes (llama.cpp refuses such a file too): in offset order, each ends before the next.
    std::vector<const GgufTensorInfo*> by_offset;
    for (const GgufTensorInfo& info : tensors_) by_offset.push_back(&info);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i)
      if (by_offset[i - 1]->bytes > 0 && by_offset[i]->offset < by_offset[i - 1]->offset + by_offset[i - 1]->bytes)
        throw Error(kModule,
                    path_ + ": the data of tensors '" + json::excerpt_text(by_offset[i - 1]->name) + "' and '" +
                        json::excerpt_text(by_offset[i]->name) + "' overlap (bytes " +
                        std::to_string(by_offset[i - 1]->offset) + ".." +
                        std::to_string(by_offset[i - 1]->offset + by_offset[i - 1]->bytes) + " and from " +
                        std::to_string(by_offset[i]->offset) + ")",
                    "the file is corrupt");
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

GgufFile::~GgufFile() {
  if (fd_ >= 0) ::close(fd_);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto found = metadata_index_.find(key);
  return found == metadata_index_.end() ? nullptr : &metadata_[found->second].second;
}

const GgufTensorInfo* GgufFile::tensor(const std::string& name) const {
  const auto found = tensor_index_.find(name);
  return found == tensor_index_.end() ? nullptr : &tensors_[found->second];
}

std::string GgufFile::text(const std::string& key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) throw Error(kModule, path_ + " has no metadata '" + key + "'", "is this a model file written by llama.cpp?");
  if (value->type != GgufValueType::string)
    throw Error(kModule, path_ + ": metadata '" + key + "' is " + value->describe() + ", not a string", "the file is corrupt");
  return value->text;
}

int64_t GgufFile::integer(const std::string& key) const {
  const std::optional<int64_t> value = optional_integer(key);
  if (!value) throw Error(kModule, path_ + " has no metadata '" + key + "'", "the model's metadata is incomplete: convert it again");
  return *value;
}

std::optional<int64_t> GgufFile::optional_integer(const std::string& key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_integer())
    throw Error(kModule, path_ + ": metadata '" + key + "' is " + value->describe() + ", not an integer", "the file is corrupt");
  return value->integer;
}

std::optional<double> GgufFile::optional_real(const std::string& key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_real()) return value->real;
  if (value->is_integer()) return static_cast<double>(value->integer);
  throw Error(kModule, path_ + ": metadata '" + key + "' is " + value->describe() + ", not a number", "the file is corrupt");
}

std::optional<bool> GgufFile::optional_boolean(const std::string& key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->type != GgufValueType::boolean)
    throw Error(kModule, path_ + ": metadata '" + key + "' is " + value->describe() + ", not a bool", "the file is corrupt");
  return value->integer != 0;
}

const std::vector<GgufValue>* GgufFile::array(const std::string& key, GgufValueType element) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return nullptr;
  if (value->type != GgufValueType::array || value->element_type != element)
    throw Error(kModule, path_ + ": metadata '" + key + "' is " + value->describe() + ", not an array of " +
                             value_type_name(element) + "s", "the file is corrupt");
  return &value->items;
}

void GgufFile::read(const GgufTensorInfo& tensor, float* dst) const {
  if (!ggml_type_supported(tensor.type))
    throw Error(kModule,
                path_ + ": tensor '" + json::excerpt_text(tensor.name) + "' is " + *ggml_type_name(tensor.type) +
                    ", a type fpdt does not dequantize",
                "fpdt reads " + supported_ggml_types() + "; requantize the model to one of them (llama-quantize)");
  std::vector<uint8_t> raw(static_cast<size_t>(tensor.bytes));
  read_fully_at(fd_, raw.data(), raw.size(), tensor.offset, path_, kModule);
  dequantize(tensor.type, raw.data(), shape_numel(tensor.shape), dst);
}

}  // namespace fpdt::model
