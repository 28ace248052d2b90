"""What LLM.generate returns, shaped like vLLM's RequestOutput / CompletionOutput / Logprob."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class Logprob:
    """Log-probability of one token (log-softmax of the raw logits), its rank and its text."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    """One of the n completions of a prompt."""

    index: int
    text: Optional[str]  # None when the model has no tokenizer
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    # Per output token: {token id: Logprob} for the sampled token and the `logprobs` best ones.
    logprobs: Optional[List[Dict[int, Logprob]]]
    finish_reason: Optional[str] = None  # "stop" | "length" | "abort" | "error"
    stop_reason: Optional[str] = None  # the stop string that ended it

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """The result for one prompt, in input order."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput] = field(default_factory=list)
    finished: bool = True
