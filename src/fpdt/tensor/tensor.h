// Tensor: a non-owning, contiguous, row-major view (pointer, dtype, shape). Storage comes from a
// Buffer or an Arena; a Tensor never allocates or frees. Kernels take raw pointers, so a Tensor is
// mostly the bookkeeping around them: named parameter views, file I/O, tests.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "fpdt/tensor/dtype.h"

namespace fpdt {

using Shape = std::vector<int64_t>;

// Product of the extents; throws fpdt::Error for a negative extent or a product beyond int64.
int64_t shape_numel(const Shape& shape);
// "[2, 24, 64]"
std::string shape_string(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, DType dtype, Shape shape) : data_(data), dtype_(dtype), shape_(std::move(shape)) {}

  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int axis) const { return shape_.at(static_cast<size_t>(axis)); }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t bytes() const;  // numel · dtype size; throws fpdt::Error beyond size_t

  // Typed pointer; throws fpdt::Error when T does not match the dtype.
  template <typename T> T* as() const {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(data_);
  }

 private:
  void check_dtype(DType wanted) const;
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Shape shape_;
};

}  // namespace fpdt
