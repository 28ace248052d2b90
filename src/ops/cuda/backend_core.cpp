// CUDA backend: construction, memory movement, the device fault word and the row-wise ops
// (embedding, gathers, elementwise, RMSNorm, RoPE, Hadamard, fake quant, SwiGLU, argmax).
#include <algorithm>
#include <bit>
#include <memory>

#include "common/env.h"
#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_memory.h"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops {

std::unique_ptr<Backend> make_cuda_backend(int device) {
  CudaBackendOptions options;
  options.device = device;
  options.batch_invariant = env::flags().batch_invariant;
  options.fp8_wgmma_decode = env::flags().fp8_wgmma;
  options.moe_fp4_wgmma = env::flags().moe_fp4_wgmma;
  return make_cuda_backend(options);
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options) {
  return std::make_unique<cuda::CudaBackend>(options);
}

}  // namespace deepinfer::ops

namespace deepinfer::ops::cuda {
namespace {

const char* fault_text(DeviceFault f) {
  switch (f) {
    case DeviceFault::kTokenId: return "embedding: token id {} outside the table of {} rows";
    case DeviceFault::kGatherRow: return "gather_rows: row {} out of range [0, {})";
    case DeviceFault::kScatterRow: return "scatter_rows: row {} out of range [0, {})";
    case DeviceFault::kAttnIndex: return "sparse_attention: index {} outside the {} KV rows";
    case DeviceFault::kPageTable: return "paged rows: logical row {} maps outside its pool of {} rows";
    case DeviceFault::kExpertId: return "moe: expert id {} outside the {} experts";
    case DeviceFault::kHashTokenId: return "moe_route: token id {} outside tid2eid of {} rows";
    default: return "device fault {} / {}";
  }
}

// Shared ownership of cudaMalloc'd memory: freed on its own device, whichever is current then.
std::shared_ptr<const void> own_device_memory(void* ptr, int device, std::size_t bytes) {
  return std::shared_ptr<const void>(ptr, [device, bytes](const void* p) {
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device);
    cudaFree(const_cast<void*>(p));
    cudaSetDevice(previous);
    note_device_bytes(device, -static_cast<std::int64_t>(bytes));
  });
}

}  // namespace

DevWeightFormat dev_format(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return DevWeightFormat::kF32;
    case WeightFormat::kBF16: return DevWeightFormat::kBF16;
    case WeightFormat::kFp8Block: return DevWeightFormat::kFp8Block;
    case WeightFormat::kFp4: return DevWeightFormat::kFp4;
  }
  return DevWeightFormat::kF32;
}

DevWeight dev_weight(const LinearWeight& w) {
  DevWeight d;
  d.data = w.data.raw_data();
  if (w.quantized()) {
    d.scale = w.scale.raw_data();
    d.scale_ld = w.scale.dim(1);
    d.scale_f32 = w.scale.dtype() == DType::kF32 ? 1 : 0;
  }
  d.block = w.block;
  return d;
}

CudaBackend::CudaBackend(const CudaBackendOptions& options) : device_(options.device), options_(options) {
  DI_CHECK(options.sampler_histogram_fill == 0 || options.sampler_histogram_fill == 1,
           "CudaBackendOptions::sampler_histogram_fill {} must be 0 or 1", options.sampler_histogram_fill);
  // No device, index out of range, an architecture without kernels in this build: deepinfer::Error.
  (void)cuda_device_status(device_);
  cudaDeviceProp prop{};
  DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  sm_count_ = prop.multiProcessorCount;
  arch_ = arch_features(prop.major, prop.minor);
  activate();
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DI_CUBLAS_CHECK(cublasLtCreate(&lt_));
  DI_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&err_), kErrorWords * sizeof(int)));
  DI_CUDA_CHECK(cudaMemsetAsync(err_, 0, kErrorWords * sizeof(int), stream_));
  const std::size_t flag_bytes = 2 * kFp8TileFlags * sizeof(int);
  DI_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&fp8_tile_flags_), flag_bytes));
  DI_CUDA_CHECK(cudaMemsetAsync(fp8_tile_flags_, 0, flag_bytes, stream_));
  cublas_workspace_bytes_ = std::size_t{32} << 20;
  DI_CUDA_CHECK(cudaMalloc(&cublas_workspace_[0], cublas_workspace_bytes_));
  main_stream_ = stream_;
  if (options_.side_lane_max_rows > 0) {  // (allocated here: a first fork may come inside a graph capture)
    DI_CUDA_CHECK(cudaMalloc(&cublas_workspace_[1], cublas_workspace_bytes_));
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming));
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming));
  }
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

