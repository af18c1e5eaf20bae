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

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::u32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }

}  // namespace fpdt
