// CudaBackendOptions fields set by name ("cublas_min_rows=8"): benches A/B a kernel choice on one build
// (v4_model_bench --cuda-option) without a flag per field. Plain C++, built with or without CUDA.
#include <array>
#include <charconv>
#include <string>
#include <variant>

#include "common/error.h"
#include "ops/cuda/cuda_backend.h"

namespace deepinfer::ops {
namespace {

using Field = std::variant<int CudaBackendOptions::*, bool CudaBackendOptions::*>;

struct NamedField {
  const char* name;
  Field field;
};

// Every field but `device` (the bench's own flag).
constexpr std::array kFields = {
    NamedField{"batch_invariant", &CudaBackendOptions::batch_invariant},
    NamedField{"cublas_min_rows", &CudaBackendOptions::cublas_min_rows},
    NamedField{"cublas_large_min_rows", &CudaBackendOptions::cublas_large_min_rows},
    NamedField{"skinny_max_rows", &CudaBackendOptions::skinny_max_rows},
    NamedField{"fp8_cublas", &CudaBackendOptions::fp8_cublas},
    NamedField{"moe_fp4_wide", &CudaBackendOptions::moe_fp4_wide},
    NamedField{"moe_fp4_wide_passes", &CudaBackendOptions::moe_fp4_wide_passes},
    NamedField{"bf16_skinny_max_rows", &CudaBackendOptions::bf16_skinny_max_rows},
    NamedField{"bf16_skinny_linear", &CudaBackendOptions::bf16_skinny_linear},
    NamedField{"bf16_skinny_unroll", &CudaBackendOptions::bf16_skinny_unroll},
    NamedField{"grouped_fp8_weights", &CudaBackendOptions::grouped_fp8_weights},
    NamedField{"grouped_fp8_wgmma", &CudaBackendOptions::grouped_fp8_wgmma},
    NamedField{"grouped_fp8_wgmma_wide", &CudaBackendOptions::grouped_fp8_wgmma_wide},
    NamedField{"fp8_fused_max_rows", &CudaBackendOptions::fp8_fused_max_rows},
    NamedField{"fp8_decode_unroll", &CudaBackendOptions::fp8_decode_unroll},
    NamedField{"fp8_wgmma_decode", &CudaBackendOptions::fp8_wgmma_decode},
    NamedField{"fp8_wgmma_fixup_max_rows", &CudaBackendOptions::fp8_wgmma_fixup_max_rows},
    NamedField{"fp8_wgmma_fixup_max_splits", &CudaBackendOptions::fp8_wgmma_fixup_max_splits},
    NamedField{"fp8_wgmma_fused_quant_max_rows", &CudaBackendOptions::fp8_wgmma_fused_quant_max_rows},
    NamedField{"dependent_launch", &CudaBackendOptions::dependent_launch},
    NamedField{"moe_fp4_wgmma", &CudaBackendOptions::moe_fp4_wgmma},
    NamedField{"moe_fp4_wgmma_act32", &CudaBackendOptions::moe_fp4_wgmma_act32},
    NamedField{"moe_fp4_wgmma_stages", &CudaBackendOptions::moe_fp4_wgmma_stages},
    NamedField{"moe_fp4_wgmma_permuted", &CudaBackendOptions::moe_fp4_wgmma_permuted},
    NamedField{"moe_fp4_wgmma_early", &CudaBackendOptions::moe_fp4_wgmma_early},
    NamedField{"moe_fp4_wgmma_early_w2", &CudaBackendOptions::moe_fp4_wgmma_early_w2},
    NamedField{"moe_sort_small", &CudaBackendOptions::moe_sort_small},
    NamedField{"moe_fp4_wgmma_ksplit", &CudaBackendOptions::moe_fp4_wgmma_ksplit},
    NamedField{"moe_fp4_wgmma_split_ctas", &CudaBackendOptions::moe_fp4_wgmma_split_ctas},
    NamedField{"moe_prefill_min_rows", &CudaBackendOptions::moe_prefill_min_rows},
    NamedField{"moe_prefill_wgmma", &CudaBackendOptions::moe_prefill_wgmma},
    NamedField{"moe_prefill_fp8", &CudaBackendOptions::moe_prefill_fp8},
    NamedField{"moe_prefill_fp8_permuted", &CudaBackendOptions::moe_prefill_fp8_permuted},
    NamedField{"indexer_mma_min_tokens", &CudaBackendOptions::indexer_mma_min_tokens},
    NamedField{"sampler_histogram_fill", &CudaBackendOptions::sampler_histogram_fill},
    NamedField{"side_lane_max_rows", &CudaBackendOptions::side_lane_max_rows},
};

std::string field_names() {
  std::string names;
  for (const NamedField& f : kFields) names += std::string(names.empty() ? "" : ", ") + f.name;
  return names;
}

int parse_int(std::string_view name, std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  DI_CHECK(ec == std::errc() && end == text.data() + text.size(), "CUDA option {}: '{}' is not an integer", name,
           text);
  return value;
}

bool parse_bool(std::string_view name, std::string_view text) {
  if (text == "1" || text == "true") return true;
  if (text == "0" || text == "false") return false;
  throw_error("CUDA option {}: '{}' is not a boolean (0, 1, true or false)", name, text);
}

}  // namespace

void set_cuda_option(CudaBackendOptions& options, std::string_view assignment) {
  const std::size_t eq = assignment.find('=');
  DI_CHECK(eq != std::string_view::npos && eq > 0, "CUDA option '{}' is not name=value", assignment);
  const std::string_view name = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  for (const NamedField& f : kFields) {
    if (name != f.name) continue;
    if (const auto* i = std::get_if<int CudaBackendOptions::*>(&f.field)) {
      options.*(*i) = parse_int(name, text);
    } else {
      options.*(std::get<bool CudaBackendOptions::*>(f.field)) = parse_bool(name, text);
    }
    return;
  }
  throw_error("unknown CUDA option '{}' (known: {})", name, field_names());
}

}  // namespace deepinfer::ops
