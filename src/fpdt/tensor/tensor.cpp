// Tensor view helpers.
#include "fpdt/tensor/tensor.h"

#include "fpdt/base/error.h"

namespace fpdt {

int64_t shape_numel(const Shape& shape) {
  int64_t numel = 1;
  for (int64_t extent : shape) numel *= extent;
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

void Tensor::check_dtype(DType wanted) const {
  if (wanted != dtype_)
    throw Error("tensor", "tensor of dtype " + dtype_name(dtype_) + " read as " + dtype_name(wanted));
}

}  // namespace fpdt