CudaBackend::~CudaBackend() {
  // Destructors must not throw: release what exists and ignore failures (the process may be
  // tearing down the context already).
  cudaSetDevice(device_);
  for (cudaStream_t s : {main_stream_, side_stream_})
    if (s != nullptr) cudaStreamSynchronize(s);
  expert_tables_.clear();
  for (ScratchArena& arena : scratch_) arena.owner.reset();  // frees the buffers (graphs must not outlive their backend)
  for (void* w : cublas_workspace_) cudaFree(w);
  cudaFree(err_);
  cudaFree(fp8_tile_flags_);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  for (cudaEvent_t e : {fork_event_, join_event_})
    if (e != nullptr) cudaEventDestroy(e);
  for (cudaStream_t s : {main_stream_, side_stream_})
    if (s != nullptr) cudaStreamDestroy(s);
}

void CudaBackend::activate() const {
  set_dependent_launch(options_.dependent_launch);  // this backend's choice for the launches of this op
  int current = -1;
  DI_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device_) DI_CUDA_CHECK(cudaSetDevice(device_));
}

std::uint8_t* CudaBackend::scratch(std::size_t bytes, const char* op) {
  ScratchArena& arena = scratch_[lane_];
  if (bytes <= arena.bytes) return arena.base;
  DI_CHECK(!capturing(),
           "CUDA backend: {} needs {} bytes of scratch (have {}) during graph capture; run the same step once "
           "before capturing (the warm-up sizes the scratch)",
           op, bytes, arena.bytes);
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier kernels of this lane may still use the old buffer
  const std::size_t grown = std::max(bytes, arena.bytes + arena.bytes / 2);
  arena.owner.reset();  // freed now unless a captured graph still replays it
  arena.base = nullptr;
  arena.bytes = 0;
  const cudaError_t status = cudaMalloc(reinterpret_cast<void**>(&arena.base), grown);
  if (status != cudaSuccess) {
    cudaGetLastError();
    arena.base = nullptr;
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw_error("CUDA backend: cannot allocate {} bytes of scratch on device {} ({} of {} bytes free)", grown, device_,
                free_bytes, total_bytes);
  }
  arena.owner = own_device_memory(arena.base, device_, grown);
  arena.bytes = grown;
  note_device_bytes(device_, static_cast<std::int64_t>(grown));
  return arena.base;
}

// The side lane: ops after the fork wait (on the device) for everything issued before it; the main
// lane waits for the side lane's ops only at the join. Only one fork at a time.
void CudaBackend::fork_side_lane(std::int64_t rows) {
  DI_CHECK(!side_forked_, "fork_side_lane: the side lane is forked already (join it first)");
  if (side_stream_ == nullptr || rows > options_.side_lane_max_rows) return;  // ops stay in order on the main lane
  activate();
  DI_CUDA_CHECK(cudaEventRecord(fork_event_, main_stream_));
  DI_CUDA_CHECK(cudaStreamWaitEvent(side_stream_, fork_event_, 0));
  side_forked_ = true;
  lane_ = 1;
  stream_ = side_stream_;
}

void CudaBackend::return_to_main_lane() {
  if (lane_ == 0) return;
  activate();
  DI_CUDA_CHECK(cudaEventRecord(join_event_, side_stream_));
  lane_ = 0;
  stream_ = main_stream_;
}

void CudaBackend::join_side_lane() {
  if (!side_forked_) return;
  return_to_main_lane();
  side_forked_ = false;
  DI_CUDA_CHECK(cudaStreamWaitEvent(main_stream_, join_event_, 0));
}

void CudaBackend::check_faults() {
  int word[kErrorWords] = {};
  DI_CUDA_CHECK(cudaMemcpy(word, err_, sizeof(word), cudaMemcpyDeviceToHost));
  if (word[0] == 0) return;
  DI_CUDA_CHECK(cudaMemset(err_, 0, sizeof(word)));
  throw Error(fmt::format(fmt::runtime(fault_text(static_cast<DeviceFault>(word[0]))), word[1], word[2]));
}

void CudaBackend::synchronize() {
  activate();
  check_not_capturing("synchronize");
  if (side_stream_ != nullptr) DI_CUDA_CHECK(cudaStreamSynchronize(side_stream_));
  DI_CUDA_CHECK(cudaStreamSynchronize(main_stream_));
  check_faults();
}

