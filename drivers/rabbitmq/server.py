"""The embedded RabbitMQ node: what drivers/rabbitmq.yaml's `embeddedBroker` runs, as
`python -m drivers.rabbitmq.server --port P --dist-port D --data-dir DIR`.

RabbitMQ is an Erlang node, and an Erlang node needs more than one program: the port mapper
(epmd), which the node starts as a daemon of its own when none answers, and would be left
running after the node stops. So this small launcher stands between the harness and RabbitMQ:
- it writes the node's configuration, enabled plugins (none) and feature flags files into the
  run's data folder, and points RabbitMQ at them and at nothing of the system's (no
  /etc/rabbitmq, no /var/lib/rabbitmq);
- it starts epmd itself, in the foreground, on a free loopback port of its own
  (ERL_EPMD_PORT), so the node finds it and starts none, and no other Erlang node on the host
  is touched;
- it runs RabbitMQ's own start script (`/usr/lib/rabbitmq/bin/rabbitmq-server` on Debian, not
  the `/usr/sbin` wrapper, which needs root and drops to the `rabbitmq` user through `su`, so
  the node would run as another user in a folder it must own, behind two more processes) as
  the user running the harness, in a process group of its own;
- on SIGTERM or SIGINT (the harness stops its broker by PID) it stops the node (the script
  turns SIGTERM into a clean stop), kills the group if the node is not gone in
  STOP_TIMEOUT_S, stops epmd, and removes the node's database (the logs stay in the run).

The harness samples the CPU of the process serving the broker's port (beam.smp, below this
one): harness/embedded_broker.py finds it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

SCRIPTS = ("/usr/lib/rabbitmq/bin/rabbitmq-server", "/usr/local/lib/rabbitmq/bin/rabbitmq-server")
"""Where Debian (and a source install) keep RabbitMQ's own start script; elsewhere the
`rabbitmq-server` on PATH (Homebrew, the generic Unix build) is that script itself."""
INSTALL = "apt-get install rabbitmq-server; .ci/install-tools.sh does"
STOP_TIMEOUT_S = 8.0
"""Within the harness's 10 s before it kills this launcher (harness/child_process.py)."""
EPMD_READY_S = 10.0

CONFIG = """\
# Written by drivers/rabbitmq/server.py for one benchmark run; the listener is
# RABBITMQ_NODE_IP_ADDRESS:RABBITMQ_NODE_PORT (a listener here too would bind the port twice).
tcp_listen_options.backlog = 4096
tcp_listen_options.nodelay = true
num_acceptors.tcp = 10
loopback_users = none
default_vhost = /
default_user = guest
default_pass = guest
disk_free_limit.absolute = 50MB
log.console = false
log.file.level = info
"""


def rabbitmq_script(given: str | None) -> str:
    """RabbitMQ's start script; exits naming the package when none is installed."""
    if given:
        return given
    for path in SCRIPTS:
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("rabbitmq-server")
    if found and not found.startswith(("/usr/sbin/", "/sbin/")):
        return found
    sys.exit(f"rabbitmq-server is not installed ({INSTALL})")


def version(script: str) -> str:
    """'RabbitMQ 3.10.8': from the folder the start script lives in
    (`.../rabbitmq_server-3.10.8/sbin`), without starting a node."""
    folder = Path(script).resolve().parent.parent.name
    name, _, number = folder.rpartition("-")
    if name == "rabbitmq_server" and number:
        return f"RabbitMQ {number}"
    return f"RabbitMQ (version unknown: {script} is not in a rabbitmq_server-<version> folder)"


def free_port(host: str) -> int:
    """A free port below the ephemeral range, for epmd."""
    start = (os.getpid() * 2654435761) % 12000
    for k in range(12000):
        port = 20000 + (start + 7919 * k) % 12000
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    sys.exit("no free port for epmd between 20000 and 32000")


