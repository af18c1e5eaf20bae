// The tensor types of GGUF files (ggml's type ids): their names, block layouts (elements per block,
// bytes per block) and the dequantization of the types fpdt reads — F32, F16, BF16, Q8_0, Q4_0, Q4_1,
// Q4_K, Q5_K, Q6_K — to fp32. Every known id has a name and a size, so a file with other types is
// still listed by `fpdt inspect`; only reading such a tensor is refused (by gguf.cpp).
// Dequantization follows gguf-py's (transformers' GGUF loader): the same fp32 operations in the same
// order, so the values are bit for bit the ones transformers loads (the file is compiled without FMA
// contraction: CMake's ISO C++ mode, -ffp-contract=off).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fpdt::model {

enum class GgmlType : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q8_0 = 8, q4_k = 12, q5_k = 13, q6_k = 14, bf16 = 30,
};

struct GgmlBlock {
  int64_t elements = 0;  // per block (1 for the float types)
  int64_t bytes = 0;     // per block
};

// Name ("Q4_K", "F16") and block layout of any ggml type id llama.cpp defines; nullopt for an id it
// does not (a corrupt file, or a type newer than this table).
std::optional<std::string> ggml_type_name(uint32_t type);
std::optional<GgmlBlock> ggml_block(uint32_t type);
// True for the types dequantize() reads.
bool ggml_type_supported(uint32_t type);
// "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K", for hints.
std::string supported_ggml_types();

// dst[0, count) = the fp32 values of the `count` elements at `src` (count / block.elements blocks of
// block.bytes bytes, little-endian). `count` is a whole number of blocks; `type` is supported.
void dequantize(uint32_t type, const uint8_t* src, int64_t count, float* dst);

}  // namespace fpdt::model
