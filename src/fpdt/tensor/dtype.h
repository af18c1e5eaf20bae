// Element types the engine stores. CPU math is fp32; bf16 is the CUDA storage type; f64 is for the
// reference kernels' finite-difference checks; f16 is read from Hugging Face checkpoints; integer
// types hold token ids and positions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fpdt {

enum class DType : uint8_t { f32, f64, bf16, i32, i64, u16, u32, u8, f16 };

size_t dtype_size(DType dtype);
// The safetensors spelling: "F32", "F64", "BF16", "F16", "I32", "I64", "U16", "U32", "U8".
std::string dtype_name(DType dtype);
// Inverse of dtype_name; throws fpdt::Error naming `where` for an unknown spelling.
DType dtype_from_name(const std::string& name, const std::string& where);

// 16-bit floats → float, exactly (every bf16 and every IEEE half is a float): normals, subnormals,
// zeros, inf and NaN. Safetensors and GGUF weights are read through these.
float bf16_to_float(uint16_t bits);
float f16_to_float(uint16_t bits);

// float → bf16, rounded to nearest, ties to even (what every bf16 unit does: AVX512-BF16's
// vcvtneps2bf16, CUDA's __float2bfloat16_rn): ±inf stay, a NaN stays a quiet NaN of its sign, a float
// beyond bf16's largest finite value rounds to ±inf. Inline: the bf16 kernels call it per element.
inline uint16_t float_to_bf16(float value) {
  uint32_t word;
  __builtin_memcpy(&word, &value, 4);
  if ((word & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((word >> 16) | 0x0040u);  // NaN
  const uint32_t rounding = 0x7fffu + ((word >> 16) & 1u);
  return static_cast<uint16_t>((word + rounding) >> 16);
}
// The float nearest to `value` that bf16 holds: bf16_to_float(float_to_bf16(value)), without the table.
inline float round_to_bf16(float value) {
  const uint32_t word = static_cast<uint32_t>(float_to_bf16(value)) << 16;
  float rounded;
  __builtin_memcpy(&rounded, &word, 4);
  return rounded;
}

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::u32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }

}  // namespace fpdt
