#!/usr/bin/env python3
"""GPU busy and idle time per engine step from a tools/gpu/kernel_trace.cpp CSV (.csv or .csv.gz).

A step is delimited by the model's embedding kernel (the first device op of every forward); for each
of the last --steps complete steps: the step's span (embedding to next embedding), the union of its
device intervals (kernels, copies), the idle rest, the device time of the sampling kernel, and the
longest gap inside the step. Prints the median step.

usage: engine_trace_gaps.py TRACE.csv[.gz] [--steps 8] [--marker embedding]
"""
import argparse
import csv
import gzip
import statistics

from kernel_trace_report import busy_ns  # same folder


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--marker", default="embedding", help="substring of the first kernel of every step")
    args = ap.parse_args()
    opener = gzip.open if args.trace.endswith(".gz") else open
    with opener(args.trace, "rt") as f:
        rows = sorted((int(r["start_ns"]), int(r["end_ns"]), r["name"]) for r in csv.DictReader(f))
    starts = [s for s, _, name in rows if args.marker in name]
    if len(starts) < 2:
        raise SystemExit(f"engine_trace_gaps: fewer than 2 '{args.marker}' kernels in the trace")
    starts = starts[-(args.steps + 1):]
    steps = []
    for a, b in zip(starts, starts[1:]):
        ops = [(s, e, n) for s, e, n in rows if a <= s < b]
        busy = busy_ns([(s, e) for s, e, _ in ops])
        sample = sum(e - s for s, e, n in ops if "sample_kernel" in n)
        gaps, end = [], ops[0][1]
        for s, e, _ in ops[1:]:
            gaps.append(s - end)
            end = max(end, e)
        gaps.append(b - end)
        steps.append((b - a, busy, sample, max(gaps), len(ops)))
    span, busy, sample, gap, count = sorted(steps)[len(steps) // 2]
    print(f"median of the last {len(steps)} steps: {span / 1e6:.3f} ms per step, GPU busy {busy / 1e6:.3f} ms, "
          f"idle {(span - busy) / 1e6:.3f} ms ({100.0 * (span - busy) / span:.0f}%), longest gap {gap / 1e3:.0f} us, "
          f"sampling kernel {sample / 1e3:.0f} us, {count} device ops")
    print("per step (ms): span / busy / idle: " +
          ", ".join(f"{s / 1e6:.2f}/{b / 1e6:.2f}/{(s - b) / 1e6:.2f}" for s, b, _, _, _ in steps))


if __name__ == "__main__":
    main()
