#!/usr/bin/env python3
"""Integrity check of the committed HF-transformers golden fixtures (tests/golden/{v4,v41}/<case>/): metadata, array shapes,
greedy ids vs logits, safetensors headers and config consistency. Needs numpy only; it does not run HF or the model.
`--against DIR` also compares the logits of two fixture trees (e.g. a CPU regeneration against the committed GPU one)."""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "F8_E4M3": 1, "F8_E8M0": 1, "BOOL": 1}
META_KEYS = ("case", "description", "covers", "prompt_len", "greedy_tokens", "prompt_ids", "greedy_ids", "files",
             "checkpoints", "config_summary", "reference", "tolerance", "hf_self_checks", "margins", "stats",
             "versions")
# HF's own cache/no-cache/chunked paths agree to ~1e-6; anything near the C++ tolerance means a broken fixture.
HF_SELF_TOLERANCE = 1e-5
# With V4.1's QAT fake-quant an fp32-noise difference can flip one FP8/FP4 rounding, which moves the logits by up to
# ~1e-4 (still 10x inside the C++ tolerance).
HF_SELF_TOLERANCE_QAT = 2e-4


class FixtureError(Exception):
    pass


def expect(cond: bool, msg: str) -> None:
    if not cond:
        raise FixtureError(msg)


def rel_diff(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - ref).max() / np.abs(ref.astype(np.float64)).max())


def read_safetensors_header(path: Path) -> dict:
    """The header of a .safetensors file: u64 little-endian length, then that many bytes of JSON."""
    size = path.stat().st_size
    with path.open("rb") as f:
        raw = f.read(8)
        expect(len(raw) == 8, f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        expect(8 + n <= size, f"{path}: header length {n} exceeds file size {size}")
        header = json.loads(f.read(n))
    data_size = size - 8 - n
    ends = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        expect(dtype in DTYPE_BYTES, f"{path}: tensor {name} has unknown dtype {dtype}")
        expect(0 <= begin <= end <= data_size, f"{path}: tensor {name} offsets {begin}..{end} outside data")
        expect(end - begin == DTYPE_BYTES[dtype] * int(np.prod(shape, dtype=np.int64)),
               f"{path}: tensor {name} byte size does not match dtype {dtype} and shape {shape}")
        ends.append((begin, end))
    ends.sort()
    for (b0, e0), (b1, _) in zip(ends, ends[1:]):
        expect(e0 <= b1, f"{path}: tensors overlap at byte {b1}")
    return {k: v for k, v in header.items() if k != "__metadata__"}


def check_checkpoint(ckpt: Path, meta: dict) -> None:
    cfg = json.loads((ckpt / "config.json").read_text())
    tensors = read_safetensors_header(ckpt / "model.safetensors")
    summary = meta["config_summary"]
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "head_dim", "hc_mult"):
        expect(cfg[key] == summary[key], f"{ckpt}/config.json: {key}={cfg[key]} but meta says {summary[key]}")
    v41 = cfg.get("model_type", "").startswith("deepseek_v41")
    hf_layout = "model.embed_tokens.weight" in tensors or "model.embed.weight" in tensors
    embed = tensors[("model.embed.weight" if v41 else "model.embed_tokens.weight") if hf_layout else "embed.weight"]
    expect(embed["shape"] == [cfg["vocab_size"], cfg["hidden_size"]], f"{ckpt}: embedding shape {embed['shape']}")
    head = "lm_head.weight" if v41 and hf_layout else "head.weight"
    expect(tensors[head]["shape"] == [cfg["vocab_size"], cfg["hidden_size"]], f"{ckpt}: head shape")
    prefix = "model.layers." if hf_layout else "layers."
    layers = {int(name[len(prefix):].split(".")[0]) for name in tensors if name.startswith(prefix)}
    expect(layers == set(range(cfg["num_hidden_layers"])), f"{ckpt}: layer tensors for {sorted(layers)}")
    if hf_layout:
        expect(cfg["layer_types"] == summary["layer_types"], f"{ckpt}: layer_types differ from meta")
    else:  # DeepSeek layout: legacy spellings, one trailing compress_ratios entry for the MTP layer
        expect(len(cfg["compress_ratios"]) == cfg["num_hidden_layers"] + 1, f"{ckpt}: compress_ratios length")
        expect("layer_types" not in cfg and "num_hash_layers" in cfg, f"{ckpt}: expected the legacy config")
        expect(not any(name.startswith("model.") for name in tensors), f"{ckpt}: DeepSeek layout has model. names")


