"""spark_analysis/standalone.py: the command line and environment of the Spark daemons the
playbooks' spark_cluster role runs (the daemons themselves run in the deploy test)."""

from __future__ import annotations

import os

import pytest

from spark_analysis.java_runtime import NoJavaError, choose_java
from spark_analysis.standalone import command, environment, spark_home


def test_the_daemons_are_pysparks_spark_class():
    home = spark_home()
    assert (home / "bin" / "spark-class").is_file()
    assert command("master", ["--host", "10.0.0.1"], home) == [
        str(home / "bin" / "spark-class"),
        "org.apache.spark.deploy.master.Master",
        "--host",
        "10.0.0.1",
    ]
    assert command("worker", ["spark://h:7077"], home)[1] == "org.apache.spark.deploy.worker.Worker"


def test_the_environment_names_spark_java_the_host_address_and_scratch(tmp_path):
    try:
        java = choose_java(os.environ)
    except NoJavaError as exc:
        pytest.skip(str(exc))
    home = spark_home()
    base = {"PATH": os.environ.get("PATH", ""), "TMPDIR": str(tmp_path)}
    if "JAVA_HOME" in os.environ:
        base["JAVA_HOME"] = os.environ["JAVA_HOME"]
    env = environment(base, ["spark://h:7077", "--host", "10.0.0.2", "--port", "7078"], home)
    assert env["SPARK_HOME"] == str(home)
    assert env["JAVA_HOME"] == str(java.home)
    assert env["PATH"].split(os.pathsep)[0] == str(java.home / "bin")
    assert env["SPARK_LOCAL_IP"] == "10.0.0.2"
    assert env["SPARK_LOCAL_DIRS"] == str(tmp_path / "spark")
    # An address set by hand wins; without TMPDIR Spark keeps its own scratch default.
    mine = environment({**base, "SPARK_LOCAL_IP": "10.0.0.9"}, ["--host", "10.0.0.2"], home)
    assert mine["SPARK_LOCAL_IP"] == "10.0.0.9"
    assert "SPARK_LOCAL_DIRS" not in environment({"PATH": base["PATH"]}, [], home)
