"""deepinfer: DeepSeek-V4 inference. The offline API mirrors vLLM's:

    from deepinfer import LLM, SamplingParams
    llm = LLM(model="/path/to/model")
    outputs = llm.generate(["Hello"], SamplingParams(temperature=0.8, max_tokens=32, seed=1))
    print(outputs[0].outputs[0].text)
"""
from ._core import DeepInferError, SamplingParams, __version__
from .llm import LLM
from .outputs import CompletionOutput, Logprob, RequestOutput

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "DeepInferError", "__version__"]
