#!/usr/bin/env python3
"""Load generator for an OpenAI-compatible server, in the style of `vllm bench serve`.

Sends `--num-prompts` streaming requests with random prompts of controlled length (token ids on
/v1/completions, so the input length is exact; words on /v1/chat/completions), arriving as a
Poisson process at `--request-rate` (inf: all at once) with at most `--max-concurrency` in flight,
and reports throughput and TTFT / TPOT / ITL / end-to-end latency percentiles, like vLLM.

  python3 tools/bench_serve.py --base-url http://127.0.0.1:8000 --num-prompts 200 \\
      --input-len 256 --output-len 64 --range-ratio 0.5 --request-rate 8 --max-concurrency 32

Only the Python standard library and `requests` are needed.
"""
import argparse
import json
import random
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import requests


class Result:
    def __init__(self):
        self.ok = False
        self.error = ""
        self.prompt_tokens = 0
        self.output_tokens = 0
        self.ttft = 0.0
        self.itls = []  # seconds between consecutive token-bearing chunks, per token
        self.latency = 0.0


def lengths(mean, ratio, count, rng):
    """count lengths drawn uniformly from [mean*(1-ratio), mean*(1+ratio)], at least 1."""
    low, high = max(1, int(mean * (1 - ratio))), max(1, int(mean * (1 + ratio)))
    return [rng.randint(low, high) for _ in range(count)]


def make_requests(args, rng):
    inputs = lengths(args.input_len, args.range_ratio, args.num_prompts, rng)
    outputs = lengths(args.output_len, args.range_ratio, args.num_prompts, rng)
    words = ["alpha", "beta", "gamma", "delta", "kernel", "tensor", "cache", "prefix", "stream", "token"]
    bodies = []
    for i, (n_in, n_out) in enumerate(zip(inputs, outputs)):
        body = {"model": args.model, "max_tokens": n_out, "stream": True, "temperature": args.temperature,
                "stream_options": {"include_usage": True}, "ignore_eos": args.ignore_eos, "seed": args.seed + i}
        if args.endpoint == "completions":
            body["prompt"] = [rng.randint(args.token_id_low, args.token_id_high) for _ in range(n_in)]
        else:
            body["messages"] = [{"role": "user", "content": " ".join(rng.choice(words) for _ in range(n_in))}]
            body["chat_template_kwargs"] = {"thinking": False}
        bodies.append(body)
    return bodies


def chunk_has_token(chunk, endpoint):
    for choice in chunk.get("choices", []):
        if endpoint == "completions":
            return True  # the server sends a completion chunk per step that made tokens
        delta = choice.get("delta", {})
        if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
            return True
    return False


def run_one(session, url, headers, body, endpoint, timeout):
    result = Result()
    start = time.perf_counter()
    last = None
    try:
        with session.post(url, json=body, headers=headers, stream=True, timeout=timeout) as reply:
            if reply.status_code != 200:
                result.error = f"HTTP {reply.status_code}: {reply.text[:200]}"
                return result
            for line in reply.iter_lines():
                if not line or not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    result.error = chunk["error"].get("message", "stream error")
                    return result
                now = time.perf_counter()
                if chunk.get("usage") and not chunk.get("choices"):
                    result.prompt_tokens = chunk["usage"]["prompt_tokens"]
                    result.output_tokens = chunk["usage"]["completion_tokens"]
                elif chunk_has_token(chunk, endpoint):
                    if last is None:
                        result.ttft = now - start
                    else:
                        result.itls.append(now - last)
                    last = now
        result.latency = time.perf_counter() - start
        result.ok = result.output_tokens > 0
        if not result.ok and not result.error:
            result.error = "no usage chunk or no tokens"
    except requests.RequestException as e:
        result.error = str(e)
    return result


def percentiles(values, ps):
    if not values:
        return {p: 0.0 for p in ps}
    ordered = sorted(values)
    return {p: ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] for p in ps}


