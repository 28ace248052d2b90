#!/usr/bin/env python3
"""Summarises the tail of a kernel_trace.cpp CSV (.csv or .csv.gz): the last --steps repetitions of
the program's final op sequence (a bench's timed decode steps). Steps are cut at each start of the
--marker kernel (default: the embedding, the first op of every forward) or, with --marker '', found
as the periodic tail of the op names. Prints the device operations per step, GPU busy time (union of
their intervals), the GPU span from the first start to the last end, the idle share of that span
(launch gaps and host work the GPU waited for), the kernels with the most device time per step, and the
kernels that add the most to the busy span (the honest ranking once kernels are chained: each waits for its
predecessor inside its own duration).

usage: kernel_trace_report.py TRACE.csv[.gz] --steps N [--marker embedding] [--wall-ms W] [--top 12]
"""
import argparse
import csv
import gzip
import re
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


def read_trace(path, host_calls=False):
    """(start_ns, end_ns, kind, name) of every recorded device op (and host runtime call, kind h, when
    host_calls), sorted by start."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return sorted((int(r["start_ns"]), int(r["end_ns"]), r["kind"], r["name"]) for r in csv.DictReader(f)
                      if host_calls or r["kind"] != "h")


def top_ops(ops, top):
    """(name, calls, device ns) of the `top` op names with the most device time in ops."""
    by_name = {}
    for a, b, _, name in ops:
        t = by_name.setdefault(name, [0, 0])
        t[0] += 1
        t[1] += b - a
    return [(name, cnt, ns) for name, (cnt, ns) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]]


def extension_ops(steps, top):
    """(name, calls per step, ns per step) of the `top` op names that extend the busy span the most: ops in
    end order, each charged the part of its interval past the latest end before it (the charges sum to the
    busy time), the median over the steps. With programmatic dependent launch a kernel starts early and
    waits, so its own duration overstates what it costs the step; this charges only what it adds."""
    per_step = []
    for step in steps:
        charges, cover = {}, None
        for a, b, _, name in sorted(step, key=lambda r: r[1]):
            charge = b - a if cover is None else max(0, b - max(a, cover))
            cover = b if cover is None else max(cover, b)
            t = charges.setdefault(name, [0, 0])
            t[0] += 1
            t[1] += charge
        per_step.append(charges)
    names = set().union(*per_step) if per_step else set()
    ranked = []
    for name in names:
        ns = sorted(c.get(name, [0, 0])[1] for c in per_step)
        ranked.append((name, per_step[0].get(name, [0, 0])[0], ns[len(ns) // 2]))
    ranked.sort(key=lambda t: -t[2])
    return ranked[:top]


def short_name(name):
    """A kernel's name without deepinfer's namespace and anonymous-namespace prefix."""
    m = re.match(r"_ZN9deepinfer.*?_cu_[0-9a-f]{8}(\d+)", name)
    if not m:
        return name
    length, rest = int(m.group(1)), name[m.end():]
    return rest[:length] + ("<" + rest[length:] + ">" if rest[length:].startswith("I") else "")


def split_steps(rows, marker, count):
    """The last `count` complete steps of rows (sorted by start), cut at the marker kernel or, without
    one, at the period of the op names."""
    if marker:
        starts = [i for i, r in enumerate(rows) if r[2] == "k" and marker in r[3]]
        if len(starts) < count + 1:
            sys.exit(f"kernel_trace_report: {len(starts)} '{marker}' kernels, need {count + 1}")
        return [rows[starts[j]:starts[j + 1]] for j in range(len(starts) - count - 1, len(starts) - 1)]
    k = period_of([r[3] for r in rows])
    if k is None:
        sys.exit("kernel_trace_report: no periodic tail found")
    tail = rows[len(rows) - k * count:]
    return [tail[s * k:(s + 1) * k] for s in range(count)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--marker", default="embedding",
                    help="substring of the first kernel of every step ('': find the periodic tail instead)")
    ap.add_argument("--top", type=int, default=12, help="kernels listed")
    ap.add_argument("--wall-ms", type=float, default=None, help="host wall time per step, for the table")
    args = ap.parse_args()
    rows = read_trace(args.trace)
    if not rows:
        sys.exit("kernel_trace_report: empty trace")
    steps = split_steps(rows, args.marker, args.steps)
    per_step = [(busy_ns([(a, b) for a, b, _, _ in step]), step[-1][1] - step[0][0]) for step in steps]
    per_step.sort(key=lambda t: t[1])
    busy, span = per_step[len(per_step) // 2]
    first = steps[0]
    k = len(first)
    kernels = sum(1 for r in first if r[2] == "k")
    copies = k - kernels
    print(f"ops per step: {k} ({kernels} kernels, {copies} memcpy/memset)")
    print(f"median step: GPU busy {busy / 1e6:.3f} ms, GPU span {span / 1e6:.3f} ms, "
          f"idle {100.0 * (span - busy) / span:.0f}% of the span")
    if args.wall_ms:
        print(f"host wall per step {args.wall_ms:.3f} ms: GPU busy is {100.0 * busy / 1e6 / args.wall_ms:.0f}% of it; "
              f"{(args.wall_ms - busy / 1e6) * 1e3 / k:.2f} us of non-GPU time per op")
    print("top device time per step (count, us, name):")
    for name, cnt, ns in top_ops(first, args.top):
        print(f"  {cnt:4d} {ns / 1e3:9.1f}  {name[:100]}")
    print("top time added to the busy span per step (count, us, name; chained kernels wait inside their own time):")
    for name, cnt, ns in extension_ops(steps, args.top):
        print(f"  {cnt:4d} {ns / 1e3:9.1f}  {short_name(name)[:100]}")


if __name__ == "__main__":
    main()
