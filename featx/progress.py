"""Progress: a tqdm bar on a terminal; off a terminal (a log file, CI), one log line every
`LOG_EVERY` seconds instead of a redraw per update written onto one endless line."""
from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("featx")
LOG_EVERY = 30.0


def progress(iterable=None, *, total: int | None = None, desc: str = "", unit: str = "it",
             enabled: bool = True):
    """A tqdm-like progress object (iterate, update(n), set_postfix_str, close, context manager)."""
    if not enabled:
        return _Lines(iterable, total, desc, unit, every=None)
    if sys.stderr.isatty():
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, dynamic_ncols=True)
    return _Lines(iterable, total, desc, unit, every=LOG_EVERY)


class _Lines:
    def __init__(self, iterable, total, desc, unit, every: float | None):
        self.iterable, self.desc, self.unit, self.every = iterable, desc, unit, every
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
        self.n, self.postfix = 0, ""
        self.start = self.last = time.monotonic()

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update(1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if self.every is not None and now - self.last >= self.every:
            self.last = now
            self._line(now)

    def set_postfix_str(self, text: str, refresh: bool = False) -> None:
        self.postfix = text

    def close(self) -> None:
        pass

    def _line(self, now: float) -> None:
        elapsed = now - self.start
        rate = self.n / elapsed if elapsed > 0 else 0.0
        done = f"{self.n:,}" + (f"/{self.total:,} ({self.n / self.total:.0%})" if self.total else "")
        eta = (f", about {(self.total - self.n) / rate:.0f} s left" if self.total and rate > 0 else "")
        log.info("%s: %s %s, %.1f %s/s%s%s", self.desc, done, self.unit, rate, self.unit, eta,
                 f", {self.postfix}" if self.postfix else "")
