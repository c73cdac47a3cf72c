"""Live progress: one redrawn line on a terminal, a plain log line every few seconds otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO = sys.stderr, every_s: float = 5.0) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.every_s = every_s
        self._last = 0.0

    def show(
        self,
        phase: str,
        connected: int,
        total: int,
        failed: int,
        rate_in: float,
        rate_out: float,
        p99_ms: float | None,
        remaining_s: float | None,
    ) -> None:
        p99 = f"{p99_ms:8.1f} ms" if p99_ms is not None else "       -   "
        left = f" {remaining_s:5.0f} s left" if remaining_s is not None else ""
        line = (
            f"[{phase:>7}] consumers {connected:>6}/{total} ({failed} failed)  "
            f"sent {rate_in:7.1f}/s  delivered {rate_out:9.1f}/s  p99 {p99}{left}"
        )
        if self.tty:
            self.stream.write("\r" + line + "\033[K")
            self.stream.flush()
        elif time.monotonic() - self._last >= self.every_s:
            self._last = time.monotonic()
            self.stream.write(line + "\n")
            self.stream.flush()

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        self.stream.flush()
