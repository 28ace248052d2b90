#!/usr/bin/env bash
# GPU machine: the executor on the GPU end to end, in one call. Builds the CLI and the executor tests,
# then: gpu_executor_cuda_test (dummy weights made on the GPU = host bytes, staged uploads, device
# checks, upload GB/s); greedy `generate` on a make-tiny model (exact) on cuda vs cpu (token ids must be
# equal); eval-logits cuda vs cpu; `serve --device cuda` answering a chat request; the clear errors
# (device out of range, weights too big, max_model_len beyond the cache); the real V4-Flash geometry cut
# to 16 layers with dummy weights made on the GPU (load time, memory plan line, a few greedy tokens);
# LLM(device="cuda") from Python when the bindings build. Logs in $OUT; a summary on stdout.
# usage (device tool, carry [".deps"]): bash tools/gpu/run_engine_cuda.sh
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-build/gpu/out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
BIN=build/gpu/src/cli/deepinfer
T=/tmp/deepinfer_engine_cuda; rm -rf $T; mkdir -p $T
fail=0
check() { if [ "$1" = ok ]; then echo "PASS $2"; else echo "FAIL $2"; fail=1; fi; }
start=$(date +%s)
bash tools/gpu/build.sh deepinfer gpu_executor_cuda_test memory_plan_test > $OUT/build.log 2>&1 \
  || { grep -E "error|Error" $OUT/build.log | head -30; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader

# 1. Device pieces and the upload throughput.
DEEPINFER_UPLOAD_BENCH_GB=8 timeout 120 build/gpu/tests/model/gpu_executor_cuda_test > $OUT/gpu_executor_test.log 2>&1
check $([ $? = 0 ] && echo ok) "gpu_executor_cuda_test"; grep -E "^upload|FAILED|PASSED|SKIPPED" $OUT/gpu_executor_test.log
timeout 30 build/gpu/tests/model/memory_plan_test > $OUT/memory_plan_test.log 2>&1; check $([ $? = 0 ] && echo ok) "memory_plan_test"

# 2. Tiny model (exact): greedy generate and logits, cuda vs cpu.
$BIN make-tiny -o $T/tiny --tokenizer tests/golden/v41/roles_plain/model > $OUT/make_tiny.log 2>&1
IDS=0,5,17,42,99,3,7,250,11,64
for dev in cpu cuda; do
  timeout 60 $BIN generate --model $T/tiny --mode exact --prompt-ids $IDS --max-tokens 48 --temperature 0 --ignore-eos \
    --json --device $dev > $OUT/generate_$dev.jsonl 2> $OUT/generate_$dev.log
  timeout 60 $BIN generate --model $T/tiny --mode exact --prompt "The quick brown fox" --max-tokens 16 --temperature 0 \
    --ignore-eos --json --device $dev >> $OUT/generate_$dev.jsonl 2>> $OUT/generate_$dev.log
  timeout 60 $BIN eval-logits --model $T/tiny --mode exact --ids $IDS --device $dev --output $T/logits_$dev.npy \
    > $OUT/eval_logits_$dev.log 2>&1
done
python3 - $OUT $T <<'PY' || fail=1
import json, sys, numpy as np
out, t = sys.argv[1:]
rows = {d: [json.loads(l) for l in open(f"{out}/generate_{d}.jsonl")] for d in ("cpu", "cuda")}
for i, (a, b) in enumerate(zip(rows["cpu"], rows["cuda"])):
    same = a.get("token_ids") == b.get("token_ids") and "token_ids" in a
    print(("PASS" if same else "FAIL"), f"greedy generate request {i}: cuda == cpu ({len(a.get('token_ids', []))} tokens)")
    if not same: print("  cpu ", a, "\n  cuda", b); sys.exit(1)
ref, got = np.load(f"{t}/logits_cpu.npy"), np.load(f"{t}/logits_cuda.npy")
err = float(np.abs(got - ref).max() / np.abs(ref).max())
print(("PASS" if err < 1e-4 else "FAIL"), f"eval-logits cuda vs cpu (exact): max|d|/max|ref| = {err:.3g}")
sys.exit(0 if err < 1e-4 else 1)
PY
grep -hE "weights:|memory plan" $OUT/generate_cuda.log | head -2

# 3. serve --device cuda answers a chat request.
PORT=18471
$BIN serve --model $T/tiny --served-model-name tiny --mode exact --device cuda --port $PORT --max-model-len 1024 > $OUT/serve.log 2>&1 &
SPID=$!
for i in $(seq 1 60); do grep -q "listening" $OUT/serve.log && break; sleep 0.5; done
python3 - $PORT > $OUT/serve_chat.json 2>&1 <<'PY'
import json, sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/chat/completions", method="POST",
    data=json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 12,
                     "temperature": 0}).encode(), headers={"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=30).read().decode())
PY
python3 -c "import json,sys; r=json.load(open('$OUT/serve_chat.json')); c=r['choices'][0]; print('PASS serve --device cuda chat:', c['finish_reason'], r['usage'])" \
  2>/dev/null || { echo "FAIL serve --device cuda chat"; tail -5 $OUT/serve.log $OUT/serve_chat.json; fail=1; }
kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
grep -E "memory plan" $OUT/serve.log | head -1

# 4. Clear errors, no CUDA aborts.
expect_error() {  # name, text, command...
  local name=$1 text=$2; shift 2
  "$@" > $T/err.out 2> $T/err.log; local rc=$?
  # A clean failure: an exit code from the error path (1, or CLI11's for flag values), never a signal.
  if [ $rc != 0 ] && [ $rc -lt 128 ] && grep -q -- "$text" $T/err.log; then echo "PASS error: $name"; else echo "FAIL error: $name (rc $rc)"; fail=1; fi
  grep -h "error" $T/err.log | head -1 | cut -c1-400
}
FLASH=tests/io/fixtures/v4_flash.release.json
expect_error "device out of range" "CUDA device 7 requested" $BIN generate --model $T/tiny --prompt-ids 1 --device cuda:7
expect_error "weights do not fit" "the weights need" $BIN generate --load-format dummy --model $FLASH --num-layers 16 \
  --device cuda --gpu-memory-utilization 0.1 --prompt-ids 1
expect_error "max_model_len beyond the cache" "lower --max-model-len" $BIN generate --model $T/tiny --device cuda \
  --max-model-len 100000000 --max-num-seqs 1 --cache-memory-bytes 16000000 --prompt-ids 1
expect_error "utilization out of range" "gpu-memory-utilization" $BIN generate --model $T/tiny --device cuda \
  --gpu-memory-utilization 1.5 --prompt-ids 1

# 5. Real V4-Flash geometry, 16 of 43 layers, dummy weights made on the GPU.
s=$(date +%s.%N)
timeout 240 $BIN generate --load-format dummy --model $FLASH --num-layers 16 --device cuda --prompt-ids 1,2,3,4,5,6,7,8 \
  --max-tokens 8 --temperature 0 --ignore-eos --json --max-model-len 8192 > $OUT/flash16.jsonl 2> $OUT/flash16.log
rc=$?; e=$(date +%s.%N)
check $([ $rc = 0 ] && echo ok) "flash 16 layers dummy generate (process $(python3 -c "print(f'{$e-$s:.1f}')") s)"
grep -hE "weights:|memory plan" $OUT/flash16.log; head -c 300 $OUT/flash16.jsonl; echo

# 6. Python LLM(device="cuda") when pybind11 is there.
if ninja -C build/gpu -t query deepinfer_python > /dev/null 2>&1 && ninja -C build/gpu deepinfer_python > $OUT/python_build.log 2>&1; then
  PYTHONPATH=build/gpu/python timeout 60 python3 - $T/tiny <<'PY' && echo "PASS python LLM(device='cuda')" || { echo "FAIL python LLM"; fail=1; }
import sys, deepinfer
a = deepinfer.LLM(sys.argv[1], device="cuda", mode="exact").generate([[0, 5, 17]], deepinfer.SamplingParams(max_tokens=8, temperature=0), use_tqdm=False)
b = deepinfer.LLM(sys.argv[1], device="cpu", mode="exact").generate([[0, 5, 17]], deepinfer.SamplingParams(max_tokens=8, temperature=0), use_tqdm=False)
print(a[0].outputs[0].token_ids, b[0].outputs[0].token_ids)
assert a[0].outputs[0].token_ids == b[0].outputs[0].token_ids
PY
else
  echo "SKIP python LLM(device='cuda'): bindings not built here (no pybind11 in .deps)"
fi
rm -rf $T
echo "total: $(( $(date +%s) - start )) s; $([ $fail = 0 ] && echo ALL PASS || echo SOME FAILED)"
exit $fail
