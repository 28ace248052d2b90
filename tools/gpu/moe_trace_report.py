#!/usr/bin/env python3
"""Per-kernel device time of one moe_experts() call, from a kernel trace of `ops_cuda_bench --moe-trace`.

The bench pauses 30 ms after each (tokens, path) timing, so the trace splits at idle gaps into one
segment per timing; each kernel's time in a segment is divided by the number of moe_sort_kernel launches
in it (one per op call). usage: moe_trace_report.py TRACE.csv --labels "1:default,1:wide regs,..."
"""
import argparse
import csv
import re
from collections import defaultdict

KNOWN = ("skinny_fp4_pipe_kernel", "skinny_fp4_wide_kernel", "skinny_gemm_kernel", "moe_sort_kernel",
         "moe_combine_kernel", "moe_swiglu_codes128_kernel", "moe_swiglu_kernel", "act_quant")
GEMMS = KNOWN[:3]


def short(name):
    for k in KNOWN:
        if k in name:
            return k
    m = re.search(r"\d+([A-Za-z_]\w*?_kernel)", name)
    return m.group(1) if m else name[:40]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--labels", required=True, help="comma-separated segment labels, in order")
    ap.add_argument("--gap-ms", type=float, default=15.0)
    args = ap.parse_args()
    rows = []
    with open(args.trace) as f:
        for r in csv.DictReader(f):
            rows.append((int(r["start_ns"]), int(r["end_ns"]), r["kind"], r["name"]))
    rows.sort()
    segments, cur, last_end = [], [], None
    for r in rows:
        if last_end is not None and r[0] - last_end > args.gap_ms * 1e6:
            segments.append(cur)
            cur = []
        cur.append(r)
        last_end = max(last_end or 0, r[1])
    if cur:
        segments.append(cur)
    # Only segments with sort kernels are timings (the weight upload and set-up come first).
    segments = [s for s in segments if any("moe_sort_kernel" in r[3] for r in s)]
    labels = args.labels.split(",")
    print("| tokens | path | kernel | launches per call | µs per call |")
    print("| ---: | --- | --- | ---: | ---: |")
    for label, seg in zip(labels, segments):
        calls = sum(1 for r in seg if "moe_sort_kernel" in r[3])
        per = defaultdict(lambda: [0, 0])
        gemm_in_call = 0
        for start, end, kind, name in seg:
            if kind != "k":
                continue
            key = short(name)
            if key == "moe_sort_kernel":
                gemm_in_call = 0
            elif key in GEMMS:  # the first grouped GEMM of a call is w1/w3, the second w2
                key += " (w1/w3)" if gemm_in_call == 0 else " (w2)"
                gemm_in_call += 1
            per[key][0] += 1
            per[key][1] += end - start
        tokens, path = label.split(":", 1)
        total = 0.0
        for key, (n, ns) in sorted(per.items(), key=lambda kv: -kv[1][1]):
            us = ns / 1e3 / calls
            total += us
            print(f"| {tokens} | {path} | {key} | {n / calls:.1f} | {us:.1f} |")
        print(f"| {tokens} | {path} | **sum of kernels** | | **{total:.1f}** |")
    if len(segments) != len(labels):
        print(f"(segments: {len(segments)}, labels: {len(labels)})")


if __name__ == "__main__":
    main()