// ---- validation helpers ----------------------------------------------------------------------------
void CudaBackend::check_on_device(const Tensor& t, const char* what) const {
  DI_CHECK(t.device() == Device::cuda(device_), "{}: tensor {} is not on cuda:{}", what, t.shape(), device_);
}

DevRows CudaBackend::rows_of(const Tensor& t, std::int64_t width, const char* op) const {
  DI_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16, "{}: expected an f32 or bf16 tensor, got {}", op,
           dtype_name(t.dtype()));
  check_on_device(t, op);
  DI_CHECK(width > 0, "{}: row width {} of tensor {} must be positive", op, width, t.shape());
  DevRows m;
  m.base = const_cast<void*>(t.raw_data());
  m.bf16 = t.dtype() == DType::kBF16 ? 1 : 0;
  m.width = width;
  if (t.ndim() <= 1) {
    DI_CHECK(t.numel() % width == 0, "{}: {} elements are not rows of {}", op, t.numel(), width);
    m.rows = t.numel() / width;
    m.stride = width;
    return m;
  }
  std::int64_t expected = 1;
  for (int i = t.ndim() - 1; i >= 1; --i) {
    DI_CHECK(t.dim(i) == 1 || t.stride(i) == expected, "{}: tensor {} has non-contiguous inner dims", op, t.shape());
    expected *= t.dim(i);
  }
  if (width == expected) {
    m.rows = t.dim(0);
    m.stride = t.dim(0) == 1 ? expected : t.stride(0);
    return m;
  }
  DI_CHECK(expected % width == 0 && (t.dim(0) == 1 || t.stride(0) == expected),
           "{}: tensor {} cannot be viewed as rows of {}", op, t.shape(), width);
  m.rows = t.numel() / width;
  m.stride = width;
  return m;
}

DevRowSource CudaBackend::source_of(const RowView& view, const char* op) const {
  DevRowSource s;
  s.rows = rows_of(view.pool, view.width(), op);
  s.num_rows = view.num_rows;
  if (view.page_table.defined() && view.page_table.numel() > 0) {
    DI_CHECK(view.page_table.dtype() == DType::kI32 && view.page_rows > 0,
             "{}: page table must be i32 with positive page_rows", op);
    check_on_device(view.page_table, op);
    DI_CHECK(view.num_rows <= view.page_table.numel() * view.page_rows,
             "{}: {} logical rows exceed the {} pages of {} rows", op, view.num_rows, view.page_table.numel(),
             view.page_rows);
    s.page_table = view.page_table.data<std::int32_t>();
    s.page_rows = view.page_rows;
  } else {
    DI_CHECK(view.num_rows <= s.rows.rows, "{}: {} logical rows exceed the {} rows of its pool", op, view.num_rows,
             s.rows.rows);
  }
  return s;
}

const std::int32_t* CudaBackend::i32_of(const Tensor& t, std::int64_t count, const char* what) const {
  DI_CHECK(t.dtype() == DType::kI32 && t.is_contiguous() && (count < 0 || t.numel() == count),
           "{}: expected a contiguous i32 tensor of {} elements, got {} {}", what, count, dtype_name(t.dtype()),
           t.shape());
  check_on_device(t, what);
  return t.data<std::int32_t>();
}

const float* CudaBackend::f32_of(const Tensor& t, std::int64_t count, const char* what) const {
  DI_CHECK(t.dtype() == DType::kF32 && t.is_contiguous() && (count < 0 || t.numel() == count),
           "{}: expected contiguous f32 with {} values, got {} {}", what, count, dtype_name(t.dtype()), t.shape());
  check_on_device(t, what);
  return t.data<float>();
}

float* CudaBackend::f32_mut(Tensor& t, std::int64_t count, const char* what) const {
  return const_cast<float*>(f32_of(t, count, what));
}

