// How fast a decode GEMM's weight-streaming pattern can read HBM, apart from any arithmetic: each CTA
// streams its share of a 32 MiB FP8 weight matrix ([8192 rows, 4096 bytes], wo_a's and wq_b's size) into
// a cp.async shared-memory ring, the way the decode kernels do, and touches one word a stage. Patterns:
// row tiles (R rows x W bytes a stage: the kernels' layout, W = 128 today) against one contiguous chunk
// a stage (the same bytes in a pre-tiled weight layout), by ring depth and CTAs. Six copies of the
// matrix rotate so every pass reads HBM, not the 50 MB L2. Then chains of such kernels, each reading
// another copy, launched plainly or as programmatic dependents (the first ring stages issued before or
// after griddepcontrol.wait): how much of a kernel's ramp and drain a chain can hide.
// usage (GPU machine): hbm_pattern_bench [--reps 40]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr std::int64_t kRowBytes = 4096;
constexpr std::int64_t kRows = 8192;
constexpr std::int64_t kBytes = kRowBytes * kRows;  // 32 MiB
constexpr int kCopies = 6;
constexpr int kThreads = 256;

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    const cudaError_t e_ = (call);                                                                    \
    if (e_ != cudaSuccess) {                                                                          \
      std::fprintf(stderr, "hbm_pattern_bench: %s: %s\n", #call, cudaGetErrorString(e_));            \
      std::exit(1);                                                                                   \
    }                                                                                                 \
  } while (0)

