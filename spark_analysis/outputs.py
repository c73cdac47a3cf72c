"""Writing result files so that a reader never sees half of one."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path, document: Any) -> None:
    """Write JSON to a temporary file next to `path`, then rename it over `path`.

    os.replace within one directory is atomic, so a crash leaves the old file or the new one.
    (Not tempfile.mkstemp: its files are private, 0600, and results are meant to be shared.)
    allow_nan=False: NaN is not JSON, and the reports would choke on it later.
    """
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as stream:
            json.dump(document, stream, indent=2, allow_nan=False)
            stream.write("\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
