#!/usr/bin/env python3
"""Structured outputs through the Python API (SamplingParams(so_args=...)) on the tiny random model
at temperature 1 over several seeds: every output that the grammar ended (finish_reason "stop")
validates with an independent checker — jsonschema for JSON schemas, re.fullmatch for regexes and
EBNF, membership for choices — and most of them do end.

JSON grammars allow any whitespace between tokens (as xgrammar's default), and a random model
loves whitespace tokens: either so_args.disable_any_whitespace, or a logit_bias of -100 on the
whitespace-only tokens (which checks that bias and grammar masks compose), lets the JSON close
within the budget.
"""
import json
import os
import re
import unittest

import support

(jsonschema,) = support.require("jsonschema")
from deepinfer import LLM, SamplingParams  # noqa: E402

LLM_ = None
OUTPUTS = {}  # case name -> completions over SEEDS, all cases generated in one batch
SEEDS = range(6)

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "admin": {"type": "boolean"},
    },
    "required": ["name", "age", "admin"],
    "additionalProperties": False,
}
NUMBERS = {"type": "array", "items": {"type": "integer", "minimum": -9, "maximum": 99}, "minItems": 1, "maxItems": 3}
EMAIL = r"[a-z]{2,6}@[a-z]{2,5}\.(com|org)"
CHOICES = ["yes", "no", "maybe later"]
SUM_GRAMMAR = 'root ::= "(" num ("+" num)* ")"\nnum ::= [1-9] [0-9]?'


def whitespace_token_ids():
    """Ids of the tokens that are only spaces, newlines and tabs (byte-level BPE spells them Ġ Ċ ĉ č)."""
    with open(os.path.join(support.MODEL, "tokenizer.json"), encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    return [i for token, i in vocab.items() if token and set(token) <= set("ĠĊĉč")]


def setUpModule():
    global LLM_
    LLM_ = LLM(model=support.MODEL, max_model_len=256, max_num_seqs=64)
    no_whitespace = {i: -100.0 for i in whitespace_token_ids()}
    assert len(no_whitespace) > 50, "whitespace tokens not found in tokenizer.json"
    cases = {
        "json_dict": ({"schema_type": "json", "schema": PERSON}, 64, no_whitespace),
        "json_text": ({"schema_type": "json", "schema": json.dumps(NUMBERS)}, 48, no_whitespace),
        "json_compact": ({"schema_type": "json", "schema": PERSON, "disable_any_whitespace": True}, 64, None),
        "regex": ({"schema_type": "regex", "schema": EMAIL}, 32, None),
        "choice": ({"schema_type": "choice", "schema": CHOICES}, 16, None),
        "ebnf": ({"schema_type": "ebnf", "schema": SUM_GRAMMAR}, 48, None),
    }
    params, names = [], []
    for name, (so_args, max_tokens, bias) in cases.items():
        for seed in SEEDS:
            params.append(SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=seed, so_args=so_args,
                                         logit_bias=bias))
            names.append(name)
    for name, out in zip(names, LLM_.generate(["Answer: "] * len(params), params, use_tqdm=False)):
        OUTPUTS.setdefault(name, []).append(out.outputs[0])


class StructuredOutputs(unittest.TestCase):
    def check(self, name, validate):
        outputs = OUTPUTS[name]
        stopped = [o for o in outputs if o.finish_reason == "stop"]
        # The random model wanders, but a grammar that can end does end within the budget mostly.
        self.assertGreaterEqual(len(stopped), len(outputs) // 2, [o.text for o in outputs])
        for o in stopped:
            with self.subTest(text=o.text):
                validate(o.text)

    def test_json_schema_given_as_a_dict(self):
        self.check("json_dict", lambda text: jsonschema.validate(json.loads(text), PERSON))

    def test_json_schema_given_as_text(self):
        self.check("json_text", lambda text: jsonschema.validate(json.loads(text), NUMBERS))

    def test_json_schema_without_whitespace(self):
        def validate(text):
            jsonschema.validate(json.loads(text), PERSON)
            self.assertNotIn("\n", text)
        self.check("json_compact", validate)

    def test_regex(self):
        self.check("regex", lambda text: self.assertIsNotNone(re.fullmatch(EMAIL, text), text))

    def test_choice(self):
        self.assertTrue(all(o.finish_reason == "stop" for o in OUTPUTS["choice"]))
        self.check("choice", lambda text: self.assertIn(text, CHOICES))

    def test_ebnf(self):
        self.check("ebnf", lambda text: self.assertIsNotNone(re.fullmatch(r"\([1-9][0-9]?(\+[1-9][0-9]?)*\)", text),
                                                              text))

    def test_constrained_and_free_requests_share_a_batch(self):
        choices = ["red", "green"]
        params = [SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True),
                  SamplingParams(temperature=1.0, max_tokens=8, seed=1, so_args={"schema_type": "choice",
                                                                               "schema": choices})]
        free, constrained = LLM_.generate(["Colour: ", "Colour: "], params, use_tqdm=False)
        self.assertEqual(len(free.outputs[0].token_ids), 6)
        self.assertIn(constrained.outputs[0].text, choices)
        alone = LLM_.generate("Colour: ", params[0], use_tqdm=False)[0]
        self.assertEqual(alone.outputs[0].token_ids, free.outputs[0].token_ids)


if __name__ == "__main__":
    unittest.main(verbosity=2)