def listening(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
    except OSError:
        return False
    return True


def node_env(args: argparse.Namespace, epmd_port: int) -> dict[str, str]:
    data = Path(args.data_dir).resolve()
    files = {
        "config": data / "rabbitmq.conf",
        "plugins": data / "enabled_plugins",
        "flags": data / "feature_flags",
    }
    files["config"].write_text(CONFIG)
    files["plugins"].write_text("[].\n")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RABBITMQ_", "ERL_", "NOTIFY_SOCKET"))
    }
    env.update(
        HOME=str(data),  # the Erlang cookie goes here, not in the user's home
        RABBITMQ_NODENAME=f"fanout{args.port}@localhost",
        RABBITMQ_USE_LONGNAME="false",
        RABBITMQ_NODE_IP_ADDRESS=args.host,
        RABBITMQ_NODE_PORT=str(args.port),
        RABBITMQ_DIST_PORT=str(args.dist_port),
        RABBITMQ_MNESIA_BASE=str(data / "mnesia"),
        RABBITMQ_LOG_BASE=str(data / "log"),
        RABBITMQ_CONFIG_FILE=str(files["config"]),
        RABBITMQ_ADVANCED_CONFIG_FILE=str(data / "advanced.config"),
        RABBITMQ_CONF_ENV_FILE=str(data / "rabbitmq-env.conf"),
        RABBITMQ_ENABLED_PLUGINS_FILE=str(files["plugins"]),
        RABBITMQ_FEATURE_FLAGS_FILE=str(files["flags"]),
        RABBITMQ_PID_FILE=str(data / "rabbitmq.pid"),
        ERL_EPMD_PORT=str(epmd_port),
        ERL_EPMD_ADDRESS="127.0.0.1",
    )
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, help="AMQP port")
    parser.add_argument("--dist-port", type=int, help="Erlang distribution port")
    parser.add_argument("--data-dir")
    parser.add_argument("--rabbitmq-server", help="RabbitMQ's start script (found if not given)")
    parser.add_argument("--keep-data", action="store_true", help="keep the node's database")
    parser.add_argument("--version", action="store_true", help="print RabbitMQ's version")
    args = parser.parse_args(argv)
    script = rabbitmq_script(args.rabbitmq_server)
    if args.version:
        print(version(script))
        return 0
    if args.port is None or args.dist_port is None or args.data_dir is None:
        parser.error("--port, --dist-port and --data-dir are required")
    epmd = shutil.which("epmd") or sys.exit(f"epmd (Erlang) is not installed ({INSTALL})")
    Path(args.data_dir).mkdir(parents=True, exist_ok=True)
    epmd_port = free_port("127.0.0.1")
    env = node_env(args, epmd_port)

    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    epmd_proc = subprocess.Popen(
        [epmd, "-port", str(epmd_port), "-address", "127.0.0.1"],
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    node: subprocess.Popen[bytes] | None = None
    code = 1
    try:
        deadline = time.monotonic() + EPMD_READY_S
        while not listening("127.0.0.1", epmd_port):
            if epmd_proc.poll() is not None or time.monotonic() > deadline or stopping:
                print(f"epmd did not listen on 127.0.0.1:{epmd_port}", file=sys.stderr)
                return 1
            time.sleep(0.05)
        node = subprocess.Popen([script], env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        while not stopping and node.poll() is None:
            time.sleep(0.1)
        if node.poll() is not None:  # on its own (killed, crashed): never 0
            code = node.returncode or 1
            print(f"rabbitmq-server exited on its own ({node.returncode})", file=sys.stderr)
        else:
            code = 0
    finally:
        if node is not None:
            _end_group(node, STOP_TIMEOUT_S)
        _end_group(epmd_proc, 2.0)
        if not args.keep_data:
            shutil.rmtree(Path(args.data_dir) / "mnesia", ignore_errors=True)
    return code


def _end_group(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM to the process, SIGKILL to its whole group if it has not ended in time (the
    node's beam.smp and its helpers share the script's group)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # anything of the group left behind
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


if __name__ == "__main__":
    sys.exit(main())
