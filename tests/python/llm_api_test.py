#!/usr/bin/env python3
"""The Python offline API (`from deepinfer import LLM, SamplingParams`) on the tiny V4 model with the
real tokenizer: vLLM-style usage, outputs in input order, seeded sampling independent of the batch,
per-prompt parameters, logprobs, the progress bar, padded vocabulary ids, and bad input raised as
DeepInferError with the C++ message while the LLM stays usable.
"""
import json
import subprocess
import sys
import unittest

import support

support.require()
import deepinfer  # noqa: E402
from deepinfer import LLM, SamplingParams  # noqa: E402

LLM_ = None
PROMPTS = ["The capital of France is", "1, 2, 3,", "def add(a, b):", "Hello"]
TOKENIZER_VOCAB = 128815  # the DeepSeek tokenizer's ids; the model's 129,280 are padded past it


def setUpModule():
    global LLM_
    LLM_ = LLM(model=support.MODEL, max_model_len=256, max_num_seqs=16)


def greedy(max_tokens=8, **kw):
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, **kw)


class VllmStyleUsage(unittest.TestCase):
    def test_outputs_are_in_input_order_with_vllm_fields(self):
        outputs = LLM_.generate(PROMPTS, greedy(6), use_tqdm=False)
        self.assertEqual([o.prompt for o in outputs], PROMPTS)
        for prompt, out in zip(PROMPTS, outputs):
            self.assertIsInstance(out, deepinfer.RequestOutput)
            self.assertEqual(out.prompt_token_ids, LLM_.encode(prompt))
            self.assertEqual(len(out.outputs), 1)
            completion = out.outputs[0]
            self.assertEqual(len(completion.token_ids), 6)
            self.assertEqual(completion.finish_reason, "length")
            self.assertEqual(completion.text, LLM_.decode(completion.token_ids))
            self.assertIsNone(completion.logprobs)
        # Each prompt alone gives what it gave in the batch (greedy, batch invariant).
        alone = LLM_.generate(PROMPTS[2], greedy(6), use_tqdm=False)
        self.assertEqual(alone[0].outputs[0].token_ids, outputs[2].outputs[0].token_ids)

    def test_greedy_equals_the_cli(self):
        cli = subprocess.run([support.DEEPINFER_BIN, "generate", "--model", support.MODEL, "--prompt", PROMPTS[0],
                              "--max-tokens", "8", "--temperature", "0", "--ignore-eos", "--json"],
                             check=True, capture_output=True, text=True)
        want = json.loads(cli.stdout.strip().splitlines()[-1])
        got = LLM_.generate(PROMPTS[0], greedy(8), use_tqdm=False)[0]
        self.assertEqual(got.prompt_token_ids, want["prompt_ids"])
        self.assertEqual(got.outputs[0].token_ids, want["token_ids"])
        self.assertEqual(got.outputs[0].text, want["text"])

    def test_prompts_as_ids_dicts_and_single_values(self):
        ids = LLM_.encode(PROMPTS[0])
        by_text = LLM_.generate(PROMPTS[0], greedy(), use_tqdm=False)[0]
        for prompt in (ids, [ids], {"prompt_token_ids": ids}, [{"prompt": PROMPTS[0]}]):
            out = LLM_.generate(prompt, greedy(), use_tqdm=False)
            self.assertEqual(len(out), 1)
            self.assertEqual(out[0].outputs[0].token_ids, by_text.outputs[0].token_ids)
        self.assertIsNone(LLM_.generate(ids, greedy(), use_tqdm=False)[0].prompt)
        self.assertEqual(LLM_.generate([], greedy(), use_tqdm=False), [])

    def test_default_sampling_params_are_vllm_defaults(self):
        p = SamplingParams()
        self.assertEqual((p.n, p.temperature, p.top_p, p.top_k, p.max_tokens), (1, 1.0, 1.0, -1, None))
        p = SamplingParams(seed=7, stop=["\n"], logit_bias={5: 1.5}, so_args={"schema_type": "regex", "schema": "a+"})
        self.assertEqual(p.seq_seed, 7)
        self.assertEqual(p.stop, ["\n"])
        self.assertEqual(p.logit_bias, {"5": 1.5})
        self.assertEqual(p.so_args["schema"], "a+")
        self.assertIn("seq_seed", repr(p))


