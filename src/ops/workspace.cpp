// Workspace arena: blocks of backend memory handed out in 64-byte aligned slices.
#include "ops/workspace.h"

#include <algorithm>
#include <cstdint>

namespace deepinfer::ops {
namespace {

constexpr std::size_t kAlign = 64;
constexpr std::size_t kMinBlock = std::size_t{1} << 20;

std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

Workspace::Workspace(Backend& backend, std::size_t initial_bytes) : backend_(backend) {
  if (initial_bytes > 0) add_block(initial_bytes);
}

void Workspace::add_block(std::size_t bytes) {
  Block block;
  block.memory = backend_.empty(Shape{static_cast<std::int64_t>(align_up(bytes))}, DType::kU8);
  blocks_.push_back(std::move(block));
}

Tensor Workspace::alloc(const Shape& shape, DType dtype) {
  const std::size_t bytes = align_up(std::max<std::size_t>(dtype_bytes(dtype, shape.numel()), 1));
  auto fits = [&](const Block& b) { return b.used + bytes <= static_cast<std::size_t>(b.memory.numel()); };
  while (current_ < blocks_.size() && !fits(blocks_[current_])) {
    if (current_ + 1 == blocks_.size()) break;
    ++current_;
  }
  if (blocks_.empty() || !fits(blocks_[current_])) {
    add_block(std::max({bytes, kMinBlock, capacity_bytes()}));
    current_ = blocks_.size() - 1;
  }
  Block& block = blocks_[current_];
  auto* base = static_cast<std::uint8_t*>(block.memory.raw_data()) + block.used;
  block.used += bytes;
  used_total_ += bytes;
  peak_total_ = std::max(peak_total_, used_total_);
  // The arena owns the memory; tensors borrow it until reset().
  return Tensor::view_of(base, shape, dtype, nullptr, backend_.device());
}

void Workspace::reset() {
  if (blocks_.size() > 1) {
    const std::size_t total = std::max(peak_total_, capacity_bytes());
    blocks_.clear();
    add_block(total);
  }
  for (auto& block : blocks_) block.used = 0;
  used_total_ = 0;
  current_ = 0;
}

Workspace::Mark Workspace::mark() const {
  if (blocks_.empty()) return {};
  return {current_, blocks_[current_].used, used_total_};
}

void Workspace::release(const Mark& mark) {
  if (blocks_.empty()) return;
  for (std::size_t b = mark.block + 1; b < blocks_.size(); ++b) blocks_[b].used = 0;
  blocks_[mark.block].used = mark.used;
  current_ = mark.block;
  used_total_ = mark.used_total;
}

std::shared_ptr<const void> Workspace::retain() const {
  auto held = std::make_shared<std::vector<Tensor>>();
  for (const auto& block : blocks_) held->push_back(block.memory);  // tensors share their owners
  return held;
}

std::size_t Workspace::capacity_bytes() const {
  std::size_t total = 0;
  for (const auto& block : blocks_) total += static_cast<std::size_t>(block.memory.numel());
  return total;
}

}  // namespace deepinfer::ops
