// The MoE sub-layer of V4 (MODEL_SPEC A4.6) and V4.1 (B4.5): f32 router with bias-corrected top-k
// or hash routing, routed SwiGLU experts weighted before their down projection, plus the shared expert.
#include "common/error.h"
#include "model/deepseek_v4/forward_context.h"

namespace deepinfer::model::v4 {
namespace {

ops::ScoreFunc score_func(const std::string& name) {
  if (name == "sqrtsoftplus") return ops::ScoreFunc::kSqrtSoftplus;
  if (name == "sigmoid") return ops::ScoreFunc::kSigmoid;
  if (name == "softmax") return ops::ScoreFunc::kSoftmax;
  throw_error("config scoring_func '{}' is not supported (sqrtsoftplus, sigmoid or softmax)", name);
}

}  // namespace

void moe_forward(ForwardContext& cx, const io::LayerSpec& spec, const MoeWeights& w, const Step& step, const Tensor& v,
                 Tensor& out) {
  const io::ModelConfig& c = cx.config;
  ops::Backend& be = cx.backend;
  const std::int64_t t = step.tokens, k = c.num_experts_per_tok, dim = c.hidden_size;

  // The shared expert needs only v: on the backend's side lane it runs beside the routing and the
  // routed experts, whose decode GEMMs leave most of the GPU's issue slots idle at small batches.
  ops::SideLane side(be, t);
  const ops::ExpertWeights& sh = w.shared;
  Tensor gate = cx.act(Shape{t, sh.w1.out_features()});
  Tensor up = cx.act(Shape{t, sh.w3.out_features()});
  be.linear(v, sh.w1, cx.linear_options(sh.w1), gate);
  be.linear(v, sh.w3, cx.linear_options(sh.w3), up);
  be.swiglu(gate, up, static_cast<float>(c.swiglu_limit), gate);  // the shared expert clamps too (MODEL_SPEC P9)
  Tensor shared = cx.act(Shape{t, dim});
  be.linear(gate, sh.w2, cx.linear_options(sh.w2), shared);
  side.return_to_main();

  Tensor logits = cx.alloc(Shape{t, c.n_routed_experts}, DType::kF32);
  be.linear(v, w.gate, {}, logits);  // the reference routes in f32 on unquantised inputs
  if (c.gate_temp != 1.0) be.scale(logits, static_cast<float>(1.0 / c.gate_temp), logits);
  Tensor ids = cx.alloc(Shape{t, k}, DType::kI32);
  Tensor weights = cx.alloc(Shape{t, k}, DType::kF32);
  ops::RouteOptions route;
  route.top_k = static_cast<int>(k);
  route.route_scale = static_cast<float>(c.routed_scaling_factor);
  route.score_func = score_func(c.scoring_func);
  route.normalize = c.norm_topk_prob && route.score_func != ops::ScoreFunc::kSoftmax;
  route.normalize_eps = c.arch == io::ModelArch::kDeepseekV41 ? 1e-20f : 0.0f;  // V4 sums without eps (P11)
  const bool hashed = spec.hash_routed;
  be.moe_route(logits, hashed ? nullptr : &w.bias, hashed ? &w.tid2eid : nullptr, hashed ? &step.ids : nullptr, route,
               ids, weights);

  Tensor routed = cx.alloc(Shape{t, dim}, DType::kF32);
  ops::MoeOptions moe;
  moe.swiglu_limit = static_cast<float>(c.swiglu_limit);
  moe.act_quant_block = cx.linear_options(w.experts.front().w1).act_quant_block;
  moe.intermediate_dtype = cx.numerics.act;
  be.moe_experts(v, ids, weights, w.experts, moe, routed);
  side.join();
  be.add(routed, shared, out);
}

}  // namespace deepinfer::model::v4