class Sampling(unittest.TestCase):
    def test_seeded_request_is_the_same_alone_and_in_a_batch(self):
        target = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=10, seed=1234, ignore_eos=True)
        alone = LLM_.generate("Once upon a time", target, use_tqdm=False)[0].outputs[0].token_ids
        others = [SamplingParams(temperature=t, top_k=k, max_tokens=m, seed=s, ignore_eos=True)
                  for t, k, m, s in [(0.0, -1, 5, 1), (1.3, 20, 12, 2), (0.7, -1, 3, 3), (1.0, 5, 9, 4)]]
        prompts = PROMPTS + ["Once upon a time"]
        batched = LLM_.generate(prompts, others + [target], use_tqdm=False)
        reordered = LLM_.generate(prompts[::-1], [target] + others[::-1], use_tqdm=False)
        self.assertEqual(batched[-1].outputs[0].token_ids, alone)
        self.assertEqual(reordered[0].outputs[0].token_ids, alone)
        self.assertEqual([len(o.outputs[0].token_ids) for o in batched[:-1]], [5, 12, 3, 9])

    def test_per_prompt_params_n_and_logprobs(self):
        params = [SamplingParams(temperature=0.8, max_tokens=4, n=3, seed=5, ignore_eos=True),
                  SamplingParams(temperature=0.0, max_tokens=7, logprobs=3, ignore_eos=True)]
        first, second = LLM_.generate(PROMPTS[:2], params, use_tqdm=False)
        self.assertEqual([c.index for c in first.outputs], [0, 1, 2])
        self.assertTrue(all(len(c.token_ids) == 4 for c in first.outputs))
        self.assertEqual(len(second.outputs[0].token_ids), 7)
        logprobs = second.outputs[0].logprobs
        self.assertEqual(len(logprobs), 7)
        total = 0.0
        for token, entry in zip(second.outputs[0].token_ids, logprobs):
            self.assertIn(token, entry)
            self.assertEqual(entry[token].rank, 1)  # greedy: the sampled token is the best one
            self.assertLessEqual(entry[token].logprob, 0.0)
            self.assertEqual(entry[token].decoded_token, LLM_.decode([token]))
            self.assertGreaterEqual(len(entry), 3)
            total += entry[token].logprob
        self.assertAlmostEqual(second.outputs[0].cumulative_logprob, total, places=4)

    def test_stop_strings_and_min_tokens(self):
        free = LLM_.generate(PROMPTS[1], greedy(12), use_tqdm=False)[0].outputs[0]
        stop = free.text[3:5]
        self.assertTrue(stop.strip(), f"no usable stop string in {free.text!r}")
        cut = LLM_.generate(PROMPTS[1], greedy(12, stop=[stop]), use_tqdm=False)[0].outputs[0]
        self.assertEqual(cut.finish_reason, "stop")
        self.assertEqual(cut.stop_reason, stop)
        self.assertEqual(cut.text, free.text[:free.text.find(stop)])

    def test_padded_vocabulary_ids_are_never_sampled(self):
        # A bias that would make a padded id (no token) the most likely one at every step.
        params = SamplingParams(temperature=1.0, max_tokens=16, seed=3, ignore_eos=True,
                                logit_bias={129000: 100.0, 129279: 100.0})
        out = LLM_.generate(PROMPTS, params, use_tqdm=False)
        for o in out:
            self.assertTrue(all(t < TOKENIZER_VOCAB for t in o.outputs[0].token_ids), o.outputs[0].token_ids)
        self.assertEqual(LLM_.decode([129000]), "")  # decoding stays robust
        with self.assertRaisesRegex(deepinfer.DeepInferError, "outside the model's vocabulary"):
            LLM_.decode([129280])


class Progress(unittest.TestCase):
    def test_tqdm_like_callable_sees_every_prompt(self):
        bars = []

        class FakeBar:
            def __init__(self, total, desc):
                self.total, self.desc, self.n, self.closed = total, desc, 0, False
                bars.append(self)

            def update(self, n):
                self.n += n

            def close(self):
                self.closed = True

        prompts = [f"prompt number {i}" for i in range(12)]
        LLM_.generate(prompts, greedy(2), use_tqdm=FakeBar)
        self.assertEqual(len(bars), 1)
        self.assertEqual((bars[0].total, bars[0].n, bars[0].closed), (12, 12, True))

    def test_plain_bar_without_tqdm(self):
        from deepinfer import progress
        import io
        err, sys.stderr = sys.stderr, io.StringIO()
        try:
            bar = progress._StderrBar(4, "Processed prompts")
            for _ in range(4):
                bar.update(1)
            bar.close()
            text = sys.stderr.getvalue()
        finally:
            sys.stderr = err
        self.assertIn("Processed prompts: 4/4 [" + "=" * 30 + "]", text)


