// DType sizes and names.
#include "fpdt/tensor/dtype.h"

#include <cstring>

#include "fpdt/base/error.h"
#include "fpdt/base/json.h"

namespace fpdt {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u16: return 2;
    case DType::u32: return 4;
    case DType::u8: return 1;
  }
  return 0;
}

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u16: return "U16";
    case DType::u32: return "U32";
    case DType::u8: return "U8";
  }
  return "?";
}

DType dtype_from_name(const std::string& name, const std::string& where) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u16,
                      DType::u32, DType::u8})
    if (dtype_name(dtype) == name) return dtype;
  throw Error("tensor", "unknown dtype '" + json::excerpt_text(name) + "' in " + where,
              "supported: F32, F64, BF16, F16, I32, I64, U16, U32, U8");
}

float bf16_to_float(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, 4);
  return value;
}

// IEEE half → float, exactly (every half is a float): normals, subnormals, zeros, inf and NaN.
float f16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  uint32_t word;
  if (exponent == 0x1fu) {
    word = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    word = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    word = sign;
  } else {  // subnormal: mantissa · 2^-24
    float value = static_cast<float>(mantissa) * 0x1p-24f;
    std::memcpy(&word, &value, 4);
    word |= sign;
  }
  float value;
  std::memcpy(&value, &word, 4);
  return value;
}

}  // namespace fpdt
