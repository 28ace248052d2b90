#!/usr/bin/env python3
"""Structured outputs with deepinfer's Python API: SamplingParams(so_args=...) constrains generation to
a JSON schema, a regular expression, a list of choices or an EBNF grammar. Outputs that the grammar
ended (finish_reason "stop") always match it, even from the random tiny model.

  python3 examples/structured_output.py [--model DIR]

Runs on $DEEPINFER_HF_MODEL_DIR when set, else on the bundled tiny model (see example_model.py).
"""
import argparse
import json

from deepinfer import LLM, SamplingParams

from example_model import add_model_args, model_dir

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "languages": {"type": "array", "items": {"enum": ["en", "fr", "zh"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(parser)
    args = parser.parse_args()
    llm = LLM(model=model_dir(args), max_model_len=1024)

    requests = {
        # disable_any_whitespace (vLLM's option): compact JSON, so a model cannot wander off into whitespace.
        "json": ("Describe a person as JSON: ",
                 {"schema_type": "json", "schema": PERSON_SCHEMA, "disable_any_whitespace": True}),
        "regex": ("An email address: ", {"schema_type": "regex", "schema": r"[a-z]{3,10}@example\.(com|org)"}),
        "choice": ("Is Paris in France? ", {"schema_type": "choice", "schema": ["yes", "no"]}),
        "ebnf": ("An arithmetic sum: ", {"schema_type": "ebnf", "schema": 'root ::= num (" + " num)*\nnum ::= [1-9][0-9]?'}),
    }
    prompts = [prompt for prompt, _ in requests.values()]
    params = [SamplingParams(temperature=0.7, max_tokens=128, seed=1, so_args=so_args) for _, so_args in requests.values()]
    for kind, output in zip(requests, llm.generate(prompts, params, use_tqdm=False)):
        completion = output.outputs[0]
        # A grammar that did not end within max_tokens leaves a valid but unfinished prefix: shown abbreviated.
        text = completion.text if completion.finish_reason == "stop" else repr(completion.text[:60]) + " ..."
        print(f"{kind:6} ({completion.finish_reason}): {text}")
        if kind == "json" and completion.finish_reason == "stop":
            print("        parsed:", json.loads(completion.text))


if __name__ == "__main__":
    main()
