"""Progress bars for LLM.generate: tqdm when it is installed, else a plain one-line bar on stderr."""
from __future__ import annotations

import sys
import time
from typing import Callable, Optional, Union


class _StderrBar:
    """A minimal tqdm stand-in: `Processed prompts: 12/64 [====      ] 3.1 it/s`, redrawn in place."""

    def __init__(self, total: int, desc: str, width: int = 30):
        self.total, self.desc, self.width = total, desc, width
        self.n = 0
        self.start = time.monotonic()
        self.last_draw = 0.0
        self.drawn_n = -1
        self._draw()

    def update(self, count: int) -> None:
        self.n += count
        now = time.monotonic()
        if now - self.last_draw >= 0.1 or self.n >= self.total:
            self._draw()

    def _draw(self) -> None:
        self.last_draw, self.drawn_n = time.monotonic(), self.n
        filled = self.width * self.n // self.total if self.total else self.width
        rate = self.n / max(self.last_draw - self.start, 1e-9)
        bar = "=" * filled + " " * (self.width - filled)
        sys.stderr.write(f"\r{self.desc}: {self.n}/{self.total} [{bar}] {rate:.1f} it/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.drawn_n != self.n:
            self._draw()
        sys.stderr.write("\n")
        sys.stderr.flush()


def make_progress(total: int, use_tqdm: Union[bool, Callable], desc: str = "Processed prompts") -> Optional[object]:
    """A bar with update(n) and close(), or None when use_tqdm is False.

    use_tqdm may also be a tqdm-like class or function (vLLM accepts the same), called as
    use_tqdm(total=..., desc=...).
    """
    if not use_tqdm:
        return None
    if callable(use_tqdm):
        return use_tqdm(total=total, desc=desc)
    try:
        from tqdm.auto import tqdm  # noqa: PLC0415 (optional dependency)
    except ImportError:
        return _StderrBar(total, desc)
    return tqdm(total=total, desc=desc, dynamic_ncols=True)
