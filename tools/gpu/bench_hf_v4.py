#!/usr/bin/env python3
"""HF transformers DeepseekV4ForCausalLM timed like bench/v4_model_bench: the same geometry and layer count,
random bf16 weights (HF has no FP8/FP4 kernels: it runs the released weights dequantised to bf16, which
moves 2-4x the bytes — say so next to the numbers), prefill tokens/s and decode step time per batch x context.

usage (GPU machine): python3 tools/gpu/bench_hf_v4.py --config tests/io/fixtures/v4_flash.hf.json \
          --num-layers 8 [--prefill 1024,8192] [--batches 1,8,32] [--contexts 1024] [--steps 4]
A row that does not fit prints OOM and the run goes on. Prints a markdown table."""
import argparse
import json
import time

import torch
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM


def ints(text):
    return [int(x) for x in text.split(",") if x]


def build(config_path, layers, device):
    raw = json.load(open(config_path))
    raw.pop("quantization_config", None)  # bf16 weights
    if layers > 0:
        raw["num_hidden_layers"] = layers
        for key in ("layer_types", "mlp_layer_types"):
            if key in raw:
                raw[key] = raw[key][:layers]
    raw["num_nextn_predict_layers"] = 0
    config = DeepseekV4Config(**{k: v for k, v in raw.items() if k != "architectures"})
    torch.manual_seed(0)
    with torch.device(device):
        model = DeepseekV4ForCausalLM(config).to(torch.bfloat16).eval()
    return model, config


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


@torch.inference_mode()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--num-layers", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--prefill", type=ints, default=[1024, 8192])
    ap.add_argument("--batches", type=ints, default=[1, 8, 32, 128, 256])
    ap.add_argument("--contexts", type=ints, default=[1024, 8192])
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    start = time.perf_counter()
    model, config = build(a.config, a.num_layers, a.device)
    sync(a.device)
    params = sum(p.numel() for p in model.parameters())
    print(f"# HF DeepseekV4ForCausalLM, {config.num_hidden_layers} layers, bf16 ({params * 2 / 1e9:.3g} GB), "
          f"{a.device}, built in {time.perf_counter() - start:.1f} s\n")
    vocab = config.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(1)

    print("| prefill tokens | time (s) | tokens/s |\n| ---: | ---: | ---: |")
    for p in a.prefill:
        ids = torch.randint(0, vocab, (1, p), generator=gen).to(a.device)
        try:
            model(ids[:, : min(p, 256)])  # warm-up
            sync(a.device)
            t0 = time.perf_counter()
            model(ids, logits_to_keep=1)
            sync(a.device)
            t = time.perf_counter() - t0
            print(f"| {p} | {t:.3f} | {p / t:.0f} |", flush=True)
        except torch.OutOfMemoryError:
            print(f"| {p} | OOM | |", flush=True)
        if a.device == "cuda":
            torch.cuda.empty_cache()

    print("\n| batch | context | step (ms) | tokens/s |\n| ---: | ---: | ---: | ---: |")
    for ctx in a.contexts:
        for b in a.batches:
            try:
                ids = torch.randint(0, vocab, (b, ctx), generator=gen).to(a.device)
                out = model(ids, use_cache=True, logits_to_keep=1)
                cache, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
                out = model(nxt, past_key_values=cache, use_cache=True)  # warm-up step
                cache, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
                sync(a.device)
                t0 = time.perf_counter()
                for _ in range(a.steps):
                    out = model(nxt, past_key_values=cache, use_cache=True)
                    cache, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
                sync(a.device)
                t = (time.perf_counter() - t0) / a.steps
                print(f"| {b} | {ctx} | {1e3 * t:.2f} | {b / t:.0f} |", flush=True)
            except torch.OutOfMemoryError:
                print(f"| {b} | {ctx} | OOM | |", flush=True)
            cache = out = None
            if a.device == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
