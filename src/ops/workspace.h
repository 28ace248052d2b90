// Workspace: a bump arena of backend memory for one forward pass's temporaries. reset() makes
// everything reusable; after a pass that needed more than one block, the next reset coalesces
// them so steady-state passes allocate nothing. Graphs: the same sequence of alloc() calls after
// a reset() gets the same addresses again (a bump arena), so a pass captured after a warm-up pass
// of the same shapes keeps valid pointers for its replays; retain() keeps memory that a later
// coalescing would free alive for a captured graph (Graph::keep_alive).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "ops/backend.h"

namespace deepinfer::ops {

class Workspace {
 public:
  explicit Workspace(Backend& backend, std::size_t initial_bytes = 0);

  // A tensor carved from the arena; valid until the next reset().
  Tensor alloc(const Shape& shape, DType dtype);
  // Drops every tensor handed out since the last reset.
  void reset();

  // A point to return to: release(mark) drops the tensors handed out after it (per-layer scratch).
  struct Mark {
    std::size_t block = 0;
    std::size_t used = 0;
    std::size_t used_total = 0;
  };
  Mark mark() const;
  void release(const Mark& mark);

  // Owns every block allocated so far: they stay allocated (at the same addresses) while the
  // returned pointer lives, even after reset() replaced them with one coalesced block.
  std::shared_ptr<const void> retain() const;

  std::size_t capacity_bytes() const;
  std::size_t used_bytes() const { return used_total_; }

 private:
  struct Block {
    Tensor memory;  // u8 [bytes]
    std::size_t used = 0;
  };

  Backend& backend_;
  std::vector<Block> blocks_;
  std::size_t current_ = 0;  // block that serves the next allocation
  std::size_t used_total_ = 0;
  std::size_t peak_total_ = 0;

  void add_block(std::size_t bytes);
};

}  // namespace deepinfer::ops
