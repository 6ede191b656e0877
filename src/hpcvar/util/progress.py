"""Progress lines for long steps, written to stderr so they land in Snakemake's rule logs."""

from __future__ import annotations

import sys
import time


class Progress:
    """``Progress("collate", total)``; call ``step()`` per item; prints at most every ``every_s``.

    ``total=0`` means unknown: the count is printed without a percentage."""

    def __init__(self, label: str, total: int, every_s: float = 2.0, stream=None):
        self.label, self.total, self.every_s = label, total, every_s
        self.stream = stream or sys.stderr
        self.done = 0
        self.t0 = self._last = time.monotonic()

    def step(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.every_s or self.done == self.total:
            self._last = now
            of = f"/{self.total} ({100 * self.done / self.total:.0f}%)" if self.total else ""
            print(f"{self.label}: {self.done}{of} {now - self.t0:.1f}s", file=self.stream, flush=True)
