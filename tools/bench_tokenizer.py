#!/usr/bin/env python3
"""Side-by-side tokenizer throughput: deepinfer vs HF tokenizers on one multi-megabyte mixed
corpus, in one run. Checks first that both produce identical ids on the whole corpus.

usage: python3 tools/bench_tokenizer.py [--build build/release] [--mb 8] [--repeats 5]
       [--tokenizer DIR] [--corpus-out PATH]
Needs: the built tokenizer_bench and deepinfer binaries, and the PyPI packages `tokenizers` and
`faker`. Single-threaded: HF's encode_batch with TOKENIZERS_PARALLELISM=false (a serial loop in
Rust, no Python per-document overhead) vs BM_EncodeSingleThread; all cores: HF's parallel
encode_batch (rayon) vs BM_EncodeBatchAllCores (ThreadPool). Each side is timed `repeats` times,
alternating, and the best run counts (the least disturbed by other load on the machine)."""

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import tokenizer_corpus  # noqa: E402


def build_corpus(tok_dir, megabytes):
    """Mixed documents (mostly prose in 24 locales and Python source, plus numbers, whitespace,
    emoji, special tokens, code-point sweeps, vocabulary mixes and repaired invalid UTF-8),
    generated with fresh seeds until the size is reached."""
    root = json.loads((Path(tok_dir) / "tokenizer.json").read_text(encoding="utf-8"))
    from tokenizers import decoders
    dec = decoders.ByteLevel()
    token_bytes = [dec.decode([s]).encode("utf-8") for s in list(root["model"]["vocab"])[::7]]
    added = [t["content"] for t in root["added_tokens"]]
    docs, size, seed = [], 0, 1
    while size < megabytes * 1e6:
        texts = tokenizer_corpus.bench_documents(seed, added, token_bytes)
        docs += texts
        size += sum(len(t.encode("utf-8")) for t in texts)
        seed += 1
    random.Random(0).shuffle(docs)
    return docs, size


def hf_encode_seconds(tok_dir, corpus_path, parallel):
    """Runs HF in a subprocess so TOKENIZERS_PARALLELISM takes effect from the start."""
    code = f"""
import json, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file({str(Path(tok_dir) / 'tokenizer.json')!r})
docs = [json.loads(l) for l in open({str(corpus_path)!r}, encoding='utf-8')]
tok.encode_batch(docs[:2000], add_special_tokens=False)
c = time.process_time(); t = time.perf_counter()
enc = tok.encode_batch(docs, add_special_tokens=False)
t = time.perf_counter() - t; c = time.process_time() - c
print(json.dumps({{"seconds": t, "cpu_seconds": c, "tokens": sum(len(e.ids) for e in enc)}}))
"""
    env = dict(os.environ, TOKENIZERS_PARALLELISM="true" if parallel else "false")
    if not parallel:
        env["RAYON_NUM_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def ours_encode_seconds(bench, tok_dir, corpus_path, name):
    out = subprocess.run([str(bench), f"--corpus={corpus_path}", f"--tokenizer={tok_dir}",
                          f"--benchmark_filter=^{name}", "--benchmark_format=json", "--benchmark_min_time=1"],
                         check=True, capture_output=True, text=True)
    result = json.loads(out.stdout)["benchmarks"][0]
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[result["time_unit"]]
    return {"seconds": result["real_time"] * scale, "cpu_seconds": result["cpu_time"] * scale}


def check_identical(cli, tok_dir, docs):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(Path(tok_dir) / "tokenizer.json"))
    expected = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
    inp = "".join(json.dumps(d) + "\n" for d in docs)
    out = subprocess.run([str(cli), "tokenize", "--tokenizer", str(tok_dir)], input=inp, capture_output=True,
                         text=True, check=True)
    ours = [json.loads(line) for line in out.stdout.splitlines()]
    bad = [i for i, (a, b) in enumerate(zip(ours, expected)) if a != b]
    if len(ours) != len(expected) or bad:
        raise SystemExit(f"ids differ from HF on {len(bad)} documents, e.g. {docs[bad[0]][:200]!r}")
    return sum(len(e) for e in expected)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=str(REPO / "build" / "release"))
    parser.add_argument("--tokenizer", default=str(REPO.parent / "shared" / "models" / "deepseek-tokenizer"))
    parser.add_argument("--mb", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--corpus-out", default=None)
    args = parser.parse_args()
    import tokenizers

    build = Path(args.build)
    bench, cli = build / "bench" / "tokenizer_bench", build / "src" / "cli" / "deepinfer"
    docs, size = build_corpus(args.tokenizer, args.mb)
    corpus_path = Path(args.corpus_out or tempfile.mkstemp(suffix=".jsonl")[1])
    corpus_path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    tokens = check_identical(cli, args.tokenizer, docs)
    print(f"corpus: {len(docs)} documents, {size / 1e6:.2f} MB, {tokens} tokens; ids identical to HF "
          f"tokenizers {tokenizers.__version__}")

    best = {}
    runs = [("hf_1", lambda: hf_encode_seconds(args.tokenizer, corpus_path, False)),
            ("ours_1", lambda: ours_encode_seconds(bench, args.tokenizer, corpus_path, "BM_EncodeSingleThread")),
            ("hf_all", lambda: hf_encode_seconds(args.tokenizer, corpus_path, True)),
            ("ours_all", lambda: ours_encode_seconds(bench, args.tokenizer, corpus_path, "BM_EncodeBatchAllCores"))]
    for _ in range(args.repeats):
        for name, run in runs:
            result = run()
            for kind in ("seconds", "cpu_seconds"):
                best[name + kind] = min(best.get(name + kind, 1e9), result[kind])
    mbps = {k: size / 1e6 / best[k + "seconds"] for k, _ in runs}
    cpu_mbps = {k: size / 1e6 / best[k + "cpu_seconds"] for k in ("hf_1", "ours_1")}
    cpu = platform.processor() or "unknown cpu"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"machine: {cpu}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%d')}")
    print("| encode | HF tokenizers | deepinfer | ratio |")
    print("|---|---|---|---|")
    print(f"| single thread | {mbps['hf_1']:.2f} MB/s | {mbps['ours_1']:.2f} MB/s | {mbps['ours_1'] / mbps['hf_1']:.2f}x |")
    print(f"| single thread, per CPU second | {cpu_mbps['hf_1']:.2f} MB/s | {cpu_mbps['ours_1']:.2f} MB/s | "
          f"{cpu_mbps['ours_1'] / cpu_mbps['hf_1']:.2f}x |")
    print(f"| all cores ({os.cpu_count()}) | {mbps['hf_all']:.2f} MB/s | {mbps['ours_all']:.2f} MB/s | "
          f"{mbps['ours_all'] / mbps['hf_all']:.2f}x |")
    print(f"tokens/s single thread: HF {tokens / best['hf_1seconds'] / 1e6:.2f} M, "
          f"deepinfer {tokens / best['ours_1seconds'] / 1e6:.2f} M")


if __name__ == "__main__":
    main()
