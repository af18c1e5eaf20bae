// Fuzz target: a safetensors file (8-byte header length, JSON header, data), read as the weight
// loader and `fpdt inspect` read it — open, list, then read every tensor of a dtype they read.
#include "fpdt/tensor/safetensors.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fpdt::fuzz::MemoryFile file;
  const std::string& path = file.write(data, size);
  fpdt::fuzz::expect_clean([&] {
    const fpdt::SafetensorsReader reader(path);
    for (const auto& [key, value] : reader.metadata()) (void)key.size(), (void)value.size();
    for (const std::string& name : reader.names()) {
      const fpdt::SafetensorsEntry& entry = reader.entry(name);
      (void)fpdt::shape_string(entry.shape);
      if (entry.dtype == fpdt::DType::f32 || entry.dtype == fpdt::DType::bf16) {
        (void)reader.read_floats(name);
      } else if (entry.dtype == fpdt::DType::i32) {
        (void)reader.read_ints(name);
      }
    }
  });
  return 0;
}
