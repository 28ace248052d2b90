#!/usr/bin/env python3
"""Builds tiny random DeepSeek checkpoints and records HF transformers reference outputs (logits, greedy continuations,
cache cross-checks) under tests/golden/<arch>/<case>/ for the C++ golden tests: `--arch v4` (default,
DeepseekV4ForCausalLM, this file) or `--arch v41` (DeepseekV41ForCausalLM, tools/golden_v41.py; needs a transformers
with deepseek_v41). The shared machinery is tools/golden_common.py; see tests/golden/README.md for how fixtures are made."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hf_v4

import golden_common as gc
from golden_common import bf16 as _bf16, normal as _normal

YARN = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1}

# Shared geometry of the tiny models; each case overrides what it is about.
BASE = dict(
    vocab_size=512,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=64,
    partial_rotary_factor=0.25,  # rope dims = 16 (production 64 of 512)
    q_lora_rank=32,
    o_groups=2,
    o_lora_rank=32,
    moe_intermediate_size=32,
    n_routed_experts=8,
    num_experts_per_tok=2,
    n_shared_experts=1,
    scoring_func="sqrtsoftplus",
    norm_topk_prob=True,
    routed_scaling_factor=1.5,
    swiglu_limit=10.0,
    hc_mult=4,
    hc_sinkhorn_iters=20,
    hc_eps=1e-6,
    rms_norm_eps=1e-6,
    index_n_heads=8,
    index_head_dim=32,
    index_topk=4,
    sliding_window=16,
    rope_theta=10000.0,
    compress_rope_theta=160000.0,
    max_position_embeddings=1048576,
    bos_token_id=0,
    eos_token_id=1,
    tie_word_embeddings=False,
)

SWA, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"

CASES = [
    dict(
        name="swa_hash",
        description="two sliding-window-only layers (window 8), first MoE layer hash-routed, o_groups 1, "
        "swiglu_limit 1.0 so the clamps bite; prompt 48 > window",
        covers=["sliding_attention", "hash_moe", "o_groups=1", "swiglu clamp active", "attention sinks", "mHC"],
        seed=101,
        prompt_seed=101000,  # all top-k / argmax decisions have margins >= 1e-4
        prompt_len=48,
        config=dict(
            layer_types=[SWA, SWA],
            mlp_layer_types=["hash_moe", "moe"],
            sliding_window=8,
            o_groups=1,
            o_lora_rank=48,
            n_routed_experts=4,
            swiglu_limit=1.0,
            rope_parameters=dict(YARN),
        ),
    ),
    dict(
        name="csa_hca_mix",
        description="SWA, CSA(4), HCA(8), CSA(4); window 16; two hash layers; index_topk 4 < visible CSA entries; "
        "prompt 100 (25 CSA groups, 12 HCA groups); YaRN on compressed layers",
        covers=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention", "lightning indexer "
                "top-k selection", "CSA overlap", "hash_moe x2", "o_groups=2", "YaRN"],
        seed=202,
        prompt_seed=202000,  # all top-k / argmax decisions have margins >= 1e-4
        prompt_len=100,
        dump_hidden=True,
        config=dict(
            layer_types=[SWA, CSA, HCA, CSA],
            mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe"],
            compress_rates={CSA: 4, HCA: 8},
            sliding_window=16,
            index_topk=4,
            swiglu_limit=2.0,
            rope_parameters=dict(YARN),
        ),
    ),
    dict(
        name="hca_pro_like",
        description="HCA(16), HCA(16), SWA (V4-Pro-like HCA-first schedule); window 8; no hash layers; 8 heads of "
        "head_dim 32 with 8 rope dims; o_groups 4; top-3 of 8 experts; hc_sinkhorn_iters 3; compressed layers use "
        "plain RoPE (no YaRN)",
        covers=["heavily_compressed_attention", "no hash layers", "o_groups=4", "compress rope without YaRN",
                "head_dim 32", "hc_sinkhorn_iters=3"],
        seed=303,
        prompt_seed=303000,  # all top-k / argmax decisions have margins >= 1e-4
        prompt_len=90,
        config=dict(
            layer_types=[HCA, HCA, SWA],
            mlp_layer_types=["moe", "moe", "moe"],
            compress_rates={CSA: 4, HCA: 16},
            sliding_window=8,
            num_attention_heads=8,
            head_dim=32,
            o_groups=4,
            o_lora_rank=16,
            num_experts_per_tok=3,
            index_topk=4,
            hc_sinkhorn_iters=3,
        ),
    ),
    dict(
        name="csa_topk2",
        description="two CSA(4) layers, index_topk 2 (strong selection), window 8, o_groups 4, one hash layer; "
        "prompt 64 (16 CSA groups)",
        covers=["compressed_sparse_attention", "index_topk=2", "o_groups=4", "hash_moe", "YaRN"],
        seed=404,
        prompt_seed=404000,  # all top-k / argmax decisions have margins >= 1e-4
        prompt_len=64,
        config=dict(
            layer_types=[CSA, CSA],
            mlp_layer_types=["hash_moe", "moe"],
            compress_rates={CSA: 4, HCA: 128},
            sliding_window=8,
            index_topk=2,
            o_groups=4,
            o_lora_rank=16,
            rope_parameters=dict(YARN),
        ),
    ),
    dict(
        name="flash_ratios",
        description="production compression rates: SWA, CSA(4), HCA(128); window 32; index_topk 8; one hash layer; "
        "prompt 160 (40 CSA groups, one HCA group); also saved in DeepSeek's own layout with a legacy config",
        covers=["compress_ratios 4/128", "HCA rate 128", "DeepSeek layout + legacy config", "YaRN"],
        seed=505,
        prompt_seed=505003,  # all top-k / argmax decisions have margins >= 1e-4
        prompt_len=160,
        deepseek_layout=True,
        config=dict(
            layer_types=[SWA, CSA, HCA],
            mlp_layer_types=["hash_moe", "moe", "moe"],
            compress_rates={CSA: 4, HCA: 128},
            sliding_window=32,
            index_topk=8,
            rope_parameters=dict(YARN),
        ),
    ),
]

# Parameters HF keeps in fp32 when it loads a bf16 checkpoint whose values are *not* rounded to bf16 here, because
# DeepSeek ships them as F32 (mHC, sinks, ape, router bias). Norm weights are kept in fp32 by HF as well but ship as
# BF16 in DeepSeek's checkpoints, so their values are made bf16-representable (then both layouts hold equal values).
FULL_FP32_SUFFIXES = ("attn_hc.fn", "attn_hc.base", "attn_hc.scale", "ffn_hc.fn", "ffn_hc.base", "ffn_hc.scale",
                      "hc_head.hc_fn", "hc_head.hc_base", "hc_head.hc_scale", "sinks", "position_bias",
                      "e_score_correction_bias")


def build_config(case: dict) -> DeepseekV4Config:
    kw = dict(BASE)
    kw.update(case["config"])
    kw["num_hidden_layers"] = len(kw["layer_types"])
    return DeepseekV4Config(**kw)


def init_weights(model: DeepseekV4ForCausalLM, seed: int) -> None:
    """Deterministic, device-independent weights: std 1/sqrt(fan_in) for projections so activations stay O(1),
    a larger head so logits are not flat, and non-trivial mHC / sink / ape / bias values."""
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    hidden = cfg.hidden_size
    values: dict[str, torch.Tensor] = {}
    for name, p in sorted(model.named_parameters()):
        shape = tuple(p.shape)
        if name.endswith("embed_tokens.weight"):
            v = _normal(gen, shape, 1.0)
        elif name == "lm_head.weight":
            v = _normal(gen, shape, 2.5 / hidden ** 0.5)
        elif name.endswith(("attn_hc.fn", "ffn_hc.fn", "hc_head.hc_fn")):
            v = _normal(gen, shape, 1.0 / shape[-1] ** 0.5)
        elif name.endswith(("attn_hc.base", "ffn_hc.base")):
            # pre/post biases moderate; comb biases (last hc_mult^2) large so that Sinkhorn has not converged after
            # hc_sinkhorn_iters and the iteration count and order stay visible in the logits.
            v = _normal(gen, shape, 0.5)
            v[2 * cfg.hc_mult:] *= 3.0
        elif name.endswith(("attn_hc.scale", "ffn_hc.scale")):
            v = 0.5 + torch.rand(*shape, generator=gen)
            v[2] = 2.0 + 2.0 * torch.rand((), generator=gen)
        elif name.endswith("hc_head.hc_base"):
            v = _normal(gen, shape, 0.5)
        elif name.endswith("hc_head.hc_scale"):
            v = 0.5 + torch.rand(*shape, generator=gen)
        elif name.endswith("sinks"):
            v = _normal(gen, shape, 1.0)
        elif name.endswith("position_bias"):
            v = _normal(gen, shape, 0.5)
        elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            v = 1.0 + _normal(gen, shape, 0.1)
        elif name.endswith("experts.gate_up_proj"):
            v = _normal(gen, shape, 1.0 / shape[-1] ** 0.5)
        elif name.endswith("experts.down_proj"):
            v = _normal(gen, shape, 1.0 / shape[-1] ** 0.5)
        elif p.dim() == 2:  # every nn.Linear weight [out, in] (incl. routers and the grouped o_a_proj)
            v = _normal(gen, shape, 1.0 / shape[-1] ** 0.5)
        else:
            raise RuntimeError(f"make_golden: no init rule for parameter {name} {shape}")
        values[name] = v if name.endswith(FULL_FP32_SUFFIXES) else _bf16(v)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(values[name])
        for name, b in sorted(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                b.copy_(_normal(gen, tuple(b.shape), 0.05))
            elif name.endswith("tid2eid"):
                vocab, k = b.shape
                rows = [torch.randperm(cfg.n_routed_experts, generator=gen)[:k] for _ in range(vocab)]
                b.copy_(torch.stack(rows).to(torch.long))


def save_checkpoint(case: dict, out_dir: Path) -> None:
    """Saves the way a bf16 HF model is saved: build in fp32, write, reload as bf16 (HF keeps its fp32 modules in
    fp32) and write again with save_pretrained."""
    config = build_config(case)
    model = DeepseekV4ForCausalLM(config).eval()
    init_weights(model, case["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        bf16_model = DeepseekV4ForCausalLM.from_pretrained(tmp, dtype=torch.bfloat16)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        bf16_model.save_pretrained(out_dir)


# --- DeepSeek-layout copy (names as in DeepSeek's released safetensors, legacy config spellings) ---------------------

def hf_saved_name_to_deepseek(name: str) -> str:
    """HF's save_pretrained writes DeepSeek module names below `model.` (plus `model.embed_tokens`, `model.hc_head.*`
    and the attention kv_norm as `attn.norm`); DeepSeek's own files have no prefix and use embed / hc_head_* /
    attn.kv_norm."""
    if name.startswith("model."):
        name = name[len("model."):]
    renames = {"embed_tokens.weight": "embed.weight", "hc_head.hc_fn": "hc_head_fn",
               "hc_head.hc_base": "hc_head_base", "hc_head.hc_scale": "hc_head_scale"}
    if name in renames:
        return renames[name]
    return name.replace(".attn.norm.weight", ".attn.kv_norm.weight")


def legacy_config(hf_config: dict) -> dict:
    """The spellings of DeepSeek's released config.json (compress_ratios, num_hash_layers, qk_rope_head_dim,
    rope_scaling) instead of HF's layer_types / mlp_layer_types / partial_rotary_factor / rope_parameters."""
    ratio_of = {SWA: 0, CSA: hf_config["compress_rates"][CSA], HCA: hf_config["compress_rates"][HCA]}
    if ratio_of[CSA] != 4 or ratio_of[HCA] != 128:
        raise RuntimeError("make_golden: legacy compress_ratios can only express rates 4 and 128")
    mlp = hf_config["mlp_layer_types"]
    n_hash = mlp.count("hash_moe")
    if mlp != ["hash_moe"] * n_hash + ["moe"] * (len(mlp) - n_hash):
        raise RuntimeError("make_golden: legacy num_hash_layers needs hash layers first")
    drop = {"layer_types", "mlp_layer_types", "compress_rates", "rope_parameters", "partial_rotary_factor",
            "qk_rope_head_dim", "dtype", "transformers_version", "output_router_logits", "router_aux_loss_coef",
            "router_jitter_noise", "attention_bias", "attention_dropout", "mlp_bias", "use_cache", "pad_token_id",
            "initializer_range", "hidden_act"}
    cfg = {k: v for k, v in hf_config.items() if k not in drop}
    # Like the released files: one trailing entry for the MTP layer, which HF and the backbone ignore.
    cfg["compress_ratios"] = [ratio_of[t] for t in hf_config["layer_types"]] + [0]
    cfg["num_hash_layers"] = n_hash
    cfg["qk_rope_head_dim"] = int(hf_config["head_dim"] * hf_config["partial_rotary_factor"])
    compress = hf_config["rope_parameters"]["compress"]
    if compress.get("rope_type") == "yarn":
        cfg["rope_scaling"] = {"type": "yarn", "factor": compress["factor"],
                               "original_max_position_embeddings": compress["original_max_position_embeddings"],
                               "beta_fast": compress["beta_fast"], "beta_slow": compress["beta_slow"]}
    cfg["torch_dtype"] = "bfloat16"
    return dict(sorted(cfg.items()))


