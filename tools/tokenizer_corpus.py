"""Builds the mixed multilingual test corpus for the tokenizer: prose in many scripts, code, emoji
(ZWJ, flags, keycaps, tags), numbers, whitespace runs, every added token in context, code-point
sweeps, random vocabulary concatenations and invalid UTF-8. Deterministic for a given seed.
Used by tools/make_tokenizer_fixtures.py (exactness fixtures) and tools/bench_tokenizer.py.
Needs the PyPI package `faker` (prose in many locales)."""

import json
import random
import sysconfig
from pathlib import Path

LOCALES = ["zh_CN", "zh_TW", "ja_JP", "ko_KR", "ar_AA", "ru_RU", "uk_UA", "el_GR", "he_IL", "hi_IN", "th_TH",
           "fa_IR", "hy_AM", "ka_GE", "bn_BD", "vi_VN", "tr_TR", "de_DE", "fr_FR", "es_ES", "pl_PL", "cs_CZ",
           "ta_IN", "en_US"]

EMOJI = [
    "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🏴‍☠️", "👁️‍🗨️", "🧑🏿‍🤝‍🧑🏻", "❤️‍🔥", "🫱🏼‍🫲🏾", "👩‍❤️‍💋‍👨", "🐻‍❄️",
    "🇯🇵", "🇺🇸", "🇨🇳", "🇰🇷", "🇺🇦", "1️⃣", "#️⃣", "*️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🏴󠁧󠁢󠁷󠁬󠁳󠁿", "☺️", "✌🏻", "👍🏿", "😀", "🤖",
    "🫠", "🦀", "🐍", "🚀", "🎉", "🔥", "💯", "🧠", "🌍", "⭐", "☕", "🍣", "🥟", "🀄", "🃏", "♻️", "⚠️",
]

CODE_SNIPPETS = [
    'def f(x):\n    return {"a": [1, 2, 3], \'b\': x ** 2}  # comment\n',
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "#include <vector>\nstd::vector<std::string> v{\"α\", \"β\"};\nauto it = v.begin();\n",
    "SELECT id, name FROM users WHERE created_at >= '2024-01-01' AND status <> 'deleted';\n",
    "<div class=\"container\"><p>Hello&nbsp;<b>world</b></p><!-- note --></div>\n",
    "$ git commit -m \"fix: handle \\r\\n line endings\" && make -j$(nproc) 2>&1 | tee log.txt\n",
    "fn main() { let s: &str = \"héllo\"; println!(\"{s:?} {}\", s.len()); }\n",
    "const re = /^[\\w.-]+@[\\w-]+\\.[a-z]{2,}$/i; x ??= y?.z ?? 0;\n",
    "| col1 | col2 |\n|------|------|\n| `a`  | **b** |\n",
    "\\begin{equation} E = mc^2 \\quad \\sum_{i=1}^{n} x_i^2 \\end{equation}\n",
    "\tif err != nil {\n\t\treturn fmt.Errorf(\"open %q: %w\", path, err)\n\t}\n",
    "x = 0x1F_FF; y = 1e-10; z = 3.14159265358979323846; w = -0b1010\n",
]


