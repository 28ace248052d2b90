#!/usr/bin/env python3
"""The examples run as a user runs them: examples/offline_inference.py and examples/structured_output.py
on the fixture's tiny model through DEEPINFER_HF_MODEL_DIR, and offline_inference.py once without it,
where it makes the bundled tiny model itself with `deepinfer make-tiny`.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import support

support.require()
EXAMPLES = os.path.join(support.REPO, "examples")


def run_example(name, *args, model_env=True):
    env = dict(os.environ)
    env.pop("DEEPINFER_HF_MODEL_DIR", None)
    if model_env:
        env["DEEPINFER_HF_MODEL_DIR"] = support.MODEL
    env["DEEPINFER_TOKENIZER_DIR"] = support.MODEL  # make-tiny copied the tokenizer there
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args], env=env, capture_output=True,
                          text=True, timeout=300, check=True)


class Examples(unittest.TestCase):
    def test_offline_inference_on_the_model_of_the_environment(self):
        out = run_example("offline_inference.py").stdout
        self.assertEqual(len(re.findall(r"^Prompt: '.*', Generated text: ", out, re.M)), 4, out)
        self.assertEqual(len(re.findall(r"-> \[[01]\] ", out)), 3, out)
        self.assertIn("first-token candidates:", out)

    def test_offline_inference_makes_the_tiny_model_when_none_is_given(self):
        with tempfile.TemporaryDirectory() as tmp:
            tiny = os.path.join(tmp, "tiny")
            out = run_example("offline_inference.py", "--tiny-dir", tiny, "--deepinfer", support.DEEPINFER_BIN,
                              model_env=False).stdout
            self.assertTrue(os.path.isfile(os.path.join(tiny, "config.json")))
        self.assertEqual(len(re.findall(r"^Prompt: ", out, re.M)), 4, out)

    def test_structured_output(self):
        out = run_example("structured_output.py").stdout
        matches = re.findall(r"^(\w+) +\((\w+)\): (.*)$", out, re.M)
        lines = {kind: (reason, text) for kind, reason, text in matches}
        self.assertEqual(set(lines), {"json", "regex", "choice", "ebnf"}, out)
        self.assertIn(lines["choice"], [("stop", "yes"), ("stop", "no")])
        self.assertEqual(lines["json"][0], "stop", out)  # compact JSON closes within the budget
        self.assertIsInstance(json.loads(lines["json"][1]), dict)
        if lines["regex"][0] == "stop":
            self.assertRegex(lines["regex"][1], r"^[a-z]{3,10}@example\.(com|org)$")


if __name__ == "__main__":
    unittest.main(verbosity=2)