// ---- memory ---------------------------------------------------------------------------------------
Tensor CudaBackend::empty(const Shape& shape, DType dtype) {
  activate();
  const std::size_t bytes = dtype_bytes(dtype, shape.numel());
  if (bytes == 0) return Tensor::view_of(nullptr, shape, dtype, nullptr, device());
  // A graph would keep replaying into memory freed after the capture: allocate before it.
  DI_CHECK(!capturing(), "CUDA backend: empty() of a {} {} tensor during graph capture; allocate buffers (and warm "
           "up every workspace) before begin_capture", dtype_name(dtype), shape);
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw_error("CUDA backend: cannot allocate {} bytes for a {} {} tensor on device {} ({} of {} bytes free)", bytes,
                dtype_name(dtype), shape, device_, free_bytes, total_bytes);
  }
  const int index = device_;
  note_device_bytes(index, static_cast<std::int64_t>(bytes));
  return Tensor::view_of(ptr, shape, dtype, own_device_memory(ptr, index, bytes), device());
}

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  DI_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(), "copy: {} {} into {} {}", src.shape(),
           dtype_name(src.dtype()), dst.shape(), dtype_name(dst.dtype()));
  for (const Tensor* t : {&src, static_cast<const Tensor*>(&dst)})
    DI_CHECK(t->device().is_cpu() || t->device() == device(), "copy: tensor on a device other than cuda:{}", device_);
  if (src.numel() == 0) return;
  activate();
  const bool host_side = src.device().is_cpu() || dst.device().is_cpu();
  if (host_side)
    check_not_capturing("copy() between host and device memory (a graph cannot read host memory written later: "
                        "stage inputs with ops::StagingBuffer)");
  if (src.is_contiguous() && dst.is_contiguous()) {
    DI_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDefault, stream_));
    if (host_side) synchronize();
    return;
  }
  const std::int64_t rows = src.ndim() == 0 ? 1 : src.dim(0);
  const std::size_t row_bytes = dtype_bytes(src.dtype(), src.numel() / rows);
  auto pitch = [&](const Tensor& t) {
    if (t.is_contiguous() || rows == 1) return row_bytes;
    const std::size_t elem_bits = dtype_bytes(t.dtype(), 2) / 2;
    return static_cast<std::size_t>(t.stride(0)) * std::max<std::size_t>(elem_bits, 1);
  };
  DI_CUDA_CHECK(cudaMemcpy2DAsync(dst.raw_data(), pitch(dst), src.raw_data(), pitch(src), row_bytes,
                                  static_cast<std::size_t>(rows), cudaMemcpyDefault, stream_));
  // Host memory on either side: the caller may read or free it as soon as we return.
  if (host_side) synchronize();
}

Tensor CudaBackend::upload(const Tensor& host) {
  Tensor out = empty(host.shape(), host.dtype());
  if (host.device() == device()) {
    copy(host, out);
    return out;
  }
  const Tensor contiguous = host.is_contiguous() ? host : host.clone();
  copy(contiguous, out);
  return out;
}

void CudaBackend::fill(Tensor& dst, float value) {
  const DevRows m = rows_of(dst, "fill");
  activate();
  launch_fill(m, value, stream_);
  DI_CUDA_CHECK_LAUNCH("fill");
}

void CudaBackend::convert(const Tensor& src, Tensor& dst) {
  DI_CHECK(src.numel() == dst.numel(), "convert: {} into {}", src.shape(), dst.shape());
  const DevRows s = rows_of(src, "convert");
  const DevRows d = rows_of(dst, s.width, "convert");
  activate();
  launch_convert(s, d, stream_);
  DI_CUDA_CHECK_LAUNCH("convert");
}

// ---- rows -------------------------------------------------------------------------------------------
void CudaBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  const std::int64_t t_count = ids.numel();
  const std::int32_t* id = i32_of(ids, t_count, "embedding ids");
  const DevRows tab = rows_of(table, "embedding table");
  const DevRows o = rows_of(out, tab.width, "embedding out");
  DI_CHECK(o.rows % std::max<std::int64_t>(t_count, 1) == 0, "embedding: out {} for {} ids", out.shape(), t_count);
  activate();
  launch_embedding(id, t_count, tab, o, t_count == 0 ? 0 : o.rows / t_count, err_, stream_);
  DI_CUDA_CHECK_LAUNCH("embedding");
}

void CudaBackend::gather_rows(const Tensor& src, const Tensor& rows, Tensor& out) {
  const DevRows s = rows_of(src, src.numel() / std::max<std::int64_t>(src.dim(0), 1), "gather_rows src");
  const DevRows o = rows_of(out, s.width, "gather_rows out");
  const std::int32_t* idx = i32_of(rows, o.rows, "gather_rows rows");
  activate();
  launch_gather_rows(s, idx, o, err_, stream_);
  DI_CUDA_CHECK_LAUNCH("gather_rows");
}