def save_deepseek_layout(hf_dir: Path, out_dir: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(hf_dir / "model.safetensors"))
    out = {}
    for name, t in tensors.items():
        ds_name = hf_saved_name_to_deepseek(name)
        # DeepSeek ships norm weights in BF16 (their values are bf16-representable here, so nothing changes).
        if ds_name.endswith("norm.weight") and t.dtype == torch.float32:
            assert torch.equal(_bf16(t), t), name
            t = t.to(torch.bfloat16)
        out[ds_name] = t.contiguous()
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    save_file(out, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    hf_config = json.loads((hf_dir / "config.json").read_text())
    (out_dir / "config.json").write_text(json.dumps(legacy_config(hf_config), indent=2) + "\n")


# --- reference run ----------------------------------------------------------------------------------------------

class DecisionProbe:
    """Forward hooks that measure how close HF's discrete choices are to a tie (expert top-k, indexer top-k) and how
    often the SwiGLU clamps bite, during a no-cache forward where position p is row p."""

    def __init__(self, model: DeepseekV4ForCausalLM):
        self.router_gaps: list[float] = []
        self.indexer_rel_gaps: list[float] = []
        self.indexer_selecting_rows = 0
        self.clamp_counts = {"gate": 0, "up": 0, "total": 0}
        self.limit = model.config.swiglu_limit
        self.handles = []
        for module in model.modules():
            if isinstance(module, hf_v4.DeepseekV4TopKRouter):
                self.handles.append(module.register_forward_hook(self._router_hook))
            elif isinstance(module, hf_v4.DeepseekV4Indexer):
                self.handles.append(module.scorer.register_forward_hook(self._make_indexer_hook(module)))
            elif isinstance(module, hf_v4.DeepseekV4MLP):
                self.handles.append(module.register_forward_hook(self._shared_hook))
            elif isinstance(module, hf_v4.DeepseekV4Experts):
                self.handles.append(module.register_forward_hook(self._experts_hook))

    def close(self) -> None:
        for h in self.handles:
            h.remove()

    def _count_clamps(self, gate: torch.Tensor, up: torch.Tensor) -> None:
        self.clamp_counts["gate"] += int((gate > self.limit).sum())
        self.clamp_counts["up"] += int((up.abs() > self.limit).sum())
        self.clamp_counts["total"] += gate.numel()

    def _router_hook(self, module, inputs, output) -> None:
        flat = inputs[0].reshape(-1, module.hidden_dim).float()
        scores = module.score_fn(F.linear(flat, module.weight.float()))
        biased = (scores + module.e_score_correction_bias.float()).sort(dim=-1, descending=True).values
        k = module.top_k
        if biased.shape[-1] > k:
            self.router_gaps.append(float((biased[:, k - 1] - biased[:, k]).min()))

    def _make_indexer_hook(self, indexer):
        def hook(module, inputs, output) -> None:
            scores = output[0].double()  # [S, T]
            rate, k = indexer.compress_rate, indexer.index_topk
            for p in range(scores.shape[0]):
                visible = min((p + 1) // rate, scores.shape[1])
                if visible <= k:
                    continue
                row = scores[p, :visible].sort(descending=True).values
                self.indexer_selecting_rows += 1
                scale = max(float(row.abs().max()), 1e-30)
                self.indexer_rel_gaps.append(float(row[k - 1] - row[k]) / scale)
        return hook

    def _shared_hook(self, module, inputs, output) -> None:
        x = inputs[0]
        self._count_clamps(module.gate_proj(x), module.up_proj(x))

    def _experts_hook(self, module, inputs, output) -> None:
        hidden, top_k_index = inputs[0], inputs[1]
        for slot in range(top_k_index.shape[-1]):
            w = module.gate_up_proj[top_k_index[:, slot]]  # [N, 2I, D]
            gate_up = torch.einsum("nd,nod->no", hidden, w)
            gate, up = gate_up.chunk(2, dim=-1)
            self._count_clamps(gate, up)

    def summary(self) -> dict:
        total = max(self.clamp_counts["total"], 1)
        return {
            "router_min_gap": min(self.router_gaps) if self.router_gaps else None,
            "indexer_min_rel_gap": min(self.indexer_rel_gaps) if self.indexer_rel_gaps else None,
            "indexer_selecting_rows": self.indexer_selecting_rows,
            "swiglu_gate_clamped_fraction": self.clamp_counts["gate"] / total,
            "swiglu_up_clamped_fraction": self.clamp_counts["up"] / total,
        }


@torch.no_grad()
def layer_streams(model, prompt: list[int], device) -> tuple[torch.Tensor, torch.Tensor]:
    """The mHC residual stream entering layer 0 and leaving every layer ([L+1, T, hc_mult, D]) and the final normed
    hidden state ([T, D]) for a no-cache forward — for locating a mismatch layer by layer."""
    captured = []
    hooks = [layer.register_forward_hook(lambda m, i, o: captured.append(o[0].float().cpu()))
             for layer in model.model.layers]
    try:
        out = gc.full_forward(model, prompt, device)
    finally:
        for h in hooks:
            h.remove()
    embed = model.model.embed_tokens(torch.tensor(prompt, device=device)).float().cpu()
    first = embed.unsqueeze(1).expand(-1, model.config.hc_mult, -1)
    final = model.model.norm(model.model.hc_head(torch.stack(captured[-1:]).to(device)))[0].float().cpu()
    logits = model.lm_head(final.to(device)).float().cpu()
    if gc.rel_diff(logits, out.logits[0].float().cpu()) > 1e-6:
        raise RuntimeError("make_golden: hooked layer outputs do not reproduce the logits")
    return torch.stack([first] + captured), final


@torch.no_grad()
def sensitivity(model_dir: Path, seq: list[int], ref: torch.Tensor, device) -> dict:
    """How far the logits move (same metric as the tolerance) when one modelling detail is changed — evidence that a
    C++ implementation getting that detail wrong fails the 1e-3 tolerance."""
    base_cfg = DeepseekV4Config.from_pretrained(model_dir)

    def run(mutate=None, **overrides) -> float:
        m = DeepseekV4ForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **overrides).to(device).eval()
        handles = mutate(m) if mutate else []
        try:
            return gc.rel_diff(gc.full_forward(m, seq, device).logits[0].float().cpu(), ref)
        finally:
            for h in handles:
                h.remove()

    def zero_sinks(m):
        for mod in m.modules():
            if isinstance(mod, hf_v4.DeepseekV4Attention):
                mod.sinks.zero_()
        return []

    def drop_compressed(m):
        def hook(mod, inputs, output):
            kv, bias = output
            return kv[:, :, :0], (None if bias is None else bias[..., :0])
        return [mod.register_forward_hook(hook) for mod in m.modules()
                if isinstance(mod, (hf_v4.DeepseekV4CSACompressor, hf_v4.DeepseekV4HCACompressor))]

    def transpose_comb(m):
        def hook(mod, inputs, output):
            post, comb, collapsed = output
            return post, comb.transpose(-1, -2), collapsed
        return [mod.register_forward_hook(hook) for mod in m.modules()
                if isinstance(mod, hf_v4.DeepseekV4HyperConnection)]

    def skip_q_head_norm(m):
        return [mod.self_attn.q_b_norm.register_forward_hook(lambda mod_, inputs, output: inputs[0])
                for mod in m.model.layers]

    out = {
        "sliding_window+1": run(sliding_window=base_cfg.sliding_window + 1),
        "mhc_comb_not_transposed": run(transpose_comb),
        "q_head_norm_skipped": run(skip_q_head_norm),
        "attention_sinks_zeroed": run(zero_sinks),
        "hc_sinkhorn_iters-1": run(hc_sinkhorn_iters=base_cfg.hc_sinkhorn_iters - 1),
        "swiglu_limit_removed": run(swiglu_limit=1e9),
    }
    if any(t != SWA for t in base_cfg.layer_types):
        out["compressed_entries_dropped"] = run(drop_compressed)
    if CSA in base_cfg.layer_types:
        out["indexer_selects_all"] = run(index_topk=1 << 20)
    compress_rope = base_cfg.rope_parameters["compress"]
    if compress_rope.get("rope_type") == "yarn" and any(t != SWA for t in base_cfg.layer_types):
        plain = {"rope_type": "default", "rope_theta": compress_rope["rope_theta"],
                 "partial_rotary_factor": compress_rope["partial_rotary_factor"]}
        out["compress_rope_without_yarn"] = run(rope_parameters={"main": base_cfg.rope_parameters["main"],
                                                                 "compress": plain})
    return out


def config_summary(cfg: DeepseekV4Config) -> dict:
    keys = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim", "qk_rope_head_dim",
            "q_lora_rank", "o_groups", "o_lora_rank", "moe_intermediate_size", "n_routed_experts",
            "num_experts_per_tok", "n_shared_experts", "routed_scaling_factor", "swiglu_limit", "hc_mult",
            "hc_sinkhorn_iters", "hc_eps", "rms_norm_eps", "index_n_heads", "index_head_dim", "index_topk",
            "sliding_window", "layer_types", "mlp_layer_types", "compress_rates", "rope_parameters", "scoring_func"]
    return gc.summary_of(cfg, keys)


