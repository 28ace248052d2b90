#!/usr/bin/env python3
"""Where one prefill forward's device time goes, from a kernel_trace.cpp CSV (.csv or .csv.gz) of
v4_model_bench: the trace is cut into forwards at each start of the --marker kernel (the embedding
starts every forward) and the timed forward of the largest prompt is taken (timed_forward). Prints its
ops, GPU busy time and span, and the kernels with the most device time
(with their share of busy time).

usage: prefill_trace_report.py TRACE.csv[.gz] [--marker embedding] [--top 25]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_trace_report import busy_ns, read_trace, top_ops  # noqa: E402


def split_forwards(rows, marker):
    """rows cut into forwards at each start of the marker kernel."""
    starts = [i for i, r in enumerate(rows) if r[2] == "k" and marker in r[3]]
    if not starts:
        sys.exit(f"prefill trace: no '{marker}' kernel in the trace")
    bounds = starts + [len(rows)]
    return [rows[bounds[j]:bounds[j + 1]] for j in range(len(starts))]


def timed_forward(forwards):
    """The timed forward of the largest prompt: the last forward whose device busy time is within 10% of
    the most (v4_model_bench runs a warm-up of the same length just before it, whose first-use stalls and
    growth make its span the longest)."""
    busy = [busy_ns([(a, b) for a, b, _, _ in f]) for f in forwards]
    return [f for f, t in zip(forwards, busy) if t >= 0.9 * max(busy)][-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--marker", default="embedding")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    rows = read_trace(args.trace)
    forwards = split_forwards(rows, args.marker)
    fwd = timed_forward(forwards)
    busy = busy_ns([(a, b) for a, b, _, _ in fwd])
    span = fwd[-1][1] - fwd[0][0]
    kernels = sum(1 for r in fwd if r[2] == "k")
    print(f"forward {forwards.index(fwd) + 1} of {len(forwards)}: {len(fwd)} ops ({kernels} kernels), "
          f"GPU busy {busy / 1e6:.2f} ms, span {span / 1e6:.2f} ms")
    print("top device time (calls, ms, share of busy, name):")
    for name, cnt, ns in top_ops(fwd, args.top):
        print(f"  {cnt:5d} {ns / 1e6:8.2f} {100.0 * ns / busy:5.1f}%  {name[:110]}")


if __name__ == "__main__":
    main()
