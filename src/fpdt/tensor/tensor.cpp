// Tensor view helpers.
#include "fpdt/tensor/tensor.h"

#include "fpdt/base/checked_math.h"
#include "fpdt/base/error.h"

namespace fpdt {

int64_t shape_numel(const Shape& shape) {
  bool empty = false;
  for (int64_t extent : shape) {
    if (extent < 0) throw Error("tensor", "shape " + shape_string(shape) + " has a negative extent");
    empty = empty || extent == 0;
  }
  if (empty) return 0;
  int64_t numel = 1;
  for (int64_t extent : shape)
    if (!checked_mul(numel, numel, extent))
      throw Error("tensor", "shape " + shape_string(shape) + " has more than 2^63 elements");
  return numel;
}

std::string shape_string(const Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

size_t Tensor::bytes() const {
  size_t bytes = 0;
  if (!checked_mul(bytes, static_cast<size_t>(numel()), dtype_size(dtype_)))
    throw Error("tensor", dtype_name(dtype_) + shape_string(shape_) + " holds more than 2^64 bytes");
  return bytes;
}

void Tensor::check_dtype(DType wanted) const {
  if (wanted != dtype_)
    throw Error("tensor", "tensor of dtype " + dtype_name(dtype_) + " read as " + dtype_name(wanted));
}

}  // namespace fpdt
