"""Architecture-independent part of the HF-transformers golden fixture generator (tools/make_golden.py): prompts with
safe decision margins, greedy runs, no-cache / cached / chunked forwards, the fixture files and meta.json. Each
architecture (V4 in make_golden.py, V4.1 in golden_v41.py) supplies an `Arch` with its cases, checkpoint writer,
model loader, decision probe and extras."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np
import torch

import transformers
from transformers import GenerationConfig
from transformers.cache_utils import DynamicCache

GREEDY_TOKENS = 40
CHUNK_SIZES = (1, 3, 16, 17)
# Minimum decision margins a fixture must have so that an fp32 implementation with a different summation order
# makes the same discrete choices as HF (expert top-k, indexer top-k, greedy argmax). fp32 noise between HF on CPU
# and on GPU is ~1e-6 relative; these leave a factor of >10 on top of that.
MIN_ROUTER_GAP = 5e-5  # absolute gap between the k-th and (k+1)-th biased router score (scores are O(1))
MIN_INDEXER_REL_GAP = 5e-5  # gap between the k-th and (k+1)-th visible index score, relative to max |score| of the row
MIN_GREEDY_GAP = 1e-4  # absolute gap between the best and second-best logit at each greedy step
# Where the reference rounds activations onto FP8/FP4 grids (V4.1's QAT fake-quant), fp32 noise can flip one rounding
# and move the logits by ~1e-3; such prompts are refused: HF's own paths (fp64, cached prefill, generate) must agree.
MAX_HF_PATH_DIFF = 1e-4
PROMPT_SEED_TRIES = 40
ROOT = Path(__file__).resolve().parent.parent


def normal(gen: torch.Generator, shape, std: float) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float32) * std


def bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).to(torch.float32)


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| — the metric the C++ golden tests use (b is the reference)."""
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def topk_gaps(rows: torch.Tensor, k: int, relative: bool) -> list[float]:
    """Per row (finite entries only, sorted descending) the gap between the k-th and (k+1)-th value, absolute or
    relative to the row's largest |value|; rows with at most k finite entries make no choice and are skipped."""
    gaps = []
    for row in rows.double().reshape(-1, rows.shape[-1]):
        row = row[torch.isfinite(row)].sort(descending=True).values
        if row.numel() <= k:
            continue
        gap = float(row[k - 1] - row[k])
        gaps.append(gap / max(float(row.abs().max()), 1e-30) if relative else gap)
    return gaps


def make_prompt(vocab: int, length: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, vocab, (length,), generator=gen)
    ids[0] = 0  # BOS, as real prompts start
    return ids.tolist()


@torch.no_grad()
def greedy(model, prompt: list[int], device) -> tuple[list[int], torch.Tensor]:
    ids = torch.tensor([prompt], device=device)
    # generate() falls back to the model's generation_config (eos 1) for unset fields; greedy runs must not stop early.
    model.generation_config.eos_token_id = None
    gen_cfg = GenerationConfig(max_new_tokens=GREEDY_TOKENS, min_new_tokens=0, do_sample=False, use_cache=True,
                               eos_token_id=None, pad_token_id=0, bos_token_id=0, output_logits=True,
                               return_dict_in_generate=True)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gen_cfg)
    tokens = out.sequences[0, len(prompt):].tolist()
    logits = torch.stack([step[0] for step in out.logits]).float().cpu()
    if len(tokens) != GREEDY_TOKENS or logits.shape[0] != GREEDY_TOKENS:
        raise RuntimeError(f"make_golden: generate returned {len(tokens)} tokens, expected {GREEDY_TOKENS}")
    if tokens != logits.argmax(-1).tolist():
        raise RuntimeError("make_golden: greedy tokens are not the argmax of generate's logits")
    return tokens, logits


@torch.no_grad()
def full_forward(model, ids: list[int], device):
    """Every position's logits of one sequence in a single no-cache forward."""
    return model(torch.tensor([ids], device=device), use_cache=False)


@torch.no_grad()
def full_forward_cached(model, ids: list[int], device):
    """The same through a fresh cache (one prefill chunk), for models whose no-cache path is not the reference."""
    return model(torch.tensor([ids], device=device), past_key_values=DynamicCache(config=model.config), use_cache=True)


@torch.no_grad()
def chunked_prefill_logits(model, prompt: list[int], chunk: int, device) -> torch.Tensor:
    cache = DynamicCache(config=model.config)
    rows = []
    for start in range(0, len(prompt), chunk):
        ids = torch.tensor([prompt[start:start + chunk]], device=device)
        rows.append(model(ids, past_key_values=cache, use_cache=True).logits[0].float().cpu())
    return torch.cat(rows)


