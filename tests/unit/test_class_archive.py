"""The local driver JVM's class archive (spark_analysis/class_archive.py,
make_class_archive.py): keyed by what it depends on, used only when it exists, and never left
half-written under its final name (a truncated archive crashes the JVM)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

import pyspark
import pytest

from spark_analysis import class_archive
from spark_analysis.make_class_archive import create
from spark_analysis.session import QUICK_START_JVM, local_driver_options


def fake_java_home(root: Path, version: str) -> Path:
    """A runtime as the key reads it: bin/java and a `release` file naming the build."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "java").write_text("#!/bin/sh\n")
    (root / "release").write_text(f'JAVA_RUNTIME_VERSION="{version}"\n')
    return root


@pytest.fixture
def archive_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "share"
    monkeypatch.setattr(class_archive, "ARCHIVE_DIR", directory)
    return directory


def test_the_key_follows_the_java_runtime_and_pyspark(
    tmp_path: Path, archive_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = fake_java_home(tmp_path / "jdk-a", "17.0.15+6")
    other = fake_java_home(tmp_path / "jdk-b", "17.0.15+6")
    first = class_archive.archive_path(home)
    assert first.parent == archive_dir and first.name.endswith(".jsa")
    assert class_archive.archive_path(home) == first  # the same runtime, the same archive
    assert class_archive.archive_path(other) != first  # another path

    (home / "release").write_text('JAVA_RUNTIME_VERSION="17.0.16+8"\n')  # upgraded in place
    upgraded = class_archive.archive_path(home)
    assert upgraded != first

    monkeypatch.setattr(pyspark, "__version__", "9.9.9")
    assert class_archive.archive_path(home) != upgraded
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))  # another Spark's jars
    assert class_archive.archive_path(home) not in (first, upgraded)


def test_a_symlinked_java_home_shares_the_archive_of_its_target(
    tmp_path: Path, archive_dir: Path
) -> None:
    """/usr/lib/jvm/default-java and the versioned folder it points to are one runtime."""
    home = fake_java_home(tmp_path / "jdk-17", "17.0.15+6")
    (tmp_path / "default-java").symlink_to(home)
    assert class_archive.archive_path(tmp_path / "default-java") == class_archive.archive_path(home)


def test_the_driver_maps_the_archive_only_once_it_exists(tmp_path: Path, archive_dir: Path) -> None:
    home = fake_java_home(tmp_path / "jdk", "17.0.15+6")
    assert local_driver_options(home) == QUICK_START_JVM

    archive = class_archive.archive_path(home)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    options = shlex.split(local_driver_options(home))  # as Spark splits them
    assert options[:2] == QUICK_START_JVM.split()
    assert f"-XX:SharedArchiveFile={archive}" in options
    # The JVM's warnings go to stdout, where `spark_analysis --serve` answers.
    assert {"-Xlog:cds=off", "-Xlog:cds+dynamic=off"} <= set(options)


def test_the_writing_jvm_writes_and_does_not_map(tmp_path: Path, archive_dir: Path) -> None:
    home = fake_java_home(tmp_path / "jdk", "17.0.15+6")
    archive = class_archive.archive_path(home)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"an older one")
    partial = tmp_path / "partial"
    options = shlex.split(local_driver_options(home, write_archive_to=partial))
    assert f"-XX:ArchiveClassesAtExit={partial}" in options
    assert not any(option.startswith("-XX:SharedArchiveFile") for option in options)


def _jvm(status: int, content: bytes | None, seen: list[Path]) -> Callable[[Path], int]:
    """A stand-in for the dumping JVM: writes `content` to the partial name, exits `status`."""

    def run(partial: Path) -> int:
        seen.append(partial)
        if content is not None:
            partial.write_bytes(content)
        return status

    return run


def test_a_clean_exit_renames_the_archive_into_place(tmp_path: Path) -> None:
    final = tmp_path / "share" / "spark-k.jsa"
    seen: list[Path] = []
    assert create(final, _jvm(0, b"classes", seen)) is None
    assert final.read_bytes() == b"classes"
    assert seen[0].parent == final.parent and seen[0] != final  # written beside, then renamed
    assert sorted(p.name for p in final.parent.iterdir()) == ["spark-k.jsa"]


@pytest.mark.parametrize(
    ("status", "content", "why"),
    [
        (134, b"truncated", "exited with status 134"),  # killed mid-write
        (0, None, "wrote no archive"),  # e.g. a JRE without a base archive
        (0, b"", "wrote no archive"),
    ],
)
def test_a_failed_dump_leaves_nothing_at_the_final_path(
    tmp_path: Path, status: int, content: bytes | None, why: str
) -> None:
    final = tmp_path / "share" / "spark-k.jsa"
    answer = create(final, _jvm(status, content, []))
    assert answer is not None and why in answer
    assert list(final.parent.iterdir()) == []


def test_a_crash_while_dumping_leaves_nothing_either(tmp_path: Path) -> None:
    final = tmp_path / "share" / "spark-k.jsa"

    def crash(partial: Path) -> int:
        partial.write_bytes(b"half")
        raise TimeoutError("the JVM did not exit")

    with pytest.raises(TimeoutError):
        create(final, crash)
    assert list(final.parent.iterdir()) == []


def test_a_path_with_spaces_stays_one_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark splits spark.driver.extraJavaOptions as a shell would."""
    monkeypatch.setattr(class_archive, "ARCHIVE_DIR", tmp_path / "my venv" / "share")
    home = fake_java_home(tmp_path / "jdk", "17.0.15+6")
    archive = class_archive.archive_path(home)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    assert f"-XX:SharedArchiveFile={archive}" in shlex.split(local_driver_options(home))
    partial = archive.with_name("partial one")
    assert shlex.split(local_driver_options(home, partial))[-1] == (
        f"-XX:ArchiveClassesAtExit={partial}"
    )
