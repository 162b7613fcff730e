#include "tensor/tensor_view.h"

namespace weir {

std::string Shape::ToString() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

}  // namespace weir
