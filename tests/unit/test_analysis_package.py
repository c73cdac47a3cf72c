"""The spark_analysis package loads its jobs when first asked for: `make`'s Java check and the
class archive's writer import light modules of it, and should not pay for PySpark and NumPy."""

from __future__ import annotations

import subprocess
import sys

import pytest

import spark_analysis
from spark_analysis import job
from tests.conftest import ROOT


def _modules_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after `statement`."""
    done = subprocess.run(
        [sys.executable, "-c", f"{statement}\nimport sys\nprint(' '.join(sys.modules))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return set(done.stdout.split())


def test_the_java_check_imports_neither_spark_nor_the_jobs() -> None:
    loaded = _modules_after("import spark_analysis.java_runtime")
    assert "spark_analysis.java_runtime" in loaded
    assert not {"pyspark", "numpy", "spark_analysis.job"} & loaded


def test_the_jobs_are_the_package_attributes_the_docs_name() -> None:
    assert spark_analysis.analyze_run is job.analyze_run
    assert spark_analysis.analyze_path is job.analyze_path
    assert spark_analysis.analyze_sweep is job.analyze_sweep
    with pytest.raises(AttributeError, match="has no attribute 'analyse_run'"):
        spark_analysis.analyse_run  # noqa: B018 - the attribute access is the test