void CudaBackend::scatter_rows(const Tensor& src, const RowView& dst, const Tensor& rows) {
  const DevRowSource d = source_of(dst, "scatter_rows");
  const DevRows s = rows_of(src, d.rows.width, "scatter_rows src");
  const std::int32_t* idx = i32_of(rows, s.rows, "scatter_rows rows");
  activate();
  launch_scatter_rows(s, d, idx, err_, stream_);
  DI_CUDA_CHECK_LAUNCH("scatter_rows");
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  DI_CHECK(a.numel() == b.numel() && a.numel() == out.numel(), "add: {} and {} into {}", a.shape(), b.shape(),
           out.shape());
  const DevRows ra = rows_of(a, "add");
  activate();
  launch_binary(ra, rows_of(b, ra.width, "add"), rows_of(out, ra.width, "add"), BinaryOp::kAdd, 0.0f, stream_);
  DI_CUDA_CHECK_LAUNCH("add");
}

void CudaBackend::scale(const Tensor& a, float s, Tensor& out) {
  DI_CHECK(a.numel() == out.numel(), "scale: {} into {}", a.shape(), out.shape());
  const DevRows ra = rows_of(a, "scale");
  activate();
  launch_binary(ra, ra, rows_of(out, ra.width, "scale"), BinaryOp::kScale, s, stream_);
  DI_CUDA_CHECK_LAUNCH("scale");
}

void CudaBackend::swiglu(const Tensor& gate, const Tensor& up, float limit, Tensor& out) {
  DI_CHECK(gate.numel() == up.numel() && gate.numel() == out.numel(), "swiglu: {} and {} into {}", gate.shape(),
           up.shape(), out.shape());
  const DevRows g = rows_of(gate, "swiglu");
  activate();
  launch_binary(g, rows_of(up, g.width, "swiglu"), rows_of(out, g.width, "swiglu"), BinaryOp::kSwiglu, limit,
                stream_);
  DI_CUDA_CHECK_LAUNCH("swiglu");
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) {
  const DevRows rx = rows_of(x, "rms_norm");
  const DevRows ro = rows_of(out, rx.width, "rms_norm out");
  DI_CHECK(ro.rows == rx.rows, "rms_norm: {} into {}", x.shape(), out.shape());
  DevRows rw;
  if (weight != nullptr) {
    rw = rows_of(*weight, "rms_norm weight");
    DI_CHECK(rw.width == rx.width && rw.rows == 1, "rms_norm: weight {} for rows of {}", weight->shape(), rx.width);
  }
  activate();
  launch_rms_norm(rx, weight != nullptr ? &rw : nullptr, eps, ro, stream_);
  DI_CUDA_CHECK_LAUNCH("rms_norm");
}

void CudaBackend::rope(Tensor& x, const Tensor& positions, const RopeTable& table, bool inverse) {
  const std::int64_t t_count = positions.numel();
  const std::int32_t* pos = i32_of(positions, t_count, "rope positions");
  const int rd = table.rope_dim;
  DI_CHECK(rd > 0 && rd % 2 == 0 && table.inv_freq.numel() == rd / 2 && table.inv_freq.dtype() == DType::kF32,
           "rope: table for rope_dim {} has {} frequencies", rd, table.inv_freq.numel());
  const float* inv_freq = f32_of(table.inv_freq, rd / 2, "rope inv_freq");
  const std::int64_t d = x.dim(-1);
  DI_CHECK(d >= rd && x.numel() % std::max<std::int64_t>(t_count * d, 1) == 0,
           "rope: x {} does not hold {} positions of rows of {}", x.shape(), t_count, d);
  const DevRows m = rows_of(x, d, "rope");
  if (t_count == 0 || m.rows == 0) return;
  activate();
  launch_rope(m, m.rows / t_count, pos, inv_freq, rd, inverse, stream_);
  DI_CUDA_CHECK_LAUNCH("rope");
}