def check_case(case_dir: Path) -> dict:
    meta = json.loads((case_dir / "meta.json").read_text())
    missing = [k for k in META_KEYS if k not in meta]
    expect(not missing, f"{case_dir}/meta.json: missing keys {missing}")
    expect(meta["case"] == case_dir.name, f"{case_dir}: meta case name {meta['case']}")
    vocab, tp, steps = meta["config_summary"]["vocab_size"], meta["prompt_len"], meta["greedy_tokens"]
    prompt, greedy = meta["prompt_ids"], meta["greedy_ids"]
    expect(len(prompt) == tp and len(greedy) == steps, f"{case_dir}: prompt/greedy lengths {len(prompt)}/{len(greedy)}")
    expect(all(isinstance(t, int) and 0 <= t < vocab for t in prompt + greedy), f"{case_dir}: token id out of range")
    window = meta["config_summary"]["sliding_window"]
    expect(tp > window, f"{case_dir}: prompt ({tp}) must be longer than the window ({window})")

    arrays = {}
    for name, info in meta["files"].items():
        arr = np.load(case_dir / name, mmap_mode="r")
        expect(arr.dtype.str == np.dtype(info["dtype"]).str and arr.dtype.str in ("<f4", "<i4")
               and list(arr.shape) == info["shape"], f"{case_dir}/{name}: {arr.dtype} {list(arr.shape)} but meta says {info}")
        expect(bool(np.isfinite(arr).all()), f"{case_dir}/{name}: non-finite values")
        arrays[name] = np.asarray(arr)
    full, steps_logits = arrays["logits_full.npy"], arrays["logits_greedy.npy"]
    expect(full.shape == (tp + steps, vocab), f"{case_dir}: logits_full shape {full.shape}")
    expect(steps_logits.shape == (steps, vocab), f"{case_dir}: logits_greedy shape {steps_logits.shape}")
    expect(steps_logits.argmax(-1).tolist() == greedy, f"{case_dir}: greedy_ids are not the argmax of logits_greedy")
    rows = full[tp - 1:tp - 1 + steps]
    expect(rows.argmax(-1).tolist() == greedy, f"{case_dir}: greedy_ids disagree with the no-cache logits")
    self_diff = rel_diff(steps_logits, rows)
    bound = HF_SELF_TOLERANCE_QAT if meta["reference"].get("hf_kv_fake_quant") else HF_SELF_TOLERANCE
    expect(self_diff < bound, f"{case_dir}: cached vs no-cache HF logits differ by {self_diff:.2e}")
    expect(float(full.std()) > 0.5, f"{case_dir}: logits are flat (std {full.std():.3f})")
    expect(len(set(greedy)) >= 8, f"{case_dir}: greedy continuation is nearly constant")
    expect(meta["margins"]["margins_ok"], f"{case_dir}: fixture was generated without safe decision margins")
    if "hidden_streams.npy" in arrays:
        cs = meta["config_summary"]
        expect(arrays["hidden_streams.npy"].shape == (cs["num_hidden_layers"] + 1, tp, cs["hc_mult"], cs["hidden_size"]),
               f"{case_dir}: hidden_streams shape {arrays['hidden_streams.npy'].shape}")
    if "engram_row_ids.npy" in arrays:
        cs = meta["config_summary"]
        ids = arrays["engram_row_ids.npy"]
        cols = (cs["engram_max_ngram_size"] - 1) * cs["engram_n_heads"]
        expect(ids.shape == (tp + steps, len(cs["engram_layer_ids"]), cols), f"{case_dir}: engram_row_ids shape")
        for i, rows_of_layer in enumerate(cs["engram_num_embeddings"]):
            expect(0 <= int(ids[:, i].min()) and int(ids[:, i].max()) < rows_of_layer,
                   f"{case_dir}: engram row ids of layer {cs['engram_layer_ids'][i]} outside its {rows_of_layer} rows")
    for ckpt in meta["checkpoints"]:
        check_checkpoint(case_dir / ckpt, meta)
    return {"full": full, "greedy_logits": steps_logits, "greedy": greedy}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent / "v4"))
    parser.add_argument("--against", help="another fixture tree to compare logits with")
    parser.add_argument("--against-tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    root = Path(args.root)
    cases = sorted(p for p in root.iterdir() if (p / "meta.json").exists())
    if not cases:
        print(f"check_fixtures: no fixtures under {root}", file=sys.stderr)
        return 1
    failed = False
    for case_dir in cases:
        try:
            data = check_case(case_dir)
            line = f"ok   {case_dir.name}"
            if args.against:
                other = check_case(Path(args.against) / case_dir.name)
                d_full = rel_diff(other["full"], data["full"])
                d_greedy = rel_diff(other["greedy_logits"], data["greedy_logits"])
                same = other["greedy"] == data["greedy"]
                line += f"  vs {args.against}: logits_full {d_full:.2e} logits_greedy {d_greedy:.2e} greedy same={same}"
                expect(same and max(d_full, d_greedy) < args.against_tolerance, line)
            print(line)
        except (FixtureError, OSError, KeyError, ValueError) as e:
            failed = True
            print(f"FAIL {case_dir.name}: {e}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
