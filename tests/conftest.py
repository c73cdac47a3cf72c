"""Shared fixtures: the bundled broker as a real process on loopback; and where the tests that
import Locust run."""

from __future__ import annotations

import fcntl
import importlib.abc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parent.parent


LOCUST_PROCESS = "FANOUT_BENCH_LOCUST_PROCESS"
"""Set in the child pytest process that runs the tests marked `locust`."""


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get(LOCUST_PROCESS) and "locust" not in sys.modules:
        sys.meta_path.insert(0, _NoLocustHere())
    if not _is_xdist_worker(config) and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupted)
    config.addinivalue_line(
        "markers",
        "locust: imports Locust (which monkey-patches the process): runs in a pytest process "
        "of its own (tests/unit/test_locust_process.py)",
    )
    config.addinivalue_line(
        "markers",
        "alone: compares latencies of runs, or bounds one tightly, which the other tests' "
        "load would move: `make test` runs these one after another, beside the parallel part "
        "at a higher priority (the Makefile's `test`)",
    )


def _interrupted(signum: int, _frame: object) -> None:
    """SIGTERM ends the run as Ctrl-C does, so that it still stops what it started (its analysis
    service, in pytest_unconfigure): `make test` ends its `alone` part so when it is interrupted,
    a background job, which ignores SIGINT."""
    raise KeyboardInterrupt(f"signal {signum}")


class _NoLocustHere(importlib.abc.MetaPathFinder):
    """Refuses to import Locust into a test process that is not the `locust` one: imported
    at collection (a test module importing the coordinator at its top), it monkey-patches
    every test of the run, and pytest-xdist's own threads with them."""

    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if name == "locust" or name.startswith("locust."):
            raise ImportError(
                "Locust is imported in a test process that is not the `locust` one: import "
                "it (or harness.coordinator, harness.worker, harness.run_command, harness.cli) "
                "inside a test marked `locust`, not at a test module's top (tests/conftest.py)"
            )
        return None


ALONE_FILES_IN = ROOT / "Makefile"


