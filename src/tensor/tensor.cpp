// Tensor: host allocation, views and host-side conversions.
#include "tensor/tensor.h"

#include <cstdlib>
#include <cstring>

#include "tensor/float_formats.h"

namespace deepinfer {
namespace {

constexpr std::size_t kAlignment = 64;

std::shared_ptr<void> allocate_host(std::size_t bytes) {
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* memory = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  DI_CHECK(memory != nullptr, "out of host memory allocating {} bytes", bytes);
  return std::shared_ptr<void>(memory, &std::free);
}

// Reads one element as f32, whatever the (non-packed) dtype.
float load_f32(const std::uint8_t* p, DType dtype) {
  switch (dtype) {
    case DType::kF64: { double v; std::memcpy(&v, p, 8); return static_cast<float>(v); }
    case DType::kF32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::kF16: { std::uint16_t v; std::memcpy(&v, p, 2); return f16_to_f32(v); }
    case DType::kBF16: { std::uint16_t v; std::memcpy(&v, p, 2); return bf16_to_f32(v); }
    case DType::kF8E4M3: return e4m3_to_f32(*p);
    case DType::kF8E5M2: return e5m2_to_f32(*p);
    case DType::kUE8M0: return ue8m0_to_f32(*p);
    case DType::kI64: { std::int64_t v; std::memcpy(&v, p, 8); return static_cast<float>(v); }
    case DType::kI32: { std::int32_t v; std::memcpy(&v, p, 4); return static_cast<float>(v); }
    case DType::kI16: { std::int16_t v; std::memcpy(&v, p, 2); return static_cast<float>(v); }
    case DType::kI8: return static_cast<float>(static_cast<std::int8_t>(*p));
    case DType::kU8: case DType::kBool: return static_cast<float>(*p);
    case DType::kF4E2M1: break;
  }
  throw_error("load_f32: unsupported dtype {}", dtype_name(dtype));
}

void store_f32(std::uint8_t* p, DType dtype, float value) {
  switch (dtype) {
    case DType::kF32: std::memcpy(p, &value, 4); return;
    case DType::kBF16: { const std::uint16_t v = f32_to_bf16(value); std::memcpy(p, &v, 2); return; }
    case DType::kF16: { const std::uint16_t v = f32_to_f16(value); std::memcpy(p, &v, 2); return; }
    default: break;
  }
  throw_error("Tensor::to: conversion to {} is not supported (use f32, bf16 or f16)", dtype_name(dtype));
}

}  // namespace

void Tensor::set_contiguous_strides() {
  std::int64_t stride = 1;
  for (int i = shape_.ndim() - 1; i >= 0; --i) {
    strides_[static_cast<std::size_t>(i)] = stride;
    stride *= shape_[i];
  }
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.set_contiguous_strides();
  auto memory = allocate_host(t.nbytes());
  t.data_ = memory.get();
  t.owner_ = std::move(memory);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::from_f32(const Shape& shape, std::span<const float> values) {
  DI_CHECK(static_cast<std::int64_t>(values.size()) == shape.numel(),
           "Tensor::from_f32: {} values for shape {}", values.size(), shape);
  Tensor t = empty(shape, DType::kF32);
  std::memcpy(t.data_, values.data(), values.size_bytes());
  return t;
}

Tensor Tensor::view_of(void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> owner,
                       Device device) {
  Tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.owner_ = std::move(owner);
  t.set_contiguous_strides();
  if (dtype == DType::kF4E2M1) {
    DI_CHECK(shape.ndim() > 0 && shape[-1] % 2 == 0, "packed fp4 tensor needs an even last dimension, got {}",
             shape);
  }
  return t;
}

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[static_cast<std::size_t>(i)] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

Tensor Tensor::reshape(const Shape& shape) const {
  DI_CHECK(is_contiguous(), "reshape of a non-contiguous tensor {} to {}", shape_, shape);
  DI_CHECK(shape.numel() == numel(), "reshape from {} to {} changes the element count", shape_, shape);
  Tensor t = *this;
  t.shape_ = shape;
  t.set_contiguous_strides();
  return t;
}

Tensor Tensor::narrow(int dim, std::int64_t start, std::int64_t length) const {
  if (dim < 0) dim += ndim();
  DI_CHECK(dim >= 0 && dim < ndim(), "narrow: dimension {} out of range for shape {}", dim, shape_);
  DI_CHECK(start >= 0 && length >= 0 && start + length <= shape_[dim],
           "narrow: rows [{}, {}) out of range for dimension {} of shape {}", start, start + length, dim, shape_);
  DI_CHECK(dtype_ != DType::kF4E2M1 || dim == 0, "narrow: packed fp4 tensors can only be narrowed along dim 0");
  Tensor t = *this;
  t.shape_[dim] = length;
  const std::int64_t offset_elements = start * strides_[static_cast<std::size_t>(dim)];
  t.data_ = static_cast<std::uint8_t*>(data_) + dtype_bytes(dtype_, offset_elements);
  return t;
}

Tensor Tensor::select(std::int64_t index) const {
  DI_CHECK(ndim() >= 1, "select on a scalar tensor");
  Tensor row = narrow(0, index, 1);
  Shape shape(std::span<const std::int64_t>(shape_.dims().subspan(1)));
  Tensor t = row;
  t.shape_ = shape;
  for (int i = 0; i + 1 < ndim(); ++i) t.strides_[static_cast<std::size_t>(i)] = strides_[static_cast<std::size_t>(i + 1)];
  return t;
}

Tensor Tensor::clone() const {
  DI_CHECK(device_.is_cpu(), "Tensor::clone: only host tensors can be cloned on the host");
  Tensor out = empty(shape_, dtype_);
  if (is_contiguous()) {
    std::memcpy(out.data_, data_, nbytes());
    return out;
  }
  DI_CHECK(dtype_ != DType::kF4E2M1, "Tensor::clone: non-contiguous packed fp4 tensor");
  const std::size_t element = dtype_bytes(dtype_, 1);
  std::array<std::int64_t, Shape::kMaxDims> index{};
  auto* dst = static_cast<std::uint8_t*>(out.data_);
  for (std::int64_t n = 0; n < numel(); ++n) {
    std::int64_t offset = 0;
    for (int d = 0; d < ndim(); ++d) offset += index[static_cast<std::size_t>(d)] * strides_[static_cast<std::size_t>(d)];
    std::memcpy(dst + static_cast<std::size_t>(n) * element,
                static_cast<const std::uint8_t*>(data_) + static_cast<std::size_t>(offset) * element, element);
    for (int d = ndim() - 1; d >= 0; --d) {
      if (++index[static_cast<std::size_t>(d)] < shape_[d]) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
  return out;
}

float Tensor::item_f32(std::int64_t index) const {
  DI_CHECK(device_.is_cpu(), "item_f32 on a device tensor");
  DI_CHECK(index >= 0 && index < numel(), "item_f32: index {} out of range for shape {}", index, shape_);
  std::int64_t offset = 0;
  std::int64_t rest = index;
  for (int d = ndim() - 1; d >= 0; --d) {
    offset += (rest % shape_[d]) * strides_[static_cast<std::size_t>(d)];
    rest /= shape_[d];
  }
  const auto* base = static_cast<const std::uint8_t*>(data_);
  if (dtype_ == DType::kF4E2M1) return e2m1_to_f32(fp4_unpack(base, offset));
  return load_f32(base + dtype_bytes(dtype_, 1) * static_cast<std::size_t>(offset), dtype_);
}

Tensor Tensor::to(DType dtype) const {
  DI_CHECK(device_.is_cpu(), "Tensor::to on a device tensor");
  Tensor out = empty(shape_, dtype);
  const std::size_t out_element = dtype_bytes(dtype, 1);
  auto* dst = static_cast<std::uint8_t*>(out.data_);
  if (is_contiguous() && dtype_ != DType::kF4E2M1) {
    const std::size_t in_element = dtype_bytes(dtype_, 1);
    const auto* src = static_cast<const std::uint8_t*>(data_);
    for (std::int64_t i = 0; i < numel(); ++i)
      store_f32(dst + static_cast<std::size_t>(i) * out_element, dtype,
                load_f32(src + static_cast<std::size_t>(i) * in_element, dtype_));
    return out;
  }
  for (std::int64_t i = 0; i < numel(); ++i) store_f32(dst + static_cast<std::size_t>(i) * out_element, dtype, item_f32(i));
  return out;
}

}  // namespace deepinfer
