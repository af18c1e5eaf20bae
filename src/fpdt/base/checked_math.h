// Overflow-checked integer arithmetic for sizes computed from input (shapes, file headers, configs):
// each returns false instead of wrapping, so the caller can throw an error naming the input.
#pragma once

namespace fpdt {

// out = a · b; false (out unspecified) when the product does not fit T.
template <typename T>
[[nodiscard]] bool checked_mul(T& out, T a, T b) {
  return !__builtin_mul_overflow(a, b, &out);
}

// out = a + b; false (out unspecified) when the sum does not fit T.
template <typename T>
[[nodiscard]] bool checked_add(T& out, T a, T b) {
  return !__builtin_add_overflow(a, b, &out);
}

// ⌈a / b⌉ for a ≥ 0, b > 0, without the overflow of (a + b − 1) / b near the type's maximum.
template <typename T>
constexpr T ceil_div(T a, T b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

}  // namespace fpdt