def _check_alone_files_are_run(items: list[pytest.Item]) -> None:
    """`make test`'s `alone` part collects only the files its ALONE_TESTS lists (collecting the
    whole suite for three tests took 4.5 CPU-s in each of its processes): a test marked
    `alone` in another file would be run by neither part, so the run stops here instead."""
    if not ALONE_FILES_IN.exists():
        return
    listed = ALONE_FILES_IN.read_text()
    alone = {item.path for item in items if item.get_closest_marker("alone")}
    missing = sorted(
        str(path.relative_to(ROOT))
        for path in alone
        if path.is_relative_to(ROOT) and str(path.relative_to(ROOT)) not in listed
    )
    if missing:
        raise pytest.UsageError(
            f"tests marked `alone` in {', '.join(missing)}: add the file to the Makefile's "
            "ALONE_TESTS, or make test runs them in neither of its parts"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `locust` leave this process unless it is the child made for them.

    Importing Locust monkey-patches the process with gevent: asyncio/uvloop tests that run
    after it hang, and imported late, beside Spark's py4j threads, it deadlocked on the import
    lock (seen once in a full run). So they run in a fresh process, where Locust comes first.
    """
    if os.environ.get(LOCUST_PROCESS):
        return
    moved = [item for item in items if item.get_closest_marker("locust")]
    if moved:
        items[:] = [item for item in items if not item.get_closest_marker("locust")]
        config.hook.pytest_deselected(items=moved)
    # The analysis service for the tests that may run `bench run` (not for the unit tests
    # alone, `make test-fast`, which would start it for nothing).
    for item in items:
        names = getattr(item, "fixturenames", None)  # a test function's
        if item.get_closest_marker("integration") and names and "analysis_service" not in names:
            names.insert(0, "analysis_service")
    _check_alone_files_are_run(items)
    # Longest first: pytest-xdist hands out files in this order (with --no-loadscope-reorder,
    # as `make test` runs it), and a minutes-long file started last is the whole run's tail.
    # After the listed files, the integration files before the unit files, each by its number
    # of tests, as xdist's own order would have it.
    longest = {name: i for i, name in enumerate(LONGEST_FILES)}
    per_file = Counter(item.path for item in items)
    items.sort(
        key=lambda item: (
            longest.get(f"{item.path.parent.name}/{item.path.name}", len(longest)),
            item.path.parent.name != "integration",
            -per_file[item.path],
        )
    )


LONGEST_FILES = (
    "integration/test_deploy_ansible.py",
    "integration/test_omb_loops.py",
    "integration/test_end_to_end.py",
    "integration/test_analysis_cli.py",
    "integration/test_analysis_spark.py",
    "integration/test_driver_rabbitmq.py",
    "integration/test_live_metrics.py",
    "integration/test_driver_sweep.py",
    "integration/test_ci_workflow.py",
    "integration/test_broker_clock.py",
    "integration/test_run_terminal.py",
    "integration/test_topic_policies.py",
    "integration/test_policy_events_run.py",
    "integration/test_rogue_worker.py",
    "integration/test_deploy_aws_terraform.py",
    "integration/test_analysis_spark_cluster.py",
    "integration/test_harness_runs.py",
    "integration/test_analysis_many_consumers.py",
    "integration/test_remote_broker_cost.py",
    "integration/test_driver_nats.py",
    "integration/test_multi_host.py",
    "integration/test_repeat_run.py",
    "unit/test_admin_http.py",
    "integration/test_warmup_case.py",
    "unit/test_locust_process.py",
    "integration/test_broker_broadcast_durability.py",
    "integration/test_native_driver_tls.py",
    "integration/test_native_driver_auth.py",
    "unit/test_recorder.py",
    "unit/test_stats.py",
)
"""The files that take longest (under tests/), longest first, about 20 s or more each (the 40
slowest tests of a `make test` with `--durations=40`, 2026-11-28 21:03, summed per file;
per-test times of a 19:07 run for the rest): a scheduling hint, nothing else depends on it.
pytest-xdist's `--dist loadfile` hands files out by their number of tests, most first, unless
`--no-loadscope-reorder`: without it this list only broke ties, and the deploy test (3 tests,
160 s) and the one-test files of a minute each went out last.

The `alone` tests run in one process, one after another, beside the parallel part at a higher
priority (`make test`): in two, a latency test's calm run shared the cores with another test's
run."""


SAME_PROCESS = {
    "tests/integration/test_analysis_many_consumers.py": "tests/integration/test_analysis_spark.py"
}
"""Files that `--dist loadfile` hands out as one, to one process: their tests share a session
fixture that costs a JVM per test process (`spark`: its start and first analysis's warm-up).
The two files with `-n 2`, whole tree's CPU with the JVMs: 44.1 and 46.2 CPU-s as one, 55.0
and 56.3 in two processes (2026-11-28 22:22-22:27, load 2-4.5)."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's loadfile scheduling, with the files of SAME_PROCESS in one unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    class _SameProcess(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope: str = super()._split_scope(nodeid)
            return SAME_PROCESS.get(scope, scope)

    return _SameProcess(config, log)


PORTS = range(10000, 20000)
"""Ports the tests' servers take: below the ephemeral range, so outgoing connections never
take one; below the harness's own (harness/embedded_broker.py's free_port: 20000-32000), so a
`bench run` in another test never binds one in the moment between a test's pick and its
server's bind (a broker of the tests failed "Address already in use" so, 2026-11-29); and
split between pytest-xdist's workers (`make test` runs 6), so that two workers never pick the
same free port in that moment either."""

PORTS_ENV = "FANOUT_TEST_PORTS"
"""`FIRST-LAST`: this pytest run's part of PORTS. `make test` runs its two parts at once, each
with a part of its own, so that neither picks a port the other has just picked."""


def run_ports() -> range:
    """PORTS, or the part of it PORTS_ENV gives this pytest run."""
    given = os.environ.get(PORTS_ENV)
    if not given:
        return PORTS
    first, _, last = given.partition("-")
    try:
        ports = range(int(first), int(last) + 1)
    except ValueError:
        ports = range(0)
    if not ports or ports.start < PORTS.start or ports.stop > PORTS.stop:
        raise pytest.UsageError(f"{PORTS_ENV}={given}: not FIRST-LAST within {PORTS}")
    return ports


def own_ports() -> range:
    """This process's share of run_ports(): one of pytest-xdist's workers, or the whole."""
    ports = run_ports()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")  # gw0, gw1, ...
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = len(ports) // max(1, count)
    first = ports.start + share * (int(worker.removeprefix("gw") or 0) % max(1, count))
    return range(first, first + share)


def free_port() -> int:
    """A free port of this worker's share, starting at a place of this process's own."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` different free ports of this worker's share, each held bound until all are found:
    two calls of free_port hand out the same port while neither is bound, and the port after
    one may be anybody's (a broker's admin port at `free_port() + 1` was taken, 2026-11-29)."""
    ports = own_ports()
    start = (os.getpid() * 7) % len(ports)
    held: list[socket.socket] = []
    try:
        for i in range(len(ports)):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", ports[(start + i) % len(ports)]))
            except OSError:
                s.close()
                continue
            held.append(s)
            if len(held) == count:
                return [h.getsockname()[1] for h in held]
    finally:
        for h in held:
            h.close()
    raise RuntimeError(f"fewer than {count} free ports in {ports}")


@dataclass
class BrokerProcess:
    port: int
    admin_port: int
    data_dir: Path
    process: subprocess.Popen
    log_path: Path
    extra: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def kill9(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def restart(self) -> BrokerProcess:
        self.stop()
        return start_broker(self.data_dir, self.port, self.admin_port, self.extra)


def start_broker(
    data_dir: Path,
    port: int | None = None,
    admin_port: int | None = None,
    extra: tuple[str, ...] = (),
) -> BrokerProcess:
    if port is None or admin_port is None:
        found = [p for p in free_ports(3) if p not in (port, admin_port)]
        port = port or found.pop(0)
        admin_port = admin_port or found.pop(0)
    log_path = data_dir.parent / f"broker-{port}.log"
    log = open(log_path, "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker",
            "--port",
            str(port),
            "--admin-port",
            str(admin_port),
            "--data-dir",
            str(data_dir),
            *extra,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    # Ready when both listen: the broker's port opens before its admin API does, and a test
    # that sets a policy or reads stats at once would be refused.
    wait_listening(proc, (port, admin_port), log_path)
    return BrokerProcess(port, admin_port, data_dir, proc, log_path, extra)


class SharedBroker:
    """One broker for a test module whose tests each name topics of their own (a broker start
    is about 0.75 CPU-s): a test that stops, restarts or kills it puts the broker now running
    back in `broker`."""

    def __init__(self, data_dir: Path, extra: tuple[str, ...] = ()) -> None:
        self.broker = start_broker(data_dir, extra=extra)

    def running(self) -> SharedBroker:
        """Itself, its broker started again if a test before this one failed with it stopped."""
        if self.broker.process.poll() is not None:
            self.broker = self.broker.restart()
        return self


def wait_listening(
    proc: subprocess.Popen[bytes], ports: tuple[int, ...], log_path: Path, timeout: float = 20
) -> None:
    """Until a broker process listens on every port of 127.0.0.1; its log's tail if it exits
    first, killed if it does not listen in `timeout` s."""
    waiting = list(ports)
    deadline = time.monotonic() + timeout
    while waiting:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited: {log_path.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("broker did not start")
        try:
            with socket.create_connection(("127.0.0.1", waiting[0]), timeout=0.2):
                waiting.pop(0)
        except OSError:
            time.sleep(0.05)


def eventually(check: Callable[[], bool], timeout_s: float = 15) -> None:
    """Wait for a condition the broker reaches on its own, polling, with a deadline."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def topic_stats(broker: BrokerProcess, topic: str) -> dict[str, Any]:
    url = f"{broker.admin}/admin/v2/persistent/public/default/{topic}/stats"
    with urllib.request.urlopen(url, timeout=5) as reply:
        stats: dict[str, Any] = json.load(reply)
    return stats


def wait_cursors_saved(broker: BrokerProcess, topic: str, acked: Callable[[dict], bool]) -> None:
    """Wait until the broker has what `acked` looks for in the topic's stats (the client
    groups its acks) with no cursor change of the topic left unwritten, in the same stats:
    what a kill -9 must not lose is on disk. No fixed sleep past the persistence interval."""
    eventually(
        lambda: acked(stats := topic_stats(broker, topic)) and not stats["cursorPersistPending"]
    )


@pytest.fixture(scope="session", autouse=True)
def kernel_stamping_on() -> Iterator[None]:
    """Linux turns software receive timestamps on system-wide when a first socket asks, by a
    deferred work item: until it runs (later on a busy machine) packets come unstamped, and
    it turns them off again when the last such socket closes. One socket holding them for the
    session keeps them on, so a test's first few reads are stamped as a run's are."""
    from drivers.net import rx_timestamps

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as holder:
        rx_timestamps.enable(holder)
        yield


ANALYSIS_MASTER = "local[1]"
"""The master of the test run's analysis service: most tests' `bench run --spark-master`."""


@pytest.fixture(scope="session")
def analysis_service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """One `spark_analysis --serve --socket` for the whole test run (for every integration
    test), which every `bench run` with ANALYSIS_MASTER that a test starts uses
    (FANOUT_ANALYSIS_SOCKET, inherited): the runs of `make test` analyse in one JVM instead of
    a JVM each. Its session is built at the first folder, so a run that analyses nothing
    starts no JVM.

    pytest-xdist's workers share it: the first that needs it starts it, the others find it
    (_analysis_home), and the controller stops it once they are all done (pytest_unconfigure).
    A JVM per worker cost each worker that analysed anything its start and first analysis's
    warm-up again (about 13 CPU-s, and 1 more for the service's Python), for the same answers:
    the service takes the folders one at a time whoever sends them."""
    from harness.analysis import SOCKET_ENV

    home = _analysis_home(request.config)
    home.mkdir(exist_ok=True)
    path = home / "analysis.sock"
    proc = None
    with open(home / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker starts it; the others wait, then find it
        if _service_pid(home) is None:
            log = tmp_path_factory.mktemp("analysis-service") / "analysis-spark.log"
            path.unlink(missing_ok=True)  # a stale one from a run that was killed
            proc = subprocess.Popen(
                [sys.executable, "-m", "spark_analysis", "--serve", str(log), "--socket"]
                + [str(path), "--spark-master", ANALYSIS_MASTER],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
            )
            (home / "pid").write_text(str(proc.pid))
            _STARTED.append(proc)  # an xdist worker does not wait for it: kept, not collected
            eventually(lambda: path.exists() or proc.poll() is not None, timeout_s=60)
            assert proc.poll() is None, (
                f"the analysis service ended (exit {proc.returncode}): {log}"
            )
    os.environ[SOCKET_ENV] = str(path)
    try:
        yield path
    finally:
        os.environ.pop(SOCKET_ENV, None)
        # A run in one process: the service is its own.
        if not _is_xdist_worker(request.config):
            _stop_analysis_service(home, proc)


_STARTED: list[subprocess.Popen[bytes]] = []


def pytest_unconfigure(config: pytest.Config) -> None:
    """pytest-xdist's controller, once its workers are done: the analysis service they shared
    (nothing when none was started; a run in one process stopped its own already)."""
    if not _is_xdist_worker(config):
        _stop_analysis_service(_analysis_home(config), None)


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _analysis_home(config: pytest.Config) -> Path:
    """The analysis service's socket, process id and lock, named after the pytest process that
    runs the session (for an xdist worker, its controller, whose child it is): every worker of
    a run finds the same, another run (another engineer's) another. Not under pytest's deep
    tmp folders: a Unix socket's path must be short (108 bytes)."""
    owner = os.getppid() if _is_xdist_worker(config) else os.getpid()
    return Path(tempfile.gettempdir()) / f"fanout-analysis-{owner}"


def _service_pid(home: Path) -> int | None:
    """The process id of the analysis service `home` names, if it runs and serves there."""
    try:
        pid = int((home / "pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if _serving(pid, home) and (home / "analysis.sock").exists() else None


def _serving(pid: int, home: Path) -> bool:
    """Whether process `pid` runs (not a zombie) and is the service of `home` (not another
    process that got the id since)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            ours = str(home / "analysis.sock").encode() in cmdline.read()
        with open(f"/proc/{pid}/stat") as stat:
            zombie = stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False
    return ours and not zombie


def _stop_analysis_service(home: Path, proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM (the service stops its Spark session on the way out), 60 s, then SIGKILL; the
    folder goes with it. `proc` when it is this process's child (to reap it), else by id."""
    if not home.is_dir():
        return
    if proc is not None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    elif (pid := _service_pid(home)) is not None:
        os.kill(pid, signal.SIGTERM)
        try:
            eventually(lambda: not _serving(pid, home), timeout_s=60)
        except AssertionError:
            os.kill(pid, signal.SIGKILL)
    for name in ("analysis.sock", "pid", "lock"):
        (home / name).unlink(missing_ok=True)
    try:
        home.rmdir()
    except OSError:
        pass


IN_PROCESS_MASTER = "local[2]"
"""The master of the tests that call the analysis in their own process: two partitions, so
that what is merged is merged across partitions."""


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One SparkSession per test process for the tests that call the analysis in-process
    (tests/integration/test_analysis_*.py). PySpark keeps its JVM until the process ends,
    even once a session stops, so a module's own session saved no JVM; it only paid a new
    context and a new Python daemon (about 3 CPU-s) and, whenever such modules shared a
    process, the first analysis's warm-up again. Started at the first test that asks."""
    from spark_analysis.session import build_session

    session = build_session(IN_PROCESS_MASTER)
    yield session
    session.stop()


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """One headless Chromium (Debian's package) per test file, for the report's browser tests;
    each test gets a context of its own (`browser`). Not one per process: Playwright's sync API
    keeps its event loop set as the thread's running loop until it stops, and every later test
    file of the process that ran asyncio failed ("asyncio.run() cannot be called from a running
    event loop": 67 broker tests in the make test of 2026-11-29 05:25)."""
    playwright = pytest.importorskip("playwright.sync_api")
    if not shutil.which(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium; make tools does as root)")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def browser(chromium: Browser) -> Iterator[BrowserContext]:
    """A context of its own in the process's Chromium for each test: nothing (cookies,
    storage, pages) is left from the test before, and its pages close with it."""
    context = chromium.new_context()
    yield context
    context.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path / "data", extra=("--set", "journalSyncData=false"))
    yield b
    b.stop()
