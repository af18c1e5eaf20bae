// safetensors reader and writer (see safetensors.h).
#include "fpdt/tensor/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "fpdt/base/checked_math.h"
#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/json.h"

namespace fpdt {

namespace {

constexpr const char* kModule = "safetensors";
constexpr size_t kMaxHeaderBytes = 100u << 20;  // the format's own limit is 100 MB

// A shape extent or data offset: a whole number (json::integer) that is not negative.
int64_t non_negative_integer(const nlohmann::json& value, const char* what) {
  const int64_t number = json::integer<int64_t>(value, what, kModule);
  if (number < 0) throw Error(kModule, std::string(what) + " holds " + std::to_string(number) + ", a negative number");
  return number;
}

SafetensorsEntry parse_entry(const nlohmann::json& value, size_t data_bytes) {
  if (!value.is_object()) throw Error(kModule, "its entry is " + json::excerpt(value) + ", not an object");
  const auto field = [&](const char* key) -> const nlohmann::json& {
    const auto found = value.find(key);
    if (found == value.end()) throw Error(kModule, std::string("its entry has no \"") + key + "\"");
    return *found;
  };
  SafetensorsEntry entry;
  const nlohmann::json& dtype = field("dtype");
  if (!dtype.is_string()) throw Error(kModule, "its dtype is " + json::excerpt(dtype) + ", not a string");
  entry.dtype = dtype_from_name(dtype.get<std::string>(), "its header entry");
  const nlohmann::json& shape = field("shape");
  if (!shape.is_array()) throw Error(kModule, "its shape is " + json::excerpt(shape) + ", not an array");
  for (const nlohmann::json& extent : shape) entry.shape.push_back(non_negative_integer(extent, "its shape"));
  const nlohmann::json& offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2)
    throw Error(kModule, "its data_offsets are " + json::excerpt(offsets) + ", not two offsets [begin, end]");
  entry.begin_bytes = static_cast<size_t>(non_negative_integer(offsets[0], "its data_offsets"));
  entry.end_bytes = static_cast<size_t>(non_negative_integer(offsets[1], "its data_offsets"));
  size_t expected_bytes = 0;
  if (!checked_mul(expected_bytes, static_cast<size_t>(shape_numel(entry.shape)), dtype_size(entry.dtype)))
    throw Error(kModule, dtype_name(entry.dtype) + shape_string(entry.shape) + " is larger than 2^64 bytes");
  if (entry.end_bytes < entry.begin_bytes || entry.end_bytes - entry.begin_bytes != expected_bytes)
    throw Error(kModule, "its data_offsets [" + std::to_string(entry.begin_bytes) + ", " +
                             std::to_string(entry.end_bytes) + "] do not cover the " + std::to_string(expected_bytes) +
                             " bytes of " + dtype_name(entry.dtype) + shape_string(entry.shape));
  if (entry.end_bytes > data_bytes)
    throw Error(kModule, "its data ends at byte " + std::to_string(entry.end_bytes) + " of a " +
                             std::to_string(data_bytes) + "-byte data section (truncated file)");
  return entry;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::string_view header, size_t data_bytes, const std::string& path) {
  const nlohmann::json root =
      json::parse(header, path + "'s header", kModule, "the file is corrupt or not a safetensors file");
  if (!root.is_object()) throw Error(kModule, path + ": the header is not a JSON object");
  SafetensorsHeader parsed;
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      if (!value.is_object())
        throw Error(kModule, path + ": __metadata__ is " + json::excerpt(value) + ", not an object of strings",
                    "the file is corrupt");
      for (const auto& [key, text] : value.items())
        parsed.metadata[key] = text.is_string() ? text.get<std::string>() : text.dump();
      continue;
    }
    try {
      parsed.entries[name] = parse_entry(value, data_bytes);
    } catch (const Error& error) {
      throw Error(kModule, path + ": tensor '" + json::excerpt_text(name) + "' is invalid: " + error.message(),
                  "the file is corrupt or truncated");
    }
  }
  // Tensors own disjoint byte ranges (empty tensors own none): order by begin, compare neighbours.
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> by_begin;
  for (const auto& [name, entry] : parsed.entries)
    if (entry.end_bytes > entry.begin_bytes) by_begin.emplace_back(&name, &entry);
  std::sort(by_begin.begin(), by_begin.end(),
            [](const auto& a, const auto& b) { return a.second->begin_bytes < b.second->begin_bytes; });
  for (size_t i = 1; i < by_begin.size(); ++i)
    if (by_begin[i].second->begin_bytes < by_begin[i - 1].second->end_bytes)
      throw Error(kModule,
                  path + ": tensors '" + json::excerpt_text(*by_begin[i - 1].first) + "' and '" +
                      json::excerpt_text(*by_begin[i].first) + "' overlap (bytes " +
                      std::to_string(by_begin[i].second->begin_bytes) + " to " +
                      std::to_string(std::min(by_begin[i].second->end_bytes, by_begin[i - 1].second->end_bytes)) +
                      " of the data section)",
                  "the file is corrupt");
  return parsed;
}

