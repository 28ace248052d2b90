#!/usr/bin/env python3
"""Summarises the tail of a kernel_trace.cpp CSV: the last --steps repetitions of the program's
final, periodic op sequence (a bench's timed decode steps). Prints, per step: device operations,
GPU busy time (union of their intervals), the GPU span from the first start to the last end, and
the idle share of that span (launch gaps and host work the GPU waited for).

usage: kernel_trace_report.py TRACE.csv --steps N [--wall-ms W]
"""
import argparse
import csv
import sys


def period_of(names, max_period=20000):
    """Smallest K such that the last K names repeat the K before them."""
    n = len(names)
    for k in range(1, min(max_period, n // 2) + 1):
        if names[n - k:] == names[n - 2 * k:n - k]:
            return k
    return None


def busy_ns(intervals):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--wall-ms", type=float, default=None, help="host wall time per step, for the table")
    args = ap.parse_args()
    rows = []
    with open(args.trace) as f:
        for r in csv.DictReader(f):
            rows.append((int(r["start_ns"]), int(r["end_ns"]), r["kind"], r["name"]))
    rows.sort()
    if not rows:
        sys.exit("kernel_trace_report: empty trace")
    names = [r[3] for r in rows]
    k = period_of(names)
    if k is None:
        sys.exit("kernel_trace_report: no periodic tail found")
    tail = rows[len(rows) - k * args.steps:]
    per_step = []
    for s in range(args.steps):
        step = tail[s * k:(s + 1) * k]
        span = step[-1][1] - step[0][0]
        per_step.append((busy_ns([(a, b) for a, b, _, _ in step]), span))
    per_step.sort(key=lambda t: t[1])
    busy, span = per_step[len(per_step) // 2]
    kernels = sum(1 for r in tail[:k] if r[2] == "k")
    copies = k - kernels
    print(f"ops per step: {k} ({kernels} kernels, {copies} memcpy/memset)")
    print(f"median step: GPU busy {busy / 1e6:.3f} ms, GPU span {span / 1e6:.3f} ms, "
          f"idle {100.0 * (span - busy) / span:.0f}% of the span")
    if args.wall_ms:
        print(f"host wall per step {args.wall_ms:.3f} ms: GPU busy is {100.0 * busy / 1e6 / args.wall_ms:.0f}% of it; "
              f"{(args.wall_ms - busy / 1e6) * 1e3 / k:.2f} us of non-GPU time per op")
    by_name = {}
    for a, b, _, name in tail[:k]:
        t = by_name.setdefault(name, [0, 0])
        t[0] += 1
        t[1] += b - a
    print("top device time per step (count, us, name):")
    for name, (cnt, ns) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"  {cnt:4d} {ns / 1e3:9.1f}  {name[:100]}")


if __name__ == "__main__":
    main()
