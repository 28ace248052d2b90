#!/usr/bin/env python3
"""How close one prefill forward's GEMMs come to the tensor-core peaks (issue 6's prefill goal: "40% of
the fp8 peak in the GEMMs"), from a kernel_trace.cpp CSV of v4_model_bench --prefill T and the model's
config.json. The forward is the timed one of the largest prompt: the last forward whose device busy time is
within 10% of the most (the bench's warm-up of the same length runs just before it). Kernels are
put into GEMM families by name; each family's useful FLOPs come from the config (every projection the
first --layers layers run on T tokens, as weight_manifest.cpp lists them; routed experts at
num_experts_per_tok per token; the logits head, run on one row per sequence, is left out). Prints each
family's device time, TFLOP/s and share of the fp8 peak, and all GEMMs together — with and without the
kernels that stage their operands (act quant, weight dequantisation, activation copies) — against the fp8
peak and against the mix's roofline (each family at its own dtype's peak).

The peaks are the GEMM kernels' own rates in the bench's 8192^3 ceiling launches when the trace holds them
(v4_model_bench measures bf16 and FP8 through linear() before loading the model), else the --fp8-peak /
--bf16-peak given, else the H200 ceilings measured earlier (1417 / 784 TFLOP/s).

usage: prefill_gemm_report.py TRACE.csv[.gz] --config CONFIG.json --layers N --tokens T
       [--fp8-peak TFLOPS] [--bf16-peak TFLOPS] [--marker embedding]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_trace_report import read_trace  # noqa: E402
from prefill_trace_report import split_forwards, timed_forward  # noqa: E402

# Kernel name patterns per family, first match wins. cuBLASLt's Hopper kernels are "nvjet_sm90_*":
# "qq" in the operand letters = e4m3 x e4m3 (the block-scaled FP8 GEMM), otherwise bf16.
FAMILIES = [
    ("routed experts", ("moe_prefill", "moe_fp4", "skinny_fp4")),
    ("fp8 dense", ("nvjet_sm90_qq", "fp8_wgmma_decode", "fp8_skinny", "skinny_gemm", "fp8_decode")),
    ("bf16", ("nvjet_sm90", "mma_gemm", "skinny_bf16", "simt_gemm")),
    ("staging", ("act_quant", "dequant_weight", "act_copy", "act_prep", "weight_scale")),
    ("logits head", ("gemv_kernel",)),  # one row per sequence at prefill: not in the FLOPs, shown apart
]


def family_of(name):
    for family, patterns in FAMILIES:
        if any(p in name for p in patterns):
            return family
    return None


def gemm_flops(config, layers, tokens):
    """Useful FLOPs per family of one forward of `tokens` tokens through the first `layers` layers."""
    c = config
    d, q, hd, heads = c["hidden_size"], c["q_lora_rank"], c["head_dim"], c["num_attention_heads"]
    ih, ihd, inter = c["index_n_heads"], c["index_head_dim"], c["moe_intermediate_size"]
    ratios = c.get("compress_ratios", [0] * c["num_hidden_layers"])
    shared = inter * c.get("n_shared_experts", 0)
    macs = {"routed experts": 0, "fp8 dense": 0, "bf16": 0}
    for layer in range(layers):
        ratio = ratios[layer] if layer < len(ratios) else 0
        fp8 = q * d + heads * hd * q + hd * d + d * c["o_groups"] * c["o_lora_rank"] + 3 * shared * d
        bf16 = c["o_groups"] * c["o_lora_rank"] * heads * hd // c["o_groups"]  # wo_a: bf16 (convert.py)
        bf16 += c["n_routed_experts"] * d  # router
        if ratio > 0:  # compressor wkv + wgate (CSA overlaps two windows)
            bf16 += 2 * (2 if ratio == 4 else 1) * hd * d
        if ratio == 4:  # CSA: the indexer's query projection, head weights and key compressor
            fp8 += ih * ihd * q
            bf16 += ih * d + 2 * 2 * ihd * d
        macs["fp8 dense"] += fp8
        macs["bf16"] += bf16
        macs["routed experts"] += c["num_experts_per_tok"] * 3 * inter * d
    return {k: 2.0 * v * tokens for k, v in macs.items()}


def trace_peaks(rows, marker):
    """The GEMM kernels' own rates in v4_model_bench's ceiling measurements (8192^3 through linear(), run
    before the first forward: bf16, then FP8 blocks with act quant), as TFLOP/s: (fp8, bf16), None where
    the trace has no such launches. The median launch of each."""
    first = next((i for i, r in enumerate(rows) if r[2] == "k" and marker in r[3]), len(rows))
    flops = 2.0 * 8192 ** 3
    rates = {"fp8": [], "bf16": []}
    for start, end, kind, name in rows[:first]:
        if kind == "k" and name.startswith("nvjet_sm90") and end > start:
            rates["fp8" if name.startswith("nvjet_sm90_qq") else "bf16"].append(flops / ((end - start) * 1e3))
    median = {k: sorted(v)[len(v) // 2] if v else None for k, v in rates.items()}
    return median["fp8"], median["bf16"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--config", required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--fp8-peak", type=float, default=None,
                    help="TFLOP/s (default: the trace's own 8192^3 ceiling launches, else 1417, the H200's measured)")
    ap.add_argument("--bf16-peak", type=float, default=None,
                    help="TFLOP/s (default: the trace's own 8192^3 ceiling launches, else 784, the H200's measured)")
    ap.add_argument("--marker", default="embedding")
    args = ap.parse_args()
    with open(args.config) as f:
        config = json.load(f)
    rows = read_trace(args.trace)
    traced_fp8, traced_bf16 = trace_peaks(rows, args.marker)
    def pick(given, traced, earlier):
        if given:
            return given, "given"
        return (traced, "this trace's ceiling launches") if traced else (earlier, "measured earlier")
    args.fp8_peak, fp8_source = pick(args.fp8_peak, traced_fp8, 1417.0)
    args.bf16_peak, bf16_source = pick(args.bf16_peak, traced_bf16, 784.0)
    fwd = timed_forward(split_forwards(rows, args.marker))
    ns = {family: 0 for family, _ in FAMILIES}
    for start, end, kind, name in fwd:
        family = family_of(name) if kind == "k" else None
        if family:
            ns[family] += end - start
    flops = gemm_flops(config, args.layers, args.tokens)
    print(f"## GEMMs of one {args.tokens}-token prefill, {args.layers} layers "
          f"(peaks: fp8 {args.fp8_peak:.0f} TFLOP/s, {fp8_source}; bf16 {args.bf16_peak:.0f}, {bf16_source})\n")
    print("| family | TFLOP | device ms | TFLOP/s | share of fp8 peak | share of its own peak |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for family in ("routed experts", "fp8 dense", "bf16"):
        ms = ns[family] / 1e6
        rate = flops[family] / (ms * 1e9) if ms > 0 else 0.0
        own = args.bf16_peak if family == "bf16" else args.fp8_peak
        print(f"| {family} | {flops[family] / 1e12:.2f} | {ms:.2f} | {rate:.0f} | {100 * rate / args.fp8_peak:.1f}% "
              f"| {100 * rate / own:.1f}% |")
    total = sum(flops.values())
    gemm_ms = sum(ns[f] for f in ("routed experts", "fp8 dense", "bf16")) / 1e6
    staged_ms = gemm_ms + ns["staging"] / 1e6
    # The roofline of the mix: each family at its own dtype's peak (wo_a, the router and compressors are
    # bf16 by the reference's numerics, so the fp8 peak is out of their reach).
    ideal_ms = sum(flops[f] / ((args.bf16_peak if f == "bf16" else args.fp8_peak) * 1e9) for f in flops)
    for label, ms in (("all GEMMs", gemm_ms), ("all GEMMs + operand staging", staged_ms)):
        rate = total / (ms * 1e9)
        print(f"| **{label}** | {total / 1e12:.2f} | {ms:.2f} | {rate:.0f} | **{100 * rate / args.fp8_peak:.1f}%** "
              f"| {100 * ideal_ms / ms:.1f}% of the mix's roofline ({ideal_ms:.2f} ms) |")
    print(f"\n(operand staging {ns['staging'] / 1e6:.2f} ms; left out: the logits head on one row, "
          f"{ns['logits head'] / 1e6:.2f} ms)")


if __name__ == "__main__":
    main()