def greedy_min_gap(logits: torch.Tensor) -> float:
    top2 = logits.double().topk(2, dim=-1).values
    return float((top2[:, 0] - top2[:, 1]).min())


class Arch:
    """What run_case needs from a model family. Subclasses set CASES and provide probe (a decision-probe class),
    save_checkpoint(case, dir), load(dir, dtype), config_summary(cfg), reference_info(cfg), sensitivity(...) and
    extras(...); full_forward and stability have defaults."""

    CASES: list = []
    full_forward = staticmethod(full_forward)

    @staticmethod
    def stability(case, model, prompt, greedy_logits, full, device) -> dict:
        """Extra margins a prompt must satisfy (margins_ok reads hf_paths_max_rel_diff); none by default."""
        return {}


def summary_of(cfg, keys: list[str]) -> dict:
    return {k: getattr(cfg, k) for k in keys}


def margins_ok(margins: dict, tokens: list[int]) -> bool:
    def at_least(key, bound):
        return margins.get(key) is None or margins[key] >= bound
    return (margins["greedy_min_gap"] >= MIN_GREEDY_GAP and margins["greedy_min_gap_nocache"] >= MIN_GREEDY_GAP
            and at_least("router_min_gap", MIN_ROUTER_GAP) and at_least("indexer_min_rel_gap", MIN_INDEXER_REL_GAP)
            and at_least("candidate_min_rel_gap", MIN_INDEXER_REL_GAP) and len(set(tokens)) >= 8
            and margins.get("hf_paths_max_rel_diff", 0.0) <= MAX_HF_PATH_DIFF)


def pick_prompt(case: dict, model, device, arch) -> tuple[dict, list[int], list[int], torch.Tensor, torch.Tensor]:
    """Tries prompt seeds from case['prompt_seed'] on until every discrete decision has a safe margin."""
    vocab = model.config.vocab_size
    first_seed = case.get("prompt_seed", case["seed"] * 1000)
    best = None
    for attempt in range(PROMPT_SEED_TRIES):
        seed = first_seed + attempt
        prompt = make_prompt(vocab, case["prompt_len"], seed)
        tokens, greedy_logits = greedy(model, prompt, device)
        probe = arch.probe(model)
        try:
            full = arch.full_forward(model, prompt + tokens, device).logits[0].float().cpu()
        finally:
            probe.close()
        margins = probe.summary()
        margins["greedy_min_gap"] = greedy_min_gap(greedy_logits)
        margins["greedy_min_gap_nocache"] = greedy_min_gap(full[len(prompt) - 1:len(prompt) - 1 + GREEDY_TOKENS])
        margins.update(arch.stability(case, model, prompt, greedy_logits, full, device))
        ok = margins_ok(margins, tokens)
        margins["prompt_seed"] = seed
        margins["prompt_seed_attempts"] = attempt + 1
        margins["margins_ok"] = ok
        print(f"  prompt seed {seed}: {json.dumps({k: v for k, v in margins.items() if 'gap' in k or 'diff' in k})} "
              f"distinct greedy {len(set(tokens))} -> {'ok' if ok else 'retry'}", flush=True)
        if ok:
            return margins, prompt, tokens, greedy_logits, full
        if best is None:
            best = (margins, prompt, tokens, greedy_logits, full)
    print(f"  WARNING: no prompt seed with safe margins for {case['name']}; keeping the first", flush=True)
    return best


def save_npy(path: Path, array: torch.Tensor, dtype=np.float32) -> dict:
    arr = np.ascontiguousarray(array.detach().cpu().numpy().astype(dtype))
    np.save(path, arr)
    return {"shape": list(arr.shape), "dtype": np.dtype(dtype).name}


