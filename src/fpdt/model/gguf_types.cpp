// ggml tensor types: the table of names and block layouts, and the dequantizers (see gguf_types.h).
// Block layouts (little-endian; d, dmin are IEEE halves), as llama.cpp's ggml-common.h defines them:
//   Q4_0  32 el, 18 B: d, qs[16]            x[j] = d·(lo(qs[j]) − 8), x[j+16] = d·(hi(qs[j]) − 8)
//   Q4_1  32 el, 20 B: d, m, qs[16]         x[j] = d·lo(qs[j]) + m,   x[j+16] = d·hi(qs[j]) + m
//   Q8_0  32 el, 34 B: d, int8 qs[32]       x[j] = qs[j]·d
//   Q4_K 256 el, 144 B: d, dmin, scales[12] (8 6-bit scales and mins), qs[128]
//   Q5_K 256 el, 176 B: d, dmin, scales[12], qh[32] (5th bits), qs[128]
//   Q6_K 256 el, 210 B: ql[128], qh[64], int8 scales[16], d
#include "fpdt/model/gguf_types.h"

#include <cstring>

#include "fpdt/base/error.h"
#include "fpdt/tensor/dtype.h"

namespace fpdt::model {

namespace {

struct TypeEntry {
  uint32_t id;
  const char* name;
  GgmlBlock block;
};

constexpr int64_t kSuper = 256;  // QK_K: elements of a K-quant super-block

// Every type llama.cpp's gguf-py defines (GGML_QUANT_SIZES), by id.
constexpr TypeEntry kTypes[] = {
    {0, "F32", {1, 4}},          {1, "F16", {1, 2}},          {2, "Q4_0", {32, 18}},       {3, "Q4_1", {32, 20}},
    {6, "Q5_0", {32, 22}},       {7, "Q5_1", {32, 24}},       {8, "Q8_0", {32, 34}},       {9, "Q8_1", {32, 40}},
    {10, "Q2_K", {kSuper, 84}},  {11, "Q3_K", {kSuper, 110}}, {12, "Q4_K", {kSuper, 144}}, {13, "Q5_K", {kSuper, 176}},
    {14, "Q6_K", {kSuper, 210}}, {15, "Q8_K", {kSuper, 292}}, {16, "IQ2_XXS", {kSuper, 66}}, {17, "IQ2_XS", {kSuper, 74}},
    {18, "IQ3_XXS", {kSuper, 98}}, {19, "IQ1_S", {kSuper, 50}}, {20, "IQ4_NL", {32, 18}},  {21, "IQ3_S", {kSuper, 110}},
    {22, "IQ2_S", {kSuper, 82}}, {23, "IQ4_XS", {kSuper, 136}}, {24, "I8", {1, 1}},        {25, "I16", {1, 2}},
    {26, "I32", {1, 4}},         {27, "I64", {1, 8}},         {28, "F64", {1, 8}},         {29, "IQ1_M", {kSuper, 56}},
    {30, "BF16", {1, 2}},        {34, "TQ1_0", {kSuper, 54}}, {35, "TQ2_0", {kSuper, 66}}, {39, "MXFP4", {32, 17}},
};

constexpr GgmlType kSupported[] = {GgmlType::f32,  GgmlType::f16,  GgmlType::bf16, GgmlType::q8_0, GgmlType::q4_0,
                                   GgmlType::q4_1, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k};

const TypeEntry* find_type(uint32_t type) {
  for (const TypeEntry& entry : kTypes)
    if (entry.id == type) return &entry;
  return nullptr;
}

uint16_t u16_at(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
float half_at(const uint8_t* p) { return f16_to_float(u16_at(p)); }

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) packed in 12 bytes (gguf-py's
// Q4_K.get_scale_min): bytes 0-3 hold scales 0-3 (low 6 bits) and the top bits of scales 4-7, bytes
// 4-7 the same for the mins, bytes 8-11 the low 4 bits of scales (low nibble) and mins (high) 4-7.
void scale_min_k4(const uint8_t* scales, int j, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = scales[j] & 63;
    min = scales[j + 4] & 63;
  } else {
    scale = static_cast<uint8_t>((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
    min = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// dst[256] of one Q4_K (high_bits null) or Q5_K block: per sub-block j of 32, x = (d·scale_j)·q − dmin·min_j.
// Sub-blocks 2g and 2g+1 take the low and high nibbles of qs[32g, 32g + 32); Q5_K's 5th bit of
// element 32j + l is bit j of qh[l].
void dequantize_k4_block(float d, float dmin, const uint8_t* scales, const uint8_t* qh, const uint8_t* qs, float* dst) {
  for (int j = 0; j < 8; ++j) {
    uint8_t scale = 0, min = 0;
    scale_min_k4(scales, j, scale, min);
    const float step = d * static_cast<float>(scale);
    const float offset = dmin * static_cast<float>(min);
    const uint8_t* nibbles = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      int q = (nibbles[l] >> shift) & 0x0F;
      if (qh != nullptr) q |= ((qh[l] >> j) & 1) << 4;
      dst[32 * j + l] = step * static_cast<float>(q) - offset;
    }
  }
}

void dequantize_q6_k_block(const uint8_t* block, float* dst) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(block + 192);
  const float d = half_at(block + 208);
  // Two halves of 128: element 128h + r takes nibble r / 64 of ql[64h + r % 64] and bits
  // 2·(r / 32) of qh[32h + r % 32]; its scale is scales[(128h + r) / 16].
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < 128; ++r) {
      const int low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
      const int high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
      const int e = 128 * h + r;
      const float step = d * static_cast<float>(scales[e / 16]);
      dst[e] = step * static_cast<float>((low | (high << 4)) - 32);
    }
}

}  // namespace

std::optional<std::string> ggml_type_name(uint32_t type) {
  const TypeEntry* entry = find_type(type);
  if (entry == nullptr) return std::nullopt;
  return std::string(entry->name);
}

std::optional<GgmlBlock> ggml_block(uint32_t type) {
  const TypeEntry* entry = find_type(type);
  if (entry == nullptr) return std::nullopt;
  return entry->block;
}

bool ggml_type_supported(uint32_t type) {
  for (GgmlType supported : kSupported)
    if (static_cast<uint32_t>(supported) == type) return true;
  return false;
}

std::string supported_ggml_types() {
  std::string text;
  for (GgmlType supported : kSupported) text += (text.empty() ? "" : ", ") + *ggml_type_name(static_cast<uint32_t>(supported));
  return text;
}

void dequantize(uint32_t type, const uint8_t* src, int64_t count, float* dst) {
  const GgmlBlock block = *ggml_block(type);
  FPDT_ASSERT(ggml_type_supported(type) && count % block.elements == 0);
  const int64_t blocks = count / block.elements;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::f32:
      std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
      return;
    case GgmlType::f16:
      for (int64_t i = 0; i < count; ++i) dst[i] = half_at(src + 2 * i);
      return;
    case GgmlType::bf16:
      for (int64_t i = 0; i < count; ++i) dst[i] = bf16_to_float(u16_at(src + 2 * i));
      return;
    case GgmlType::q8_0:
      for (int64_t b = 0; b < blocks; ++b, src += block.bytes, dst += 32) {
        const float d = half_at(src);
        for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(static_cast<int8_t>(src[2 + j])) * d;
      }
      return;
    case GgmlType::q4_0:
      for (int64_t b = 0; b < blocks; ++b, src += block.bytes, dst += 32) {
        const float d = half_at(src);
        for (int j = 0; j < 16; ++j) {
          dst[j] = d * static_cast<float>((src[2 + j] & 0x0F) - 8);
          dst[j + 16] = d * static_cast<float>((src[2 + j] >> 4) - 8);
        }
      }
      return;
    case GgmlType::q4_1:
      for (int64_t b = 0; b < blocks; ++b, src += block.bytes, dst += 32) {
        const float d = half_at(src), m = half_at(src + 2);
        for (int j = 0; j < 16; ++j) {
          dst[j] = d * static_cast<float>(src[4 + j] & 0x0F) + m;
          dst[j + 16] = d * static_cast<float>(src[4 + j] >> 4) + m;
        }
      }
      return;
    case GgmlType::q4_k:
      for (int64_t b = 0; b < blocks; ++b, src += block.bytes, dst += kSuper)
        dequantize_k4_block(half_at(src), half_at(src + 2), src + 4, nullptr, src + 16, dst);
      return;
    case GgmlType::q5_k:
      for (int64_t b = 0; b < blocks; ++b, src += block.bytes, dst += kSuper)
        dequantize_k4_block(half_at(src), half_at(src + 2), src + 4, src + 16, src + 48, dst);
      return;
    case GgmlType::q6_k:
      for (int64_t b = 0; b < blocks; ++b, src += block.bytes, dst += kSuper) dequantize_q6_k_block(src, dst);
      return;
  }
  FPDT_ASSERT(false);
}

}  // namespace fpdt::model
