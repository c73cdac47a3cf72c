"""File-system helpers shared by the ledger and the cursor store."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def fsync_path(path: Path, fsync: Callable[[int], None]) -> None:
    """fsync a file or directory by name: fsync acts on the inode, so any descriptor will do.

    Directories need it after a file is created, renamed or removed in them, or the name itself
    may not survive a power cut.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fsync(fd)
    finally:
        os.close(fd)
