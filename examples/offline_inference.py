#!/usr/bin/env python3
"""Offline batched inference with deepinfer's Python API, in the vLLM style.

  python3 examples/offline_inference.py [--model DIR]

Runs on $DEEPINFER_HF_MODEL_DIR when set (a DeepSeek-V4 checkpoint directory), else on the bundled
tiny model (see example_model.py). Needs the deepinfer package (`pip install .`, or PYTHONPATH set to
<build>/python).
"""
import argparse

from deepinfer import LLM, SamplingParams

from example_model import add_model_args, model_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(parser)
    args = parser.parse_args()

    prompts = [
        "Hello, my name is",
        "The president of the United States is",
        "The capital of France is",
        "The future of AI is",
    ]
    # One SamplingParams for every prompt; a seed makes a request's tokens independent of the batch.
    sampling_params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=32, seed=0)

    llm = LLM(model=model_dir(args), max_model_len=1024)
    outputs = llm.generate(prompts, sampling_params)
    for output in outputs:
        print(f"Prompt: {output.prompt!r}, Generated text: {output.outputs[0].text!r}")

    # Per-prompt parameters, token-id prompts, several completions and log-probabilities.
    per_prompt = [
        SamplingParams(temperature=0.0, max_tokens=16),
        SamplingParams(temperature=1.0, max_tokens=8, n=2, seed=7, logprobs=2),
    ]
    ids = llm.encode("def fibonacci(n):")
    for output in llm.generate(["Greedy: the sky is", ids], per_prompt, use_tqdm=False):
        for completion in output.outputs:
            print(f"{output.prompt_token_ids[:6]}... -> [{completion.index}] {completion.text!r} "
                  f"({len(completion.token_ids)} tokens, {completion.finish_reason})")
            if completion.logprobs:
                first = completion.logprobs[0]
                print("  first-token candidates:",
                      {lp.decoded_token: round(lp.logprob, 3) for lp in first.values()})


if __name__ == "__main__":
    main()
