// Tensor: a typed, shaped, strided view over shared storage on a device. Views (mmap'd weights,
// slices) share their owner's lifetime; the tensor itself never copies unless asked to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "common/error.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"

namespace deepinfer {

enum class DeviceType : std::uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool operator==(const Device&) const = default;
};

class Tensor {
 public:
  Tensor() = default;

  // Fresh 64-byte-aligned host memory (uninitialised / zeroed).
  static Tensor empty(const Shape& shape, DType dtype);
  static Tensor zeros(const Shape& shape, DType dtype);
  // Copies of host data (f32 / int conveniences for tests and small tables).
  static Tensor from_f32(const Shape& shape, std::span<const float> values);
  // A view over memory owned by `owner` (mmap'd file, device allocation): no copy is made.
  static Tensor view_of(void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> owner,
                        Device device = Device::cpu());

  bool defined() const { return data_ != nullptr || shape_.numel() == 0; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  std::int64_t dim(int i) const { return shape_[i]; }
  std::int64_t numel() const { return shape_.numel(); }
  std::int64_t stride(int i) const { return strides_[static_cast<std::size_t>(i < 0 ? i + ndim() : i)]; }
  std::size_t nbytes() const { return dtype_bytes(dtype_, numel()); }
  bool is_contiguous() const;

  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }

  // Same storage, new shape; the tensor must be contiguous and the element count must match.
  Tensor reshape(const Shape& shape) const;
  // Rows [start, start + length) of dimension `dim` (no copy; packed FP4 only along dim 0).
  Tensor narrow(int dim, std::int64_t start, std::int64_t length) const;
  // Row `index` of dimension 0, with that dimension removed.
  Tensor select(std::int64_t index) const;
  // A contiguous host copy.
  Tensor clone() const;
  // Elementwise conversion on the host to a float type (f32, bf16, f16); sources may be any float
  // type, packed FP4 included, or an integer type.
  Tensor to(DType dtype) const;
  // Reads element i (row-major logical index) as f32; for tests and small tables, not hot loops.
  float item_f32(std::int64_t index) const;

 private:
  std::shared_ptr<const void> owner_;
  void* data_ = nullptr;
  Shape shape_;
  std::array<std::int64_t, Shape::kMaxDims> strides_{};
  DType dtype_ = DType::kF32;
  Device device_;

  void set_contiguous_strides();
};

}  // namespace deepinfer