class Errors(unittest.TestCase):
    def assert_usable(self):
        out = LLM_.generate(PROMPTS[0], greedy(4), use_tqdm=False)[0].outputs[0]
        self.assertEqual(out.token_ids, self.reference)

    @classmethod
    def setUpClass(cls):
        cls.reference = LLM_.generate(PROMPTS[0], greedy(4), use_tqdm=False)[0].outputs[0].token_ids

    def test_bad_sampling_fields_raise_when_written(self):
        cases = [({"temprature": 0.5}, "unknown field 'temprature'"),
                 ({"max_tokens": -1}, "max_tokens -1 must be >= 1"),
                 ({"top_p": 1.5}, r"top_p 1.5 must be in \(0, 1\]"),
                 ({"top_p": 0.0}, r"top_p 0 must be in \(0, 1\]"),
                 ({"temperature": "hot"}, "temperature must be a number"),
                 ({"logprobs": 50}, r"logprobs 50 must be in \[0, 20\]"),
                 ({"so_args": {"schema_type": "xml", "schema": "x"}}, "schema_type 'xml'")]
        for kwargs, message in cases:
            with self.subTest(kwargs=kwargs):
                with self.assertRaisesRegex(deepinfer.DeepInferError, message):
                    SamplingParams(**kwargs)
        self.assertTrue(issubclass(deepinfer.DeepInferError, ValueError))

    def test_bad_requests_raise_and_leave_the_llm_usable(self):
        too_long = list(range(300))
        cases = [(too_long, greedy(), "max_model_len is 256"),
                 ([1, 2, -5], greedy(), "prompt token -5 at index 2"),
                 ([1, LLM_.vocab_size], greedy(), f"prompt token {LLM_.vocab_size} at index 1"),
                 ([1, 2 ** 40], greedy(), "outside the vocabulary"),
                 (PROMPTS[0], greedy(stop_token_ids=[LLM_.vocab_size]), "stop_token_ids entry"),
                 (PROMPTS[0], greedy(so_args={"schema_type": "regex", "schema": "(a"}), "so_args")]
        for prompt, params, message in cases:
            with self.subTest(message=message):
                with self.assertRaisesRegex(deepinfer.DeepInferError, message):
                    LLM_.generate(prompt, params, use_tqdm=False)
                self.assert_usable()
        # Params changed after construction are checked again by the engine.
        for field, value, message in [("top_p", 2.0, "top_p 2"), ("max_tokens", -4, "max_tokens -4"),
                                      ("logprobs", 50, "logprobs 50")]:
            p = greedy()
            setattr(p, field, value)
            with self.assertRaisesRegex(deepinfer.DeepInferError, message):
                LLM_.generate(PROMPTS[0], p, use_tqdm=False)
            self.assert_usable()

    def test_one_bad_prompt_fails_the_call_before_any_work(self):
        with self.assertRaisesRegex(deepinfer.DeepInferError, "prompt 2:"):
            LLM_.generate(PROMPTS[:2] + [[1, -1]] + PROMPTS[2:], greedy(4), use_tqdm=False)
        with self.assertRaisesRegex(deepinfer.DeepInferError, "2 sampling params for 4 prompts"):
            LLM_.generate(PROMPTS, [greedy(), greedy()], use_tqdm=False)
        self.assert_usable()

    def test_an_exception_in_the_progress_bar_aborts_cleanly(self):
        class Boom:
            def __init__(self, total, desc):
                pass

            def update(self, n):
                raise KeyError("bar failed")

            def close(self):
                pass

        with self.assertRaises(KeyError):
            LLM_.generate([f"p{i}" for i in range(6)], greedy(8), use_tqdm=Boom)
        self.assert_usable()

    def test_bad_engine_arguments_and_model_dirs(self):
        with self.assertRaisesRegex(deepinfer.DeepInferError, "unknown engine argument 'tensor_parallel_size'"):
            LLM(model=support.MODEL, tensor_parallel_size=2)
        with self.assertRaisesRegex(deepinfer.DeepInferError, "device 'gpu': expected cpu, cuda or cuda:N"):
            LLM(model=support.MODEL, device="gpu")
        with self.assertRaisesRegex(deepinfer.DeepInferError, "load_format 'safetensors': expected auto or dummy"):
            LLM(model=support.MODEL, load_format="safetensors")
        with self.assertRaisesRegex(deepinfer.DeepInferError, "/nonexistent/model: no such model directory"):
            LLM(model="/nonexistent/model")
        with self.assertRaises(TypeError):
            LLM_.generate(3.5, greedy(), use_tqdm=False)


if __name__ == "__main__":
    unittest.main(verbosity=2)