__device__ __forceinline__ void copy16(std::uint32_t dst, const void* src, bool hint) {
  if (hint) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
  }
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// A CTA owns `rows` rows of the matrix (all 4096 bytes of each) when tiled, else the same number of
// bytes as one contiguous chunk. Stage s holds rows x W bytes: columns [s W, s W + W) of its rows
// (tiled) or bytes [s rows W, (s + 1) rows W) of its chunk (contiguous).
// early: 1 = the prologue's stages issued before griddepcontrol.wait (a chained GEMM's immutable
// weights), 0 = after it; the successor may launch once every CTA has waited.
template <int S, int W>
__global__ void __launch_bounds__(kThreads) stream_kernel(const std::uint8_t* w, int rows, int contiguous, int hint,
                                                          unsigned* sink, int early) {
  extern __shared__ __align__(128) std::uint8_t smem[];
  const int tid = static_cast<int>(threadIdx.x);
  const int stage_bytes = rows * W;
  const int stages = static_cast<int>(kRowBytes / W);
  const std::uint8_t* base = w + static_cast<std::int64_t>(blockIdx.x) * rows * kRowBytes;
  const auto smem_base = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  const auto issue = [&](int s) {
    const std::uint32_t slot = smem_base + static_cast<std::uint32_t>((s % S) * stage_bytes);
    for (int i = tid; i < stage_bytes / 16; i += kThreads) {
      const int r = i / (W / 16), c = (i % (W / 16)) * 16;
      const std::uint8_t* src = contiguous ? base + static_cast<std::int64_t>(s) * stage_bytes + 16 * i
                                           : base + static_cast<std::int64_t>(r) * kRowBytes + s * W + c;
      copy16(slot + 16 * i, src, hint != 0);
    }
    commit();
  };
  if (!early) asm volatile("griddepcontrol.wait;\n" ::: "memory");
  for (int s = 0; s < S - 1; ++s) issue(s);
  if (early) asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  unsigned acc = 0;
  for (int s = 0; s < stages; ++s) {
    if (s + S - 1 < stages) {
      issue(s + S - 1);
    } else {
      commit();  // an empty group keeps the count of groups in flight fixed
    }
    wait_group<S - 1>();
    __syncthreads();
    acc += reinterpret_cast<const unsigned*>(smem + (s % S) * stage_bytes)[tid % (stage_bytes / 4)];
    __syncthreads();
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // never true for the zero-filled matrix: keeps the loads
}

struct Case {
  const char* name;
  int rows;  // per CTA
  int contiguous;
  int hint;
  int stages;
  int width;
};

// chained: 0 = a plain launch, 1 = programmatic dependent (prologue after the wait), 2 = programmatic
// dependent with the prologue before the wait.
template <int S, int W>
void launch(const Case& c, const std::uint8_t* w, unsigned* sink, int chained) {
  const int smem = S * c.rows * W;
  static bool set = false;
  if (!set) {
    CHECK(cudaFuncSetAttribute(stream_kernel<S, W>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    set = true;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(kRows / c.rows));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<std::size_t>(smem);
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = chained > 0 ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&config, stream_kernel<S, W>, w, c.rows, c.contiguous, c.hint, sink, chained == 2 ? 1 : 0));
}

void run(const Case& c, const std::uint8_t* w, unsigned* sink, int chained = 0) {
#define DISPATCH(S, W) \
  if (c.stages == S && c.width == W) return launch<S, W>(c, w, sink, chained);
  DISPATCH(4, 128) DISPATCH(6, 128) DISPATCH(8, 128) DISPATCH(12, 128) DISPATCH(4, 256) DISPATCH(6, 256)
  DISPATCH(8, 256) DISPATCH(4, 512) DISPATCH(6, 512)
#undef DISPATCH
  std::fprintf(stderr, "hbm_pattern_bench: no kernel for %d stages of %d bytes\n", c.stages, c.width);
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 40;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("hbm_pattern_bench: no GPU\n");
    return 0;
  }
  std::uint8_t* w = nullptr;
  unsigned* sink = nullptr;
  CHECK(cudaMalloc(&w, kBytes * kCopies));
  CHECK(cudaMemset(w, 0, kBytes * kCopies));
  CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  const std::vector<Case> cases = {
      {"rows 64 x 128 B (wo_a today)", 64, 0, 1, 6, 128},  {"rows 64 x 128 B, no L2 hint", 64, 0, 0, 6, 128},
      {"rows 64 x 128 B, 4 stages", 64, 0, 1, 4, 128},     {"rows 64 x 128 B, 8 stages", 64, 0, 1, 8, 128},
      {"rows 64 x 128 B, 12 stages", 64, 0, 1, 12, 128},   {"rows 64 x 256 B, 4 stages", 64, 0, 1, 4, 256},
      {"rows 64 x 256 B, 6 stages", 64, 0, 1, 6, 256},     {"rows 64 x 512 B, 4 stages", 64, 0, 1, 4, 512},
      {"rows 32 x 128 B (256 CTAs)", 32, 0, 1, 6, 128},    {"rows 32 x 256 B (256 CTAs)", 32, 0, 1, 6, 256},
      {"rows 16 x 512 B (512 CTAs)", 16, 0, 1, 6, 512},    {"contiguous 8 KB stages", 64, 1, 1, 6, 128},
      {"contiguous 8 KB, 8 stages", 64, 1, 1, 8, 128},     {"contiguous 16 KB stages", 64, 1, 1, 6, 256},
      {"contiguous 4 KB (256 CTAs)", 32, 1, 1, 6, 128},    {"contiguous 8 KB (256 CTAs)", 32, 1, 1, 6, 256},
  };
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::printf("# HBM read of a 32 MiB FP8 matrix [8192 x 4096 B] by decode-GEMM streaming patterns (%d passes, %d "
              "rotating copies)\n\n| pattern | CTAs | ring KB / CTA | us / pass | TB/s |\n| --- | ---: | ---: | ---: | ---: |\n",
              reps, kCopies);
  for (const Case& c : cases) {
    for (int i = 0; i < kCopies; ++i) run(c, w + kBytes * i, sink);  // warm-up
    CHECK(cudaEventRecord(a));
    for (int i = 0; i < reps; ++i) run(c, w + kBytes * (i % kCopies), sink);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaGetLastError());
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    const double us = 1e3 * ms / reps;
    std::printf("| %s | %lld | %d | %.2f | %.2f |\n", c.name, static_cast<long long>(kRows / c.rows),
                c.stages * c.rows * c.width / 1024, us, kBytes / (us * 1e-6) / 1e12);
  }

  // Chains of kernels, each reading the next copy (like a decode step's consecutive GEMMs).
  const std::vector<Case> chain_cases = {
      {"rows 64 x 128 B, 6 stages (48 KB: 4 CTAs fit an SM)", 64, 0, 1, 6, 128},
      {"rows 64 x 256 B, 6 stages (96 KB: 2 fit)", 64, 0, 1, 6, 256},
      {"rows 64 x 512 B, 6 stages (192 KB: 1 fits)", 64, 0, 1, 6, 512},
  };
  std::printf("\n| chain of %d kernels, pattern | plain us / kernel | dependent, stream after wait | dependent, "
              "stream before wait | TB/s (best) |\n| --- | ---: | ---: | ---: | ---: |\n", kCopies);
  for (const Case& c : chain_cases) {
    double us[3] = {0, 0, 0};
    for (int mode = 0; mode < 3; ++mode) {
      for (int i = 0; i < kCopies; ++i) run(c, w + kBytes * i, sink, mode);
      CHECK(cudaEventRecord(a));
      for (int i = 0; i < reps; ++i) run(c, w + kBytes * (i % kCopies), sink, mode);
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      CHECK(cudaGetLastError());
      float ms = 0.0f;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      us[mode] = 1e3 * ms / reps;
    }
    const double best = std::min({us[0], us[1], us[2]});
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f |\n", c.name, us[0], us[1], us[2], kBytes / (best * 1e-6) / 1e12);
  }
  CHECK(cudaFree(w));
  CHECK(cudaFree(sink));
  return 0;
}