def stdlib_code(rng, count):
    """Chunks of real Python source from the standard library."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in (lib / "json").glob("*.py")) + sorted((lib / "email").glob("*.py"))[:6]
    chunks = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for start in range(0, len(text), 1500):
            chunks.append(text[start:start + 1500])
    rng.shuffle(chunks)
    return chunks[:count]


def prose(rng, per_locale):
    from faker import Faker
    out = []
    for locale in LOCALES:
        fake = Faker(locale)
        fake.seed_instance(rng.randrange(1 << 30))
        for _ in range(per_locale):
            kind = rng.randrange(4)
            if kind == 0:
                out.append(fake.text(max_nb_chars=rng.choice([60, 200, 600])))
            elif kind == 1:
                out.append(f"{fake.name()}\n{fake.address()}\n{fake.phone_number()}")
            elif kind == 2:
                out.append(f"{fake.company()}: {fake.catch_phrase()}. {fake.sentence()}")
            else:
                out.append("\n\n".join(fake.paragraphs(nb=rng.randrange(1, 4))))
    return out


def numbers(rng, count):
    digit_sets = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "０１２３４５６７８９", "০১২৩৪৫৬৭৮৯"]
    out = []
    for _ in range(count):
        digits = rng.choice(digit_sets) if rng.random() < 0.3 else "0123456789"
        n = "".join(rng.choice(digits) for _ in range(rng.randrange(1, 30)))
        form = rng.randrange(6)
        if form == 0:
            out.append(n)
        elif form == 1:
            out.append(f"{n}.{rng.randrange(10**6)} and {rng.randrange(-10**9, 10**9):,}")
        elif form == 2:
            out.append(f"+1 ({rng.randrange(100, 999)}) {rng.randrange(100, 999)}-{rng.randrange(1000, 9999)}")
        elif form == 3:
            out.append(f"2026-11-29T{rng.randrange(24):02d}:{rng.randrange(60):02d}:00Z v{n[:3]}.{n[3:5]}")
        elif form == 4:
            out.append(f"x²+y³=z¹ ½ ¾ Ⅻ ⅷ ⑴ ① {n}%")
        else:
            out.append(f"价格：{n}元，共{rng.randrange(100)}件，第{rng.randrange(10)}页")
    return out


def whitespace(rng, count):
    pieces = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u2003", "\u200b", "\x0b", "\x0c",
              "\u0085", "\u180e"]
    words = ["a", "hello", "世界", "نص", "слово", "1", "23456", "!", "?!", "->", "😀", "\u0301"]
    out = ["", " ", "\n", "\t\t", " " * 17, "\n" * 9, " \n \n ", "\r\n\r\n", "a  ", "  a", "a \n b", "x\t\ty"]
    for _ in range(count):
        s = ""
        for _ in range(rng.randrange(1, 12)):
            if rng.random() < 0.5:
                s += rng.choice(pieces) * rng.randrange(1, 20)
            else:
                s += rng.choice(words)
        out.append(s)
    return out


def special_token_cases(rng, added):
    out = []
    for tok in added:
        out.append(tok)
        out.append(f"x{tok}y")
        out.append(f" {tok} ")
    contents = added[:]
    for _ in range(300):
        parts = []
        for _ in range(rng.randrange(1, 8)):
            r = rng.random()
            if r < 0.4:
                parts.append(rng.choice(contents))
            elif r < 0.55:
                tok = rng.choice(contents)
                parts.append(tok[: rng.randrange(1, len(tok))])  # a prefix: must not match
            elif r < 0.7:
                parts.append(rng.choice([" ", "\n", "", "  "]))
            else:
                parts.append(rng.choice(["Hello", "你好", "print(1)", "😀", "｜", "<", ">", "▁", "<｜", "｜>"]))
        out.append("".join(parts))
    return out


def emoji_cases(rng, count):
    out = []
    for _ in range(count):
        parts = [rng.choice(EMOJI) for _ in range(rng.randrange(1, 10))]
        sep = rng.choice(["", " ", "\n", "a", "，"])
        out.append(sep.join(parts))
    return out


def codepoint_sweep(rng, chunk_count, extra_code_points):
    """Chunks of consecutive code points in a few contexts; extra_code_points always included."""
    contexts = ["{c}", "a{c}b", " {c}{c}", "{c} x", "1{c}2", "\n{c}\n", "! {c}a", "中{c}"]
    starts = sorted(rng.sample(range(0, 0x110000, 32), chunk_count))
    out = []
    for start in starts:
        cps = [c for c in range(start, start + 32) if not 0xD800 <= c < 0xE000]
        if cps:
            out.append("".join(rng.choice(contexts).format(c=chr(c)) for c in cps))
    extra = sorted(extra_code_points)
    for i in range(0, len(extra), 32):
        ctx = contexts[(i // 32) % len(contexts)]
        out.append("".join(ctx.format(c=chr(c)) for c in extra[i:i + 32]))
    return out


def vocab_mix(rng, token_bytes, count):
    """Concatenations of random vocabulary entries (decoded), stressing merge order."""
    out = []
    for _ in range(count):
        raw = b"".join(rng.choice(token_bytes) for _ in range(rng.randrange(1, 25)))
        out.append(raw.decode("utf-8", errors="replace"))
    return out


def long_cases():
    return ["a" * 3000, " " * 2000, "1" * 500, "\n" * 300, "ab" * 1000, "中" * 700, "😀" * 300,
            "!" * 400, "\t " * 500, ("The quick brown fox jumps over the lazy dog. " * 60).strip(),
            json.dumps({"k%d" % i: [i, "v" * (i % 7), None, True] for i in range(150)})]


def invalid_utf8(rng, valid_texts, count):
    """Raw byte strings that are not valid UTF-8."""
    fixed = [b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80\x80abc", b"abc\xe4\xb8",
             b"\xe4\xb8\xe4\xb8\xad", b"\xf0\x9f\x98", b"\xf0\x9f\x98a\xf0\x9f\x98\x80", b"<\xef\xbd\x9cUser\xef\xbd\x9c>\xff",
             b"\xc3\x28", b"\xa0\xa1", b"\xe2\x28\xa1", b"\xe2\x82\x28", b"\xf0\x28\x8c\xbc", b"\xf8\xa1\xa1\xa1\xa1",
             b"\xfc\xa1\xa1\xa1\xa1\xa1", b"1\xff2\xfe3", b" \x80 \x81 "]
    out = list(fixed)
    for _ in range(count):
        base = bytearray(rng.choice(valid_texts).encode("utf-8")[:300] or b"x")
        for _ in range(rng.randrange(1, 6)):
            pos = rng.randrange(len(base) + 1)
            if rng.random() < 0.5:
                base[pos:pos] = bytes([rng.randrange(0x80, 0x100)])
            elif pos < len(base):
                del base[pos]
        if base.decode("utf-8", errors="replace").encode("utf-8") != bytes(base):
            out.append(bytes(base))
    for _ in range(count // 4):
        out.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))))
    return [b for b in out if b.decode("utf-8", errors="replace").encode("utf-8") != b]


def build_corpus(seed, added_contents, token_bytes, extra_code_points, scale=1):
    """Returns (texts, invalid_byte_strings)."""
    rng = random.Random(seed)
    texts = []
    texts += prose(rng, 6 * scale)
    texts += stdlib_code(rng, 40 * scale) + CODE_SNIPPETS
    texts += numbers(rng, 150 * scale)
    texts += whitespace(rng, 150 * scale)
    texts += emoji_cases(rng, 80 * scale)
    texts += special_token_cases(rng, added_contents)
    texts += codepoint_sweep(rng, 300 * scale, extra_code_points)
    texts += vocab_mix(rng, token_bytes, 300 * scale)
    texts += long_cases()
    invalid = invalid_utf8(rng, texts, 120 * scale)
    return texts, invalid


def bench_documents(seed, added_contents, token_bytes):
    """Documents for throughput runs: mostly prose and source code (what a server tokenizes), with
    one share of the exotic cases above. Returns a list of str (invalid bytes already replaced)."""
    from faker import Faker
    rng = random.Random(seed)
    docs = []
    for locale in LOCALES:
        fake = Faker(locale)
        fake.seed_instance(rng.randrange(1 << 30))
        for _ in range(12):
            docs.append("\n\n".join(fake.paragraphs(nb=rng.randrange(3, 9))))
    lib = Path(sysconfig.get_paths()["stdlib"])
    sources = sorted(lib.glob("*.py"))
    for path in rng.sample(sources, 12):
        text = path.read_text(encoding="utf-8", errors="replace")
        start = rng.randrange(max(1, len(text) - 20000))
        docs.append(text[start:start + 20000])
    texts, invalid = build_corpus(seed, added_contents, token_bytes, set(), scale=1)
    docs += rng.sample(texts, len(texts) // 4)
    docs += [b.decode("utf-8", errors="replace") for b in invalid[:50]]
    rng.shuffle(docs)
    return docs