def run_case(arch, case: dict, case_dir: Path, device: torch.device, diagnostics: bool) -> dict:
    print(f"[{case['name']}] building checkpoint", flush=True)
    arch.save_checkpoint(case, case_dir / "model")
    model = arch.load(case_dir / "model", torch.float32).to(device).eval()
    margins, prompt, tokens, greedy_logits, full = pick_prompt(case, model, device, arch)
    seq = prompt + tokens
    tp = len(prompt)
    files = {}
    files["logits_full.npy"] = save_npy(case_dir / "logits_full.npy", full)
    files["logits_greedy.npy"] = save_npy(case_dir / "logits_greedy.npy", greedy_logits)
    checks = {
        "greedy_logits_vs_nocache": rel_diff(greedy_logits, full[tp - 1:tp - 1 + GREEDY_TOKENS]),
        "greedy_tokens_equal_nocache_argmax": tokens == full[tp - 1:tp - 1 + GREEDY_TOKENS].argmax(-1).tolist(),
    }
    with torch.no_grad():
        cached = model(torch.tensor([prompt], device=device), use_cache=True).logits[0].float().cpu()
    checks["prefill_cache_vs_nocache"] = rel_diff(cached, full[:tp])
    if diagnostics:
        checks["chunked_prefill_vs_nocache"] = {
            str(c): rel_diff(chunked_prefill_logits(model, prompt, c, device), full[:tp]) for c in CHUNK_SIZES}
        model64 = arch.load(case_dir / "model", torch.float64).to(device).eval()
        checks["fp32_vs_fp64"] = rel_diff(full, arch.full_forward(model64, seq, device).logits[0].cpu())
        del model64
    arch.extras(case, case_dir, model, prompt, tokens, full, device, files, checks)
    flat = full.double()
    stats = {
        "logit_std": float(flat.std()),
        "logit_max_abs": float(flat.abs().max()),
        "mean_per_position_std": float(flat.std(dim=-1).mean()),
        "distinct_greedy_tokens": len(set(tokens)),
        "distinct_argmax_over_prompt": len(set(full[:tp].argmax(-1).tolist())),
    }
    cfg = model.config
    reference = {
        "load_dtype": "float32",
        "attn_implementation": cfg._attn_implementation,
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
        "tf32": bool(torch.backends.cuda.matmul.allow_tf32) if device.type == "cuda" else False,
    }
    reference.update(arch.reference_info(cfg))
    meta = {
        "case": case["name"],
        "description": case["description"],
        "covers": case["covers"],
        "prompt_len": tp,
        "greedy_tokens": GREEDY_TOKENS,
        "prompt_ids": prompt,
        "greedy_ids": tokens,
        "files": files,
        "checkpoints": ["model"] + (["model_deepseek"] if case.get("deepseek_layout") else []),
        "config_summary": arch.config_summary(cfg),
        "weight_seed": case["seed"],
        "reference": reference,
        "tolerance": {"max_abs_diff_over_max_abs_ref": 1e-3, "greedy_ids": "identical"},
        "hf_self_checks": checks,
        "margins": margins,
        "stats": stats,
    }
    print(f"[{case['name']}] checks {json.dumps(checks)}\n  stats {json.dumps(stats)}", flush=True)
    return meta


def versions() -> dict:
    return {"torch": torch.__version__, "transformers": transformers.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def add_sensitivity(arch, case_dir: Path, device) -> None:
    meta = json.loads((case_dir / "meta.json").read_text())
    ref = torch.from_numpy(np.load(case_dir / "logits_full.npy"))
    result = arch.sensitivity(case_dir / "model", meta["prompt_ids"] + meta["greedy_ids"], ref, device)
    meta["sensitivity"] = {"device": str(device), "torch": torch.__version__,
                           "transformers": transformers.__version__, "rel_diff": result}
    weak = [k for k, v in result.items() if v < 1e-2]
    print(f"[{meta['case']}] sensitivity {json.dumps(result)}" + (f"\n  below 1e-2: {weak}" if weak else ""),
          flush=True)
    (case_dir / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def main(archs: dict, doc: str) -> int:
    """archs: name -> zero-argument callable returning the Arch (imported lazily: V4.1 needs a newer transformers)."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--arch", default="v4", choices=sorted(archs), help="model family (default v4)")
    parser.add_argument("--out", default="", help="fixture root (default tests/golden/<arch>)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--cases", default="", help="comma-separated subset of the arch's cases")
    parser.add_argument("--no-diagnostics", action="store_true", help="skip chunked-prefill and fp64 cross-checks")
    parser.add_argument("--sensitivity", action="store_true",
                        help="instead of generating, measure on existing fixtures how far the logits move when one "
                             "modelling detail is changed, and add it to their meta.json")
    args = parser.parse_args()
    arch = archs[args.arch]()

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference must be true fp32
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    device = torch.device(args.device)
    wanted = [c for c in args.cases.split(",") if c]
    unknown = set(wanted) - {c["name"] for c in arch.CASES}
    if unknown:
        print(f"make_golden: unknown case(s) {sorted(unknown)}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else ROOT / "tests" / "golden" / args.arch
    out.mkdir(parents=True, exist_ok=True)
    info = versions()
    for case in arch.CASES:
        if wanted and case["name"] not in wanted:
            continue
        case_dir = out / case["name"]
        if args.sensitivity:
            add_sensitivity(arch, case_dir, device)
            continue
        case_dir.mkdir(parents=True, exist_ok=True)
        meta = run_case(arch, case, case_dir, device, diagnostics=not args.no_diagnostics)
        meta["versions"] = info
        meta["regenerate"] = (f"python3 tools/make_golden.py{'' if args.arch == 'v4' else ' --arch ' + args.arch} "
                              f"--device {device.type} --cases {case['name']}")
        (case_dir / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return 0
