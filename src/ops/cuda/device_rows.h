// Plain parameter structs shared by the CUDA backend's host code (.cpp) and its kernels (.cu):
// row views of device tensors, paged row sources, the device error word and weight references.
// No CUDA types and no project headers, so nvcc compiles it without the host-only libraries.
#pragma once

#include <cstdint>

namespace deepinfer::ops::cuda {

// rows × width floats (f32 or bf16); row r starts at base + r * stride elements.
struct DevRows {
  void* base = nullptr;
  std::int64_t rows = 0;
  std::int64_t width = 0;
  std::int64_t stride = 0;
  int bf16 = 0;
};

// Logical rows of a RowView: physical row = page_table[r / page_rows] * page_rows + r % page_rows
// when page_table is set, else r.
struct DevRowSource {
  DevRows rows;
  const std::int32_t* page_table = nullptr;
  std::int64_t page_rows = 0;
  std::int64_t num_rows = 0;
};

// What a kernel found wrong in device-resident input (ids, indices): the first report wins and is
// turned into a deepinfer::Error by the host at the next synchronisation point.
enum class DeviceFault : int {
  kNone = 0,
  kTokenId,       // embedding: id outside the table   (value, bound)
  kGatherRow,     // gather_rows: row outside the source
  kScatterRow,    // scatter_rows: row outside the destination
  kAttnIndex,     // sparse_attention: index outside the KV rows
  kPageTable,     // a page-table entry outside its pool
  kExpertId,      // moe: expert id outside the expert list
  kHashTokenId,   // moe_route: token id outside tid2eid
  kRopePosition,  // reserved
};

// Layout of the device error word: [fault, value, bound, unused].
constexpr int kErrorWords = 4;

// Weight storage formats as the kernels see them.
enum class DevWeightFormat : int { kF32 = 0, kBF16 = 1, kFp8Block = 2, kFp4 = 3 };

// One weight matrix [n, k] on the device.
struct DevWeight {
  const void* data = nullptr;
  const void* scale = nullptr;   // fp8: [ceil(n/b), ceil(k/b)]; fp4: [n, k/b]
  std::int64_t scale_ld = 0;     // scale row length
  int block = 0;
  int scale_f32 = 0;             // scale stored as f32 (else ue8m0 bytes)
};

}  // namespace deepinfer::ops::cuda
