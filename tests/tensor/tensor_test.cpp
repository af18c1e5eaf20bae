// Shapes from input: shape_numel and Tensor::bytes refuse negative extents and products that do
// not fit, instead of wrapping (shape [2^32, 2^32] used to count as 0 elements).
#include <gtest/gtest.h>

#include "fpdt/base/error.h"
#include "fpdt/tensor/tensor.h"
#include "testing.h"

namespace fpdt {
namespace {

TEST(ShapeNumel, MultipliesExtents) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({2, 3, 4}), 24);
  EXPECT_EQ(shape_numel({5, 0, 7}), 0);
  EXPECT_EQ(shape_numel({int64_t{1} << 31, int64_t{1} << 31}), int64_t{1} << 62);
}

TEST(ShapeNumel, RefusesNegativeExtentsAndOverflow) {
  testing::expect_contains(testing::error_message([] { shape_numel({3, -1}); }),
                           {"[tensor]", "[3, -1]", "negative"});
  testing::expect_contains(testing::error_message([] { shape_numel({int64_t{1} << 32, int64_t{1} << 32}); }),
                           {"[tensor]", "[4294967296, 4294967296]", "2^63"});
  testing::expect_contains(testing::error_message([] { shape_numel({int64_t{1} << 32, -1, 0}); }), {"negative"});
  // An empty tensor is empty whatever its other extents (no intermediate product overflows).
  EXPECT_EQ(shape_numel({int64_t{1} << 32, int64_t{1} << 32, 0}), 0);
}

TEST(TensorBytes, RefusesMoreThanSizeT) {
  const Tensor fits(nullptr, DType::f64, {int64_t{1} << 30, 8});
  EXPECT_EQ(fits.bytes(), size_t{1} << 36);
  const Tensor too_big(nullptr, DType::f64, {int64_t{1} << 62});
  testing::expect_contains(testing::error_message([&] { (void)too_big.bytes(); }),
                           {"[tensor]", "F64[4611686018427387904]", "2^64 bytes"});
}

}  // namespace
}  // namespace fpdt