class V4Arch(gc.Arch):
    """The V4 side of golden_common.run_case (no fake-quant: HF's paths agree to ~1e-6, no stability filter)."""

    CASES = CASES
    probe = DecisionProbe
    config_summary = staticmethod(config_summary)
    save_checkpoint = staticmethod(save_checkpoint)
    sensitivity = staticmethod(sensitivity)

    @staticmethod
    def load(model_dir: Path, dtype: torch.dtype):
        # grouped_mm has no float64 kernel; the eager expert loop computes the same thing.
        extra = {"experts_implementation": "eager"} if dtype == torch.float64 else {}
        return DeepseekV4ForCausalLM.from_pretrained(model_dir, dtype=dtype, **extra)

    @staticmethod
    def reference_info(cfg) -> dict:
        return {"weights_on_disk": "BF16, except F32 for mHC (hc_*), attn_sink, ape, gate.bias and all norm weights "
                                   "(norm values are bf16-representable)",
                "experts_implementation": cfg._experts_implementation}

    @staticmethod
    def extras(case, case_dir: Path, model, prompt, tokens, full, device, files: dict, checks: dict) -> None:
        if case.get("dump_hidden"):
            streams, final = layer_streams(model, prompt, device)
            files["hidden_streams.npy"] = gc.save_npy(case_dir / "hidden_streams.npy", streams)
            files["hidden_final.npy"] = gc.save_npy(case_dir / "hidden_final.npy", final)
        if case.get("deepseek_layout"):
            save_deepseek_layout(case_dir / "model", case_dir / "model_deepseek")
            ds_model = DeepseekV4ForCausalLM.from_pretrained(case_dir / "model_deepseek", dtype=torch.float32)
            ds_full = gc.full_forward(ds_model.to(device).eval(), prompt + tokens, device).logits[0].float().cpu()
            checks["deepseek_layout_vs_hf_layout"] = gc.rel_diff(ds_full, full)


def _v41_arch():
    import golden_v41  # needs transformers with deepseek_v41 (tests/golden/README.md)
    return golden_v41.V41Arch


if __name__ == "__main__":
    sys.exit(gc.main({"v4": lambda: V4Arch, "v41": _v41_arch}, __doc__))
