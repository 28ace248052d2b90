// Tensor shapes: a small fixed-capacity array of extents, so shape handling never allocates.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace deepinfer {

class Shape {
 public:
  static constexpr int kMaxDims = 6;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::span<const std::int64_t> dims);

  int ndim() const { return ndim_; }
  std::int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(i < 0 ? i + ndim_ : i)]; }
  std::int64_t& operator[](int i) { return dims_[static_cast<std::size_t>(i < 0 ? i + ndim_ : i)]; }
  std::int64_t numel() const;
  std::span<const std::int64_t> dims() const { return {dims_.data(), static_cast<std::size_t>(ndim_)}; }
  void push_back(std::int64_t dim);

  bool operator==(const Shape& other) const {
    return ndim_ == other.ndim_ && std::equal(dims_.begin(), dims_.begin() + ndim_, other.dims_.begin());
  }

  std::string to_string() const;

 private:
  std::array<std::int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

}  // namespace deepinfer

template <>
struct fmt::formatter<deepinfer::Shape> : fmt::formatter<std::string> {
  auto format(const deepinfer::Shape& shape, fmt::format_context& ctx) const {
    return fmt::formatter<std::string>::format(shape.to_string(), ctx);
  }
};
