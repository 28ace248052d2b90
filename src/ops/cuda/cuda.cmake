# Sources of the CUDA backend, included by src/ops/CMakeLists.txt (paths relative to src/ops).
# CUDA builds compile the kernels and host code; other builds get the "built without CUDA"
# factory instead, so make_cuda_backend() links everywhere.
set(ops_cuda_sources
  cuda/backend_core.cpp cuda/backend_linear.cpp cuda/backend_attention.cpp cuda/backend_mhc.cpp cuda/backend_moe.cpp
  cuda/backend_sampling.cpp cuda/sampling_kernels.cu
  cuda/backend_graph.cpp
  cuda/cuda_timing.cpp cuda/device_info.cpp cuda/device_arch_probe.cu cuda/device_loading.cpp cuda/dependent_launch.cpp
  cuda/rows_kernels.cu cuda/gemm_kernels.cu cuda/act_quant_kernels.cu cuda/attention_kernels.cu cuda/mhc_compressor_kernels.cu
  cuda/sparse_attention_mma.cu
  cuda/moe_kernels.cu cuda/random_fill_kernels.cu cuda/fp8_skinny_kernels.cu
  cuda/moe_fp4_kernels.cu cuda/skinny_bf16_kernels.cu cuda/fp8_decode_kernels.cu cuda/moe_prefill_kernels.cu cuda/indexer_mma_kernels.cu cuda/mhc_prefill_kernels.cu cuda/moe_prefill_wgmma.cu
  cuda/fp8_wgmma_decode.cu
  cuda/moe_fp4_wgmma.cu cuda/moe_fp4_wgmma_smem.cu
  cuda/moe_prefill_fp8_wgmma.cu
  cuda/grouped_fp8_wgmma.cu)
if(DEEPINFER_HAVE_CUDA)
  set(ops_cuda_fallback_sources "")
else()
  set(ops_cuda_fallback_sources cuda/cuda_unavailable.cpp)
endif()

# Links cuBLASLt and sets the kernels' compile flags on the ops library (CUDA builds only).
function(deepinfer_ops_cuda_setup target)
  if(NOT DEEPINFER_HAVE_CUDA)
    return()
  endif()
  target_link_libraries(${target} PUBLIC CUDA::cublasLt)
  # The kernels need C++17 only; CMake 3.25 (CI) knows no C++20 dialect flag for nvcc 13.
  set_target_properties(${target} PROPERTIES CUDA_STANDARD 17)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
endfunction()
