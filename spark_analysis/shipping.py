"""The project's code for a cluster's executors, shipped the way Spark ships Python code.

The analysis runs functions of `spark_analysis` (and what they import from
`results_contract`) on executors: on a standalone cluster those are other hosts' processes,
which must import the driver's revision of them, not whatever is installed there. So the
driver zips both packages and hands the zip to `SparkContext.addPyFile`: Spark serves it to
every executor and puts it first on the Python workers' sys.path (as `--py-files` does).
Third-party libraries (hdrhistogram) are not shipped: the executors run the driver's Python
(`spark.pyspark.python`), which the playbooks install at the same path on every host.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import zipfile
from importlib import import_module
from pathlib import Path

from pyspark.sql import SparkSession

SHIPPED_PACKAGES = ("spark_analysis", "results_contract")


def package_zip(target: Path, packages: tuple[str, ...] = SHIPPED_PACKAGES) -> Path:
    """One zip of the packages' .py files, importable as a sys.path entry."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in packages:
            package_dir = Path(import_module(name).__file__ or "").parent
            for source in sorted(package_dir.rglob("*.py")):
                archive.write(source, source.relative_to(package_dir.parent).as_posix())
    return target


def ship_code(session: SparkSession) -> Path:
    """Zip the packages into a folder of this process's own and add the zip to the context.

    The folder lives until the process exits: executors may fetch the file at any time the
    context runs. Each call makes its own file name: Spark refuses a name it has registered
    from another path.
    """
    folder = Path(tempfile.mkdtemp(prefix="fanout-bench-pyfiles-"))
    atexit.register(shutil.rmtree, folder, True)
    archive = package_zip(folder / f"{folder.name}.zip")
    session.sparkContext.addPyFile(str(archive))
    return archive