SafetensorsReader::SafetensorsReader(const std::string& path)
    : path_(path), file_(path, kModule, "", "check the path; a safetensors file ends in .safetensors") {
  const size_t total_bytes = file_.size_bytes();
  if (total_bytes < 8)
    throw Error(kModule, path + " is " + std::to_string(total_bytes) + " bytes, too short for a safetensors header",
                "the file is truncated or not a safetensors file");
  uint64_t header_bytes = 0;
  read_fully_at(file_.fd(), &header_bytes, 8, 0, path, kModule);
  if (header_bytes > kMaxHeaderBytes || header_bytes + 8 > total_bytes)
    throw Error(kModule, path + " declares a " + std::to_string(header_bytes) + "-byte header in a " +
                             std::to_string(total_bytes) + "-byte file",
                "the file is truncated or not a safetensors file");
  std::string header(header_bytes, '\0');
  read_fully_at(file_.fd(), header.data(), header_bytes, 8, path, kModule);
  data_begin_bytes_ = 8 + header_bytes;
  SafetensorsHeader parsed = parse_safetensors_header(header, total_bytes - data_begin_bytes_, path);
  entries_ = std::move(parsed.entries);
  metadata_ = std::move(parsed.metadata);
}

const std::string& SafetensorsReader::metadata(const std::string& key) const {
  const auto found = metadata_.find(key);
  if (found == metadata_.end()) throw Error(kModule, path_ + " has no metadata key '" + key + "'");
  return found->second;
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  const auto found = entries_.find(name);
  if (found == entries_.end())
    throw Error(kModule, path_ + " has no tensor '" + name + "'", "is it a checkpoint of this model?");
  return found->second;
}

void SafetensorsReader::read_raw(const SafetensorsEntry& entry, void* dst) const {
  read_fully_at(file_.fd(), dst, entry.end_bytes - entry.begin_bytes, data_begin_bytes_ + entry.begin_bytes, path_,
                kModule);
}

void SafetensorsReader::read(const std::string& name, const Tensor& dst) const {
  const SafetensorsEntry& stored = entry(name);
  if (stored.shape != dst.shape())
    throw Error(kModule, path_ + ": tensor '" + name + "' has shape " + shape_string(stored.shape) +
                             ", the model expects " + shape_string(dst.shape()),
                "the checkpoint belongs to a model with another configuration");
  if (stored.dtype == dst.dtype()) {
    read_raw(stored, dst.data());
    return;
  }
  if (dst.dtype() == DType::f32 && (stored.dtype == DType::bf16 || stored.dtype == DType::f16)) {
    std::vector<uint16_t> raw(static_cast<size_t>(dst.numel()));
    read_raw(stored, raw.data());
    float* out = dst.as<float>();
    const auto convert = stored.dtype == DType::bf16 ? bf16_to_float : f16_to_float;
    for (size_t i = 0; i < raw.size(); ++i) out[i] = convert(raw[i]);
    return;
  }
  throw Error(kModule, path_ + ": tensor '" + name + "' is " + dtype_name(stored.dtype) + ", expected " +
                           dtype_name(dst.dtype()));
}

void SafetensorsReader::read_range(const std::string& name, int64_t begin, int64_t count, float* dst) const {
  const SafetensorsEntry& stored = entry(name);
  const int64_t numel = shape_numel(stored.shape);
  if (stored.dtype != DType::f32)
    throw Error(kModule, path_ + ": tensor '" + name + "' is " + dtype_name(stored.dtype) + ", expected F32");
  if (begin < 0 || count < 0 || begin + count > numel)
    throw Error(kModule, path_ + ": tensor '" + name + "' has " + std::to_string(numel) + " elements, not [" +
                             std::to_string(begin) + ", " + std::to_string(begin + count) + ")",
                "the file belongs to another model or partition");
  read_fully_at(file_.fd(), dst, static_cast<size_t>(count) * sizeof(float),
                data_begin_bytes_ + stored.begin_bytes + static_cast<size_t>(begin) * sizeof(float), path_, kModule);
}

std::vector<float> SafetensorsReader::read_floats(const std::string& name) const {
  const SafetensorsEntry& stored = entry(name);
  std::vector<float> values(static_cast<size_t>(shape_numel(stored.shape)));
  read(name, Tensor(values.data(), DType::f32, stored.shape));
  return values;
}

std::vector<int32_t> SafetensorsReader::read_ints(const std::string& name) const {
  const SafetensorsEntry& stored = entry(name);
  std::vector<int32_t> values(static_cast<size_t>(shape_numel(stored.shape)));
  read(name, Tensor(values.data(), DType::i32, stored.shape));
  return values;
}

void SafetensorsWriter::add(const std::string& name, const Tensor& tensor) {
  tensors_.emplace_back(name, tensor);
}

void SafetensorsWriter::write(const std::string& path) const {
  nlohmann::ordered_json header;
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  size_t offset = 0;
  for (const auto& [name, tensor] : tensors_) {
    header[name] = {{"dtype", dtype_name(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.bytes()}}};
    offset += tensor.bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
  const uint64_t header_bytes = text.size();
  write_file_atomic(
      path,
      [&](int fd) {
        write_fully(fd, &header_bytes, 8, path, kModule);
        write_fully(fd, text.data(), text.size(), path, kModule);
        for (const auto& [name, tensor] : tensors_) write_fully(fd, tensor.data(), tensor.bytes(), path, kModule);
      },
      kModule);
}

}  // namespace fpdt
