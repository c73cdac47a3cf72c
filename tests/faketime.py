"""A process with its wall clock ahead, through libfaketime preloaded by the test itself.

Not through Debian's `faketime` wrapper: the wrapper makes a POSIX semaphore and a shared
memory object named after its own PID (`/dev/shm/sem.faketime_sem_<pid>`,
`faketime_shm_<pid>`) and removes them only when its child ends on its own. Killed (a test's
clean-up ends the process group), it leaves them, and a later wrapper that gets the same PID
refuses to start: "faketime: sem_open: File exists" (a fresh-clone `make test` failed so, on a
machine with 118 such leftovers). A relative offset needs none of what the wrapper shares, so
the library alone does it. The library comes with the `faketime` package
(.ci/install-tools.sh).
"""

from __future__ import annotations

import glob
import os

__all__ = ["LIBFAKETIME", "MISSING", "clock_ahead"]

_FOUND = sorted(
    glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    + glob.glob("/usr/lib/faketime/libfaketime.so.1")
    + glob.glob("/usr/local/lib/faketime/libfaketime.so.1")
)
LIBFAKETIME: str | None = _FOUND[0] if _FOUND else None
MISSING = "needs Debian's faketime (libfaketime; .ci/install-tools.sh installs it)"


def clock_ahead(seconds: int) -> dict[str, str]:
    """This process's environment for a child whose wall clock is `seconds` ahead (its monotonic
    clock untouched: timeouts and sleeps stay real)."""
    assert LIBFAKETIME is not None, MISSING
    preload = os.environ.get("LD_PRELOAD")
    return {
        **os.environ,
        "LD_PRELOAD": f"{LIBFAKETIME} {preload}" if preload else LIBFAKETIME,
        "FAKETIME": f"+{seconds}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
