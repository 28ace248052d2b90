#!/usr/bin/env python3
"""Per phase of a kernel_trace.cpp CSV (.csv or .csv.gz) from a bench that runs several batch sizes in
one process (v4_model_bench --batches 1,32): the trace is cut into steps at each --marker kernel (the
embedding starts every forward), consecutive steps with the same kernel sequence form a phase (one
batch size's eager and graph steps), and for every phase of at least --steps steps the last --steps
(the graph replays) are summarised: kernels per step, median GPU busy time, and the top kernels.

usage: trace_phases.py TRACE.csv[.gz] [--steps 6] [--marker embedding] [--top 25]
"""
import argparse
import csv
import gzip
import re

from kernel_trace_report import busy_ns


def short_name(name):
    """The kernel's own identifier out of an Itanium-mangled nested name (<length><identifier> parts,
    template arguments dropped): the last part naming a kernel."""
    parts, i = [], name.find("_ZN") + 3
    while 0 < i < len(name):
        m = re.match(r"(\d+)", name[i:])
        if not m:
            break
        n = int(m.group(1))
        start = i + len(m.group(1))
        parts.append(name[start:start + n])
        i = start + n
    kernels = [p for p in parts if "kernel" in p or "mma" in p]
    return kernels[-1] if kernels else name[:60]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--marker", default="embedding")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    opener = gzip.open if args.trace.endswith(".gz") else open
    with opener(args.trace, "rt") as f:
        rows = sorted((int(r["start_ns"]), int(r["end_ns"]), r["kind"], r["name"]) for r in csv.DictReader(f))
    starts = [i for i, r in enumerate(rows) if r[2] == "k" and args.marker in r[3]]
    steps = [rows[a:b] for a, b in zip(starts, starts[1:])]
    phases = []
    for step in steps:
        names = tuple(r[3] for r in step if r[2] == "k")  # copies come and go (logits, staging)
        if phases and phases[-1][0] == names:
            phases[-1][1].append(step)
        else:
            phases.append((names, [step]))
    for names, group in phases:
        if len(group) < args.steps:
            continue
        tail = group[-args.steps:]
        busy = sorted(busy_ns([(a, b) for a, b, _, _ in s]) for s in tail)
        kernels = sum(1 for r in tail[0] if r[2] == "k")
        print(f"## phase of {len(group)} steps: {kernels} kernels per step, median GPU busy "
              f"{busy[len(busy) // 2] / 1e6:.3f} ms")
        per = {}
        for s in tail:
            for a, b, _, name in s:
                t = per.setdefault(short_name(name), [0, 0])
                t[0] += 1
                t[1] += b - a
        print("| kernel | calls | us per step | us per call |\n| --- | ---: | ---: | ---: |")
        for name, (cnt, ns) in sorted(per.items(), key=lambda kv: -kv[1][1])[:args.top]:
            calls = cnt / len(tail)
            print(f"| {name} | {calls:.0f} | {ns / len(tail) / 1e3:.1f} | {ns / cnt / 1e3:.2f} |")


if __name__ == "__main__":
    main()
