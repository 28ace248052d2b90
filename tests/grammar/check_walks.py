#!/usr/bin/env python3
"""Runs grammar_walk over the constraint corpus and validates every finished walk independently of
our engine: jsonschema for JSON schemas, re.fullmatch for regexes, and a real parser per EBNF
grammar (json, ast, sqlite3, xml.etree). Fails on any engine-reported error (empty mask on a
valid prefix, allowed token rejected, rollback mismatch), any invalid output, or a grammar whose
walks never finish."""
import argparse
import ast
import json
import re
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema


def check_text(entry, text, base):
    check = entry["check"]
    if check == "jsonschema":
        schema = json.loads((base / entry["file"]).read_text())
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        validator.validate(json.loads(text))
    elif check == "regex":
        if not re.fullmatch(entry["text"], text, flags=re.ASCII):
            raise ValueError("no full match")
    elif check in ("json", "json_object"):
        if not isinstance(json.loads(text), dict):
            raise ValueError("not a JSON object")
    elif check == "python_expr":
        compile(ast.parse(text, mode="eval"), "<walk>", "eval")
    elif check == "python_literal":
        if not isinstance(ast.literal_eval(text), list):
            raise ValueError("not a list")
    elif check == "sqlite":
        db = sqlite3.connect(":memory:")
        db.execute("CREATE TABLE users (id INTEGER, name TEXT, age INTEGER, email TEXT)")
        db.execute("EXPLAIN " + text)
    elif check == "xml":
        ET.fromstring(text)
    elif check == "choice":
        if text not in json.loads(entry["text"]):
            raise ValueError("not one of the choices")
    else:
        raise ValueError(f"unknown check {check}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=400)
    args = ap.parse_args()
    manifest = Path(args.manifest)
    entries = {e["name"]: e for e in json.loads(manifest.read_text())}
    out = subprocess.run([args.driver, "--tokenizer", args.tokenizer, "--manifest", str(manifest),
                          "--seeds", str(args.seeds), "--max-tokens", str(args.max_tokens)],
                         capture_output=True, text=True, check=True).stdout
    passed, failed = 0, 0
    finished = {name: 0 for name in entries}
    for line in out.splitlines():
        record = json.loads(line)
        name = record["name"]
        if "compile_error" in record:
            print(f"FAIL {name}: compile error: {record['compile_error']}")
            failed += 1
            continue
        if "text_hex" not in record:
            continue
        if "error" in record:
            print(f"FAIL {name} seed {record['seed']}: {record['error']}")
            failed += 1
            continue
        if not record["finished"]:
            continue
        finished[name] += 1
        text = bytes.fromhex(record["text_hex"]).decode("utf-8")
        try:
            check_text(entries[name], text, manifest.parent)
            passed += 1
        except Exception as e:  # noqa: BLE001 - any validator failure is a test failure
            print(f"FAIL {name} seed {record['seed']}: {type(e).__name__}: {str(e)[:200]}\n  text: {text[:300]!r}")
            failed += 1
    for name, n in finished.items():
        if n == 0:
            print(f"FAIL {name}: no walk finished")
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