def summarize(results, duration, ps):
    done = [r for r in results if r.ok]
    out = {"completed": len(done), "failed": len(results) - len(done), "duration_s": duration,
           "total_input_tokens": sum(r.prompt_tokens for r in done),
           "total_output_tokens": sum(r.output_tokens for r in done)}
    out["request_throughput"] = len(done) / duration if duration else 0.0
    out["output_throughput"] = out["total_output_tokens"] / duration if duration else 0.0
    out["total_token_throughput"] = (out["total_input_tokens"] + out["total_output_tokens"]) / duration if duration else 0.0
    series = {
        "ttft_ms": [r.ttft * 1000 for r in done],
        "tpot_ms": [(r.latency - r.ttft) / (r.output_tokens - 1) * 1000 for r in done if r.output_tokens > 1],
        "itl_ms": [x * 1000 for r in done for x in r.itls],
        "e2el_ms": [r.latency * 1000 for r in done],
    }
    for name, values in series.items():
        out[f"mean_{name}"] = statistics.fmean(values) if values else 0.0
        out[f"median_{name}"] = statistics.median(values) if values else 0.0
        for p, v in percentiles(values, ps).items():
            out[f"p{p:g}_{name}"] = v
    out["errors"] = sorted({r.error for r in results if not r.ok})[:5]
    return out


def print_table(s, ps):
    print("{:=^60}".format(" Serving Benchmark Result "))
    rows = [("Successful requests:", s["completed"]), ("Failed requests:", s["failed"]),
            ("Benchmark duration (s):", f"{s['duration_s']:.2f}"), ("Total input tokens:", s["total_input_tokens"]),
            ("Total generated tokens:", s["total_output_tokens"]),
            ("Request throughput (req/s):", f"{s['request_throughput']:.2f}"),
            ("Output token throughput (tok/s):", f"{s['output_throughput']:.2f}"),
            ("Total token throughput (tok/s):", f"{s['total_token_throughput']:.2f}")]
    for label, value in rows:
        print(f"{label:<40}{value:>20}")
    for name, title in (("ttft_ms", "Time to First Token"), ("tpot_ms", "Time per Output Token (excl. 1st token)"),
                        ("itl_ms", "Inter-token Latency"), ("e2el_ms", "End-to-end Latency")):
        print("{:-^60}".format(title))
        print(f"{'Mean ' + name.replace('_ms', ' (ms)') + ':':<40}{s['mean_' + name]:>20.2f}")
        print(f"{'Median ' + name.replace('_ms', ' (ms)') + ':':<40}{s['median_' + name]:>20.2f}")
        for p in ps:
            print(f"{f'P{p:g} ' + name.replace('_ms', ' (ms)') + ':':<40}{s[f'p{p:g}_{name}']:>20.2f}")
    print("=" * 60)
    for e in s["errors"]:
        print("error:", e, file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    parser.add_argument("--model", default=None, help="model name (default: the server's first model)")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--num-prompts", type=int, default=100)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--range-ratio", type=float, default=0.0, help="lengths uniform in mean*(1 +- ratio)")
    parser.add_argument("--request-rate", type=float, default=float("inf"), help="requests/s (Poisson); inf: all at once")
    parser.add_argument("--max-concurrency", type=int, default=None, help="requests in flight at most")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--token-id-low", type=int, default=1000, help="random prompt ids are drawn from [low, high]")
    parser.add_argument("--token-id-high", type=int, default=30000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--percentiles", default="50,90,99")
    parser.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    parser.add_argument("--result-json", default=None, help="also write the summary here")
    args = parser.parse_args()

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    if args.model is None:
        models = requests.get(args.base_url + "/v1/models", headers=headers, timeout=30).json()
        args.model = models["data"][0]["id"]
    rng = random.Random(args.seed)
    bodies = make_requests(args, rng)
    path = "/v1/completions" if args.endpoint == "completions" else "/v1/chat/completions"
    url = args.base_url + path
    concurrency = args.max_concurrency or args.num_prompts
    limiter = threading.Semaphore(concurrency)
    local = threading.local()

    def task(body):
        with limiter:
            if not hasattr(local, "session"):
                local.session = requests.Session()
            return run_one(local.session, url, headers, body, args.endpoint, args.timeout)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=min(concurrency, args.num_prompts)) as pool:
        futures = []
        for body in bodies:
            futures.append(pool.submit(task, body))
            if args.request_rate != float("inf"):
                time.sleep(rng.expovariate(args.request_rate))
        results = [f.result() for f in futures]
    duration = time.perf_counter() - start
    ps = [float(p) for p in args.percentiles.split(",")]
    summary = summarize(results, duration, ps)
    summary.update({"endpoint": args.endpoint, "num_prompts": args.num_prompts, "input_len": args.input_len,
                    "output_len": args.output_len, "range_ratio": args.range_ratio,
                    "request_rate": str(args.request_rate), "max_concurrency": args.max_concurrency})
    print_table(summary, ps)
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0 if summary["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