// One kernel when the row fits rms_norm's registers (the query heads and the K=V row: 512 wide);
// otherwise the two ops.
void CudaBackend::rms_norm_rope(Tensor& x, const Tensor* weight, float eps, const Tensor& positions,
                                const RopeTable& table) {
  const std::int64_t t_count = positions.numel();
  const int rd = table.rope_dim;
  const std::int64_t d = x.dim(-1);
  if (!rms_norm_rope_fits(d, rd) || t_count == 0) {
    Backend::rms_norm_rope(x, weight, eps, positions, table);
    return;
  }
  const std::int32_t* pos = i32_of(positions, t_count, "rms_norm_rope positions");
  DI_CHECK(rd > 0 && table.inv_freq.numel() == rd / 2 && table.inv_freq.dtype() == DType::kF32,
           "rms_norm_rope: table for rope_dim {} has {} frequencies", rd, table.inv_freq.numel());
  const float* inv_freq = f32_of(table.inv_freq, rd / 2, "rms_norm_rope inv_freq");
  DI_CHECK(x.numel() % (t_count * d) == 0, "rms_norm_rope: x {} does not hold {} positions of rows of {}", x.shape(),
           t_count, d);
  const DevRows m = rows_of(x, d, "rms_norm_rope");
  DevRows rw;
  if (weight != nullptr) {
    rw = rows_of(*weight, "rms_norm_rope weight");
    DI_CHECK(rw.width == d && rw.rows == 1, "rms_norm_rope: weight {} for rows of {}", weight->shape(), d);
  }
  if (m.rows == 0) return;
  activate();
  launch_rms_norm_rope(m, weight != nullptr ? &rw : nullptr, eps, RopeRows{pos, inv_freq, m.rows / t_count, rd},
                       stream_);
  DI_CUDA_CHECK_LAUNCH("rms_norm_rope");
}

void CudaBackend::hadamard(Tensor& x) {
  const DevRows m = rows_of(x, "hadamard");
  DI_CHECK(std::has_single_bit(static_cast<std::uint64_t>(m.width)) && m.width <= 32768,
           "hadamard: row length {} is not a power of two <= 32768", m.width);
  activate();
  launch_hadamard(m, stream_);
  DI_CUDA_CHECK_LAUNCH("hadamard");
}

void CudaBackend::fake_quant_fp8(Tensor& x, std::int64_t col_begin, std::int64_t col_end, int block) {
  const DevRows m = rows_of(x, "fake_quant_fp8");
  DI_CHECK(0 <= col_begin && col_begin <= col_end && col_end <= m.width && block > 0,
           "fake_quant_fp8: columns [{}, {}) / block {} invalid for width {}", col_begin, col_end, block, m.width);
  if (col_begin == col_end) return;
  activate();
  launch_fake_quant(m, col_begin, col_end, block, 0, stream_);
  DI_CUDA_CHECK_LAUNCH("fake_quant_fp8");
}

void CudaBackend::fake_quant_fp4(Tensor& x, int block, Fp4ScaleKind scale_kind) {
  const DevRows m = rows_of(x, "fake_quant_fp4");
  DI_CHECK(block > 0, "fake_quant_fp4: block {} must be positive", block);
  activate();
  launch_fake_quant(m, 0, m.width, block, scale_kind == Fp4ScaleKind::kUE8M0 ? 1 : 2, stream_);
  DI_CUDA_CHECK_LAUNCH("fake_quant_fp4");
}

void CudaBackend::argmax(const Tensor& logits, Tensor& out) {
  const DevRows m = rows_of(logits, "argmax");
  DI_CHECK(out.dtype() == DType::kI32 && out.numel() == m.rows && out.is_contiguous(), "argmax: out {} for {} rows",
           out.shape(), m.rows);
  check_on_device(out, "argmax out");
  activate();
  launch_argmax(m, out.data<std::int32_t>(), stream_);
  DI_CUDA_CHECK_LAUNCH("argmax");
}

void CudaBackend::apply_token_mask(Tensor& logits, const Tensor& mask) {
  DI_CHECK(logits.dtype() == DType::kF32 && logits.ndim() == 2, "apply_token_mask: logits {} must be f32 [T, V]",
           logits.shape());
  const DevRows m = rows_of(logits, "apply_token_mask");
  const std::int64_t words = (m.width + 31) / 32;
  DI_CHECK(mask.dtype() == DType::kI32 && mask.shape() == Shape({m.rows, words}) && mask.is_contiguous(),
           "apply_token_mask: mask {} for logits {} must be i32 [T, ceil(V / 32)]", mask.shape(), logits.shape());
  check_on_device(mask, "apply_token_mask mask");
  activate();
  launch_token_mask(m, static_cast<const std::uint32_t*>(mask.raw_data()), stream_);
  DI_CUDA_CHECK_LAUNCH("apply_token_mask");
}

}  // namespace deepinfer::ops::cuda
