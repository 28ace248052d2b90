"""deepinfer.LLM: offline batched generation in the vLLM style over the C++ engine (deepinfer._core)."""
from __future__ import annotations

import numbers
import os
from typing import Callable, Dict, List, Optional, Sequence, Union

from . import _core
from .outputs import CompletionOutput, Logprob, RequestOutput
from .progress import make_progress

SamplingParams = _core.SamplingParams

# A prompt: text, token ids, or vLLM's {"prompt": text} / {"prompt_token_ids": ids}.
PromptType = Union[str, Sequence[int], Dict[str, object]]


def _is_token_ids(value: object) -> bool:
    return (isinstance(value, (list, tuple)) and len(value) > 0 and
            all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value))


def _one_prompt(prompt: PromptType, index: int) -> Union[str, List[int]]:
    if isinstance(prompt, dict):
        if "prompt_token_ids" in prompt:
            return list(prompt["prompt_token_ids"])  # type: ignore[arg-type]
        if "prompt" in prompt:
            return prompt["prompt"]  # type: ignore[return-value]
        raise _core.DeepInferError(f"prompt {index}: a dict prompt needs 'prompt' or 'prompt_token_ids'")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)):
        return list(prompt)
    raise TypeError(f"prompt {index}: expected str, a list of token ids or a dict, got {type(prompt).__name__}")


def _prompt_list(prompts: Union[PromptType, Sequence[PromptType]]) -> List[Union[str, List[int]]]:
    """One prompt or a list of them; a flat list of ints is one prompt of token ids."""
    if isinstance(prompts, (str, dict)) or _is_token_ids(prompts):
        return [_one_prompt(prompts, 0)]  # type: ignore[arg-type]
    return [_one_prompt(p, i) for i, p in enumerate(prompts)]  # type: ignore[union-attr]


class LLM:
    """A model loaded once for many generate() calls.

    LLM(model=DIR, **engine_args): engine_args are the C++ LLMOptions under their names (device:
    "cpu", "cuda" or "cuda:N"; mode, tokenizer, max_num_seqs, max_num_batched_tokens, max_model_len,
    num_cache_pages, gpu_memory_utilization (GPU, default 0.9), cache_memory_bytes, load_format
    ("auto" | "dummy"), num_layers, load_threads, show_progress, enable_prefix_caching, seed,
    worker_threads); an unknown one is an error.
    Errors are deepinfer.DeepInferError (a ValueError) carrying the C++ message.
    """

    def __init__(self, model: Union[str, os.PathLike], **engine_args):
        self.model = os.fspath(model)
        self._engine = _core._LLM(self.model, **engine_args)
        self._next_request = 0

    @property
    def vocab_size(self) -> int:
        return self._engine.vocab_size

    def encode(self, text: str) -> List[int]:
        return self._engine.encode(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._engine.decode(list(token_ids))

    def generate(self,
                 prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
                 use_tqdm: Union[bool, Callable] = True) -> List[RequestOutput]:
        """Generates for every prompt; outputs in input order.

        sampling_params: one for all prompts, or one per prompt (default: SamplingParams()).
        A bad prompt or parameter raises DeepInferError before any model work; the LLM stays
        usable. The GIL is released while the engine runs; Ctrl-C stops the call cleanly.
        """
        batch = _prompt_list(prompts)
        if sampling_params is None:
            params = [SamplingParams()]
        elif isinstance(sampling_params, SamplingParams):
            params = [sampling_params]
        else:
            params = list(sampling_params)
        if not batch:
            return []
        bar = make_progress(len(batch), use_tqdm)
        shown = [0]

        def on_progress(done: int, total: int) -> None:
            if bar is not None and done > shown[0]:
                bar.update(done - shown[0])
                shown[0] = done

        try:
            results = self._engine.generate(batch, params, on_progress)
        finally:
            if bar is not None:
                bar.close()
        return [self._request_output(r) for r in results]

    def _request_output(self, raw: dict) -> RequestOutput:
        request_id = str(self._next_request)
        self._next_request += 1
        outputs = [self._completion_output(o) for o in raw["outputs"]]
        return RequestOutput(request_id, raw["prompt"], raw["prompt_token_ids"], outputs)

    def _completion_output(self, raw: dict) -> CompletionOutput:
        logprobs, cumulative = None, None
        if raw["logprobs"] is not None:
            logprobs, cumulative = [], 0.0
            for token, logprob, rank, top in raw["logprobs"]:
                entry = {token: Logprob(logprob, rank, self._token_text(token))}
                for k, (top_token, top_logprob) in enumerate(top):
                    if top_token not in entry:
                        entry[top_token] = Logprob(top_logprob, k + 1, self._token_text(top_token))
                logprobs.append(entry)
                cumulative += logprob
        return CompletionOutput(raw["index"], raw["text"], raw["token_ids"], cumulative, logprobs,
                                raw["finish_reason"] or None, raw["stop_reason"])

    def _token_text(self, token: int) -> Optional[str]:
        return self._engine.decode([token]) if self._engine.has_tokenizer else None
