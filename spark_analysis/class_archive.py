"""Where the local driver JVM's class archive (Java's dynamic CDS) lives, and the flags that
read or write it.

Most of a short analysis's CPU is the JVM loading Spark's classes; an archive of them, written
once by a JVM that ran a representative job (spark_analysis/make_class_archive.py), is mapped
by the next JVMs instead (docs/benchmarks.md, "The class archive": about -30 % CPU per
analysis). The JVM checks an archive itself (its own build, the classpath) and runs on
without one that does not match; the key below only keeps one archive per Java runtime and
Spark so that a changed one gets a new archive instead of a useless one. What the JVM does
not survive is a truncated file (SIGBUS), so an archive only appears under its final name
once complete.

It lives in the venv (share/fanout-bench/), next to the PySpark whose jars it holds: `make`
writes it with the venv, `make clean` removes it with the venv, and every process using this
venv finds it without a setting. About 160 MB.
"""

from __future__ import annotations

import hashlib
import shlex
import sys
from pathlib import Path

import pyspark
from pyspark.find_spark_home import _find_spark_home

ARCHIVE_DIR = Path(sys.prefix) / "share" / "fanout-bench"
# The JVM's warnings about an archive it cannot use (another build or classpath) go to
# stdout, which `spark_analysis --serve` answers on: they are off; the JVM runs on without.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def runtime_identity(java_home: Path) -> str:
    """What the archive depends on: the real `java` binary (its path, size and time) and its
    runtime's `release` file (the exact build), PySpark's version and the Spark home whose
    jars are the classpath."""
    java = (java_home / "bin" / "java").resolve()
    release = java.parent.parent / "release"
    stat = java.stat() if java.exists() else None
    parts = [
        str(java),
        f"{stat.st_size}:{stat.st_mtime_ns}" if stat else "missing",
        release.read_text(errors="replace") if release.is_file() else "no release file",
        pyspark.__version__,
        str(Path(_find_spark_home()).resolve()),
    ]
    return "\n".join(parts)


def archive_path(java_home: Path) -> Path:
    """The archive for this Java runtime and Spark; a change of either is another file.
    (Archives of an earlier one stay until `make clean`: a venv may serve two Javas.)"""
    key = hashlib.sha256(runtime_identity(java_home).encode()).hexdigest()[:16]
    return ARCHIVE_DIR / f"spark-{key}.jsa"


def use_options(java_home: Path) -> str:
    """The driver JVM flags that map the archive, or "" when there is none (yet). The path is
    quoted when it needs to be (a venv path with spaces): Spark splits the options as a shell
    would."""
    path = archive_path(java_home)
    if not path.is_file():
        return ""
    return f"{shlex.quote(f'-XX:SharedArchiveFile={path}')} {QUIET}"


def write_options(partial: Path) -> str:
    """The flag that makes a JVM write its loaded classes to `partial` when it exits (quoted
    as above)."""
    return shlex.quote(f"-XX:ArchiveClassesAtExit={partial}")
