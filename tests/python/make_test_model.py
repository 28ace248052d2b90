#!/usr/bin/env python3
"""Writes the tiny V4 model the Python tests share (ctest fixture python.make_tiny_model).

  make_test_model.py DEEPINFER_BIN TOKENIZER_DIR OUTPUT_DIR

Without the tokenizer it writes nothing and exits 0; the tests then skip (77) on the missing model.
"""
import os
import shutil
import subprocess
import sys


def main() -> int:
    deepinfer, tokenizer, output = sys.argv[1:4]
    if not os.path.isfile(os.path.join(tokenizer, "tokenizer.json")):
        print(f"no tokenizer at {tokenizer}: the Python tests will skip")
        shutil.rmtree(output, ignore_errors=True)
        return 0
    if os.path.isfile(os.path.join(output, "config.json")) and os.path.isfile(os.path.join(output, "tokenizer.json")):
        print(f"tiny model already at {output}")
        return 0
    subprocess.run([deepinfer, "make-tiny", "--output", output, "--seed", "0", "--tokenizer", tokenizer], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
