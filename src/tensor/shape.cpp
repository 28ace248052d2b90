// Shape: construction with rank and extent checks.
#include "tensor/shape.h"

#include "common/error.h"

namespace deepinfer {

Shape::Shape(std::initializer_list<std::int64_t> dims) : Shape(std::span<const std::int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const std::int64_t> dims) {
  DI_CHECK(dims.size() <= static_cast<std::size_t>(kMaxDims), "tensor rank {} exceeds the maximum of {}",
           dims.size(), kMaxDims);
  for (const auto dim : dims) push_back(dim);
}

void Shape::push_back(std::int64_t dim) {
  DI_CHECK(ndim_ < kMaxDims, "tensor rank exceeds the maximum of {}", kMaxDims);
  DI_CHECK(dim >= 0, "negative tensor extent {}", dim);
  dims_[static_cast<std::size_t>(ndim_++)] = dim;
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[static_cast<std::size_t>(i)];
  return n;
}

std::string Shape::to_string() const { return fmt::format("[{}]", fmt::join(dims(), ", ")); }

}  // namespace deepinfer
