"""`bench analyze --spark-master spark://…` on a real Spark standalone cluster: a master and
one worker started from the venv's pyspark as separate JVM processes on 127.0.0.1, the
executors getting the project's code from the driver (a zip through addPyFile) and running
the driver's Python. The run folder is test_analysis_spark's synthetic run (three workers'
raw files of every kind); its summary.json must equal local mode's.

No field is ignored in the comparison: summary.json holds no timing of the analysis itself
and no Spark master, and with the same number of partitions (local[2]; a 1-core cluster's
default parallelism is also 2) the sums run in the same order.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

from spark_analysis.java_runtime import NoJavaError, choose_java
from spark_analysis.session import local_driver_options
from tests.conftest import free_ports
from tests.integration.test_analysis_spark import build_run

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
APP_NAME = "fanout-bench-analysis"  # spark_analysis/session.py


@dataclass
class Cluster:
    url: str
    ui: str
    env: dict[str, str]

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as answer:
            return json.load(answer)


def spark_class(name: str, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """One Spark daemon in the foreground (spark-class execs the JVM: this PID is it), in a
    process group of its own so its executors go with it."""
    with open(log, "ab") as stream:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), name, *args],
            env=env,
            stdout=stream,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(process: subprocess.Popen) -> None:
    """SIGTERM (a worker kills its executors on the way out), then the whole group by id."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    try:
        os.killpg(process.pid, signal.SIGKILL)  # any executor left in the worker's group
    except ProcessLookupError:
        pass


def wait_for(what: str, check: Callable[[], bool], logs: list[Path], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    tails = "\n".join(f"--- {log}\n{log.read_text()[-3000:]}" for log in logs if log.exists())
    raise AssertionError(f"{what} within {timeout:.0f} s\n{tails}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    try:
        java = choose_java(os.environ)
    except NoJavaError as exc:
        pytest.skip(str(exc))
    folder = tmp_path_factory.mktemp("spark-cluster")
    quick = local_driver_options(java.home)
    master_port, master_ui, worker_port, worker_ui = free_ports(4)
    env = dict(
        os.environ,
        JAVA_HOME=str(java.home),
        PATH=f"{java.home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_DIRS=str(folder / "local"),
        # Every JVM of the test starts as the analysis's local driver does (C1, the serial
        # collector, the class archive when there is one): they live for a minute, and
        # without, master, worker, executor and driver took 102 of the test's 118 CPU-s.
        SPARK_DAEMON_JAVA_OPTS=quick,
        PYSPARK_SUBMIT_ARGS=shlex.join(
            [
                *("--conf", f"spark.driver.extraJavaOptions={quick}"),
                *("--conf", f"spark.executor.extraJavaOptions={quick}"),
                "pyspark-shell",
            ]
        ),
    )
    url = f"spark://127.0.0.1:{master_port}"
    logs = [folder / "master.log", folder / "worker.log"]
    master = spark_class(
        "org.apache.spark.deploy.master.Master",
        ["--host", "127.0.0.1", "--port", str(master_port), "--webui-port", str(master_ui)],
        env,
        logs[0],
    )
    worker = None
    try:
        running = Cluster(url, f"http://127.0.0.1:{master_ui}", env)
        wait_for("the master's web UI answers", lambda: running.state()["status"] == "ALIVE", logs)
        worker = spark_class(
            "org.apache.spark.deploy.worker.Worker",
            [
                url,
                "--host",
                "127.0.0.1",
                "--port",
                str(worker_port),
                "--webui-port",
                str(worker_ui),
                "--cores",
                "1",
                "--memory",
                "1g",
                "--work-dir",
                str(folder / "work"),
            ],
            env,
            logs[1],
        )
        wait_for("a worker registered", lambda: running.state()["aliveworkers"] == 1, logs)
        yield running
    finally:
        if worker is not None:
            stop(worker)
        stop(master)


# The driver: one process of its own (so no SparkSession of the pytest process is reused).
# It first asks an executor where its code came from, then runs `bench analyze RUN
# --spark-master URL` (harness/cli.py hands `analyze` to this same function) on the session
# it already holds, stops it, and analyses the copy in local mode on the same JVM: one JVM
# and one executor start in all.
DRIVER = """
import json, os, sys
from spark_analysis.__main__ import main
from spark_analysis.session import build_session

url, run_dir, local_dir = sys.argv[1:4]
session = build_session(url)

def where(_):
    import results_contract.hlog
    import spark_analysis.histograms
    yield (spark_analysis.histograms.__file__, results_contract.hlog.__file__,
           sys.executable, os.getpid())

found = session.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
code = main([run_dir, "--spark-master", url])
session.stop()
local_code = main([local_dir, "--spark-master", "local[2]"])
print(json.dumps({"found": found, "driver_pid": os.getpid(), "codes": [code, local_code]}))
"""


def test_analysis_on_a_standalone_cluster_equals_local_mode(
    cluster: Cluster, tmp_path: Path
) -> None:
    run_dir, _ = build_run(tmp_path / "local", "run")
    on_cluster = tmp_path / "cluster" / "run"
    shutil.copytree(run_dir, on_cluster)

    done = subprocess.run(
        [sys.executable, "-c", DRIVER, cluster.url, str(on_cluster), str(run_dir)],
        cwd=ROOT,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["codes"] == [0, 0], done.stderr[-4000:]
    # The executor imported the analysis from the zip the driver shipped (not from the venv's
    # install of the project), ran the driver's interpreter, and was another process.
    [[histograms, hlog, python, executor_pid]] = answer["found"]
    for module_file in (histograms, hlog):
        assert ".zip" in module_file and "fanout-bench-pyfiles-" in module_file, module_file
    assert python == sys.executable
    assert executor_pid != answer["driver_pid"]
    apps = cluster.state()["completedapps"]
    assert [app["name"] for app in apps] == [APP_NAME]  # it ran on the cluster, not locally

    local = json.loads((run_dir / "summary.json").read_text())
    remote = json.loads((on_cluster / "summary.json").read_text())
    assert remote == local
    assert (on_cluster / "omb-result.json").read_text() == (run_dir / "omb-result.json").read_text()
