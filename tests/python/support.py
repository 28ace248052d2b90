"""What the Python tests share: the tiny model of the ctest fixture and the deepinfer package.

Exits 77 (ctest: skipped) when the fixture wrote no model (no tokenizer) or a test package is missing.
"""
import os
import sys

SKIP = 77
MODEL = os.environ.get("DEEPINFER_TEST_MODEL", "")
DEEPINFER_BIN = os.environ.get("DEEPINFER_TEST_BIN", "")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def require(*modules):
    """Imports the given modules or skips the whole test program."""
    if not MODEL or not os.path.isfile(os.path.join(MODEL, "tokenizer.json")):
        print(f"SKIP: no tiny model with a tokenizer at '{MODEL}' (set DEEPINFER_TEST_MODEL; see CMakeLists.txt)")
        sys.exit(SKIP)
    loaded = []
    for name in modules:
        try:
            loaded.append(__import__(name))
        except ImportError as e:
            print(f"SKIP: {e} (run tools/install_deps.sh)")
            sys.exit(SKIP)
    return loaded
